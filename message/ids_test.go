package message

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWorkflowIDQualifiesByQueue(t *testing.T) {
	require.Equal(t, "retry/orders/m-1", WorkflowID("orders", "m-1"))
	require.NotEqual(t, WorkflowID("orders", "m-1"), WorkflowID("billing", "m-1"),
		"two services failing on one fanned-out message are two retries")
}

func TestMessageIDOrFallback(t *testing.T) {
	body := []byte("hello")
	fb := FallbackMessageID("orders", body)
	require.True(t, strings.HasPrefix(fb, "sha256-"))
	require.Len(t, fb, len("sha256-")+32)
	require.Equal(t, fb, FallbackMessageID("orders", body), "deterministic")
	require.NotEqual(t, fb, FallbackMessageID("billing", body))
	require.NotEqual(t, fb, FallbackMessageID("orders", []byte("other")))

	cases := map[string]string{
		"m-1":                                  "m-1",
		"":                                     fb,
		strings.Repeat("x", MaxMessageIDLen):   strings.Repeat("x", MaxMessageIDLen),
		strings.Repeat("x", MaxMessageIDLen+1): fb,
		"bad\nid":                              fb,
		"not-utf8-\xff":                        fb,
	}
	for in, want := range cases {
		require.Equal(t, want, MessageIDOrFallback(in, "orders", body), "id %q", in)
	}
}

func TestWorkflowIDFitsTheSQLStores(t *testing.T) {
	queue := strings.Repeat("q", 255)
	id := strings.Repeat("m", 256)
	wid := WorkflowID(queue, id)
	require.LessOrEqual(t, len(wid), MaxWorkflowIDLen)
	require.Equal(t, wid, WorkflowID(queue, id), "deterministic")
	require.True(t, strings.HasPrefix(wid, "retry/sha256-"), wid)
	require.NotEqual(t, wid, WorkflowID(queue, id[1:]), "another message, another workflow")
	require.NotEqual(t, wid, WorkflowID(queue[1:], id), "another queue, another workflow")
	_, ok := MessageIDOf(wid, queue)
	require.False(t, ok, "a hashed ID does not name the message")

	// The longest plain ID is kept as it is, one byte more is hashed.
	fit := strings.Repeat("m", MaxWorkflowIDLen-len("retry/orders/"))
	require.Equal(t, "retry/orders/"+fit, WorkflowID("orders", fit))
	require.True(t, strings.HasPrefix(WorkflowID("orders", fit+"m"), "retry/sha256-"))

	got, ok := MessageIDOf(WorkflowID("orders", "m-1"), "orders")
	require.True(t, ok)
	require.Equal(t, "m-1", got)
	_, ok = MessageIDOf(WorkflowID("orders", "m-1"), "billing")
	require.False(t, ok)
}

func TestPoisonWorkflowID(t *testing.T) {
	require.Equal(t, "retry/retry.scheduled/bad-1", PoisonWorkflowID("retry.scheduled", "", "bad-1"))
	require.Equal(t, "retry/retry.scheduled/bad-1", PoisonWorkflowID("retry.scheduled", "retry.scheduled", "bad-1"))
	require.Equal(t, "retry/retry.scheduled/orders/bad-1", PoisonWorkflowID("retry.scheduled", "orders", "bad-1"))
	require.NotEqual(t, WorkflowID("orders", "bad-1"), PoisonWorkflowID("retry.scheduled", "orders", "bad-1"))
	long := PoisonWorkflowID("retry.scheduled", strings.Repeat("q", 200), strings.Repeat("m", 100))
	require.LessOrEqual(t, len(long), MaxWorkflowIDLen)
	require.Equal(t, long, PoisonWorkflowID("retry.scheduled", strings.Repeat("q", 200), strings.Repeat("m", 100)))
}

func TestWorkflowIDEscapesTheQueue(t *testing.T) {
	require.Equal(t, "retry/orders%2Feu/42", WorkflowID("orders/eu", "42"))
	require.Equal(t, "retry/orders/eu/42", WorkflowID("orders", "eu/42"))
	require.NotEqual(t, WorkflowID("orders/eu", "42"), WorkflowID("orders", "eu/42"))
	require.Equal(t, "retry/a%252Fb/c", WorkflowID("a%2Fb", "c"), "an escape in the name is escaped itself")
	require.NotEqual(t, WorkflowID("a%2Fb", "c"), WorkflowID("a/b", "c"))
	require.Equal(t, "retry/a%00b/c", WorkflowID("a\x00b", "c"))

	// Queues without '/', '%' or NUL keep the legacy IDs, plain and hashed.
	long := strings.Repeat("m", 300)
	for _, q := range []string{"orders", "orders.eu", "x-y_z:1"} {
		require.False(t, QueueNeedsEscape(q))
		require.Equal(t, LegacyWorkflowID(q, "m-1"), WorkflowID(q, "m-1"))
		require.Equal(t, LegacyWorkflowID(q, long), WorkflowID(q, long))
	}
	require.Equal(t, "retry/orders/eu/42", LegacyWorkflowID("orders/eu", "42"))

	got, ok := MessageIDOf(WorkflowID("orders/eu", "42"), "orders/eu")
	require.True(t, ok)
	require.Equal(t, "42", got)
	_, ok = MessageIDOf(WorkflowID("orders", "eu/42"), "orders/eu")
	require.False(t, ok, "the other pair's ID is not this queue's")
	got, ok = LegacyMessageIDOf(LegacyWorkflowID("orders/eu", "42"), "orders/eu")
	require.True(t, ok)
	require.Equal(t, "42", got)
}

