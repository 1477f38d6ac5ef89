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