func TestHashedWorkflowIDKeepsQueuesApart(t *testing.T) {
	// With the raw queue in the hash input these two shared one: the NUL inside the queue.
	id := strings.Repeat("m", 300)
	require.NotEqual(t, WorkflowID("a\x00b", id), WorkflowID("a", "b\x00"+id))
	require.NotEqual(t, WorkflowID("a/b", id), WorkflowID("a", "b/"+id))
}

func TestPoisonWorkflowIDKeepsItsCasesApart(t *testing.T) {
	const in = "retry.scheduled"
	// An id with a '/' and no original queue is not the delivery of a known queue.
	require.Equal(t, "retry/retry.scheduled/%/orders/bad-1", PoisonWorkflowID(in, "", "orders/bad-1"))
	require.NotEqual(t, PoisonWorkflowID(in, "", "orders/bad-1"), PoisonWorkflowID(in, "orders", "bad-1"))
	require.NotEqual(t, PoisonWorkflowID(in, "orders/eu", "1"), PoisonWorkflowID(in, "orders", "eu/1"))
	require.Equal(t, "retry/retry.scheduled/orders%2Feu/1", PoisonWorkflowID(in, "orders/eu", "1"))
	require.NotEqual(t, PoisonWorkflowID(in, "%", "x"), PoisonWorkflowID(in, "", "x/"), "the mark is not an escaped queue")
}

// decodeWorkflowID undoes a plain WorkflowID: the queue up to the first '/', unescaped, and
// the id after it. Its existence on every plain ID is what makes WorkflowID injective there.
func decodeWorkflowID(t *testing.T, id string) (queue, messageID string) {
	rest, ok := strings.CutPrefix(id, workflowIDPrefix)
	require.True(t, ok, id)
	q, m, ok := strings.Cut(rest, "/")
	require.True(t, ok, id)
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] != '%' {
			b.WriteByte(q[i])
			continue
		}
		require.Less(t, i+2, len(q), "a truncated escape in %q", id)
		switch q[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "2F":
			b.WriteByte('/')
		case "00":
			b.WriteByte(0)
		default:
			t.Fatalf("unknown escape in %q", id)
		}
		i += 2
	}
	return b.String(), m
}

func FuzzWorkflowIDInjective(f *testing.F) {
	f.Add("orders/eu", "42", "orders", "eu/42")
	f.Add("a%2Fb", "c", "a/b", "c")
	f.Add("a\x00b", strings.Repeat("m", 300), "a", "b\x00"+strings.Repeat("m", 300))
	f.Add("orders", strings.Repeat("m", 249), "orders", strings.Repeat("m", 250))
	f.Add("%", "x", "", "x/")
	f.Fuzz(func(t *testing.T, q1, id1, q2, id2 string) {
		w1, w2 := WorkflowID(q1, id1), WorkflowID(q2, id2)
		require.LessOrEqual(t, len(w1), MaxWorkflowIDLen)
		if (q1 != q2 || id1 != id2) && w1 == w2 {
			t.Fatalf("(%q, %q) and (%q, %q) share %q", q1, id1, q2, id2, w1)
		}
		if strings.HasPrefix(w1, hashedIDPrefix) {
			require.Equal(t, 1, strings.Count(w1, "/"), "the hashed form has one slash")
			_, ok := MessageIDOf(w1, q1)
			require.False(t, ok)
		} else {
			q, m := decodeWorkflowID(t, w1)
			require.Equal(t, q1, q)
			require.Equal(t, id1, m)
			got, ok := MessageIDOf(w1, q1)
			require.True(t, ok)
			require.Equal(t, id1, got)
		}
		if !QueueNeedsEscape(q1) {
			require.Equal(t, LegacyWorkflowID(q1, id1), w1, "unchanged for queues that need no escape")
		}
		// Poison: one ingress, (original queue, id) pairs apart; "" and the ingress are one.
		const in = "retry.scheduled"
		norm := func(q string) string {
			if q == in {
				return ""
			}
			return q
		}
		p1, p2 := PoisonWorkflowID(in, q1, id1), PoisonWorkflowID(in, q2, id2)
		if (norm(q1) != norm(q2) || id1 != id2) && p1 == p2 {
			t.Fatalf("poison (%q, %q) and (%q, %q) share %q", q1, id1, q2, id2, p1)
		}
	})
}
