//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The bad-input catalogue through the real broker and Temporal (the whole table, decoder-level,
// is bridge/badinput_test.go): each input ends as a republish or as an envelope on the
// dead-letter queue with a reason, and nothing is left behind or lost.
func TestBadInputCatalogueThroughTheBroker(t *testing.T) {
	s := newStack(t)
	s.cfg.MaxMessageBytes = 512 << 10 // the service's default, not the harness's 64 KiB
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	delivered := s.consume(orders, nil)
	dead := s.consume(s.dlq, nil)

	const kib, mib = 1 << 10, 1 << 20
	big16 := 16 * mib
	if max := brokerMaxMessageSize(t); max < 23*mib {
		// The envelope of a 16 MiB body is base64 in JSON (~21.4 MiB) and must fit too.
		t.Logf("broker max_message_size is %d: the 16 MiB case uses %d bytes", max, max/2)
		big16 = int(max / 2)
	}
	retry := func(id string, edit func(m map[string]any)) []byte {
		m := map[string]any{
			"message_id": id, "original_queue": orders, "original_payload": base64.StdEncoding.EncodeToString([]byte("payload of " + id)),
			"error_reason": "503", "http_status": 503, "retry_count": 0, "max_retries": 0, "next_retry_at_ms": 0,
		}
		if edit != nil {
			edit(m)
		}
		return jsonOf(t, m)
	}
	manyHeaders := func(n int, v any) map[string]any {
		h := map[string]any{}
		for i := 0; i < n; i++ {
			h[fmt.Sprintf("h%05d", i)] = v
		}
		return h
	}

	// Refused: an envelope with the reason and the raw bytes.
	refused := []struct {
		name, kind, reason string
		p                  amqp.Publishing
	}{
		{"empty body", "poison", "not a RetryMessage and no x-death header", amqp.Publishing{MessageId: "bad-empty"}},
		{"not JSON", "poison", "body is not a JSON object", amqp.Publishing{ContentType: "application/json", MessageId: "bad-text", Body: []byte("this is not JSON")}},
		{"wrong type", "poison", "retry_count must be an integer, got a string", amqp.Publishing{ContentType: "application/json", MessageId: "bad-type",
			Body: retry("bad-type", func(m map[string]any) { m["retry_count"] = "two" })}},
		{"base64 that is not", "poison", "original_payload is not standard base64", amqp.Publishing{ContentType: "application/json", MessageId: "bad-b64",
			Body: retry("bad-b64", func(m map[string]any) { m["original_payload"] = "%%% not base64 %%%" })}},
		{"2 MiB", "oversize", "over the limit of 524288 bytes", amqp.Publishing{ContentType: "application/octet-stream", MessageId: "big-2m", Body: bytes.Repeat([]byte{0xAB}, 2*mib)}},
		{"16 MiB", "oversize", "over the limit of 524288 bytes", amqp.Publishing{ContentType: "application/json", MessageId: "big-16m",
			Body: retry("big-16m", func(m map[string]any) {
				m["original_payload"] = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xCD}, big16*3/4))
			})}},
		{"10,000 headers", "poison", "headers hold 10000 entries, over the limit of 8192", amqp.Publishing{ContentType: "application/json", MessageId: "many-headers",
			Body: retry("many-headers", func(m map[string]any) { m["original_headers"] = manyHeaders(10000, true) })}},
		{"8,000 headers too large for one frame", "poison", "headers encode to 128004 bytes", amqp.Publishing{ContentType: "application/json", MessageId: "big-headers",
			Body: retry("big-headers", func(m map[string]any) { m["original_headers"] = manyHeaders(8000, 123456) })}},
		{"negative retry_count", "poison", "retry_count is negative", amqp.Publishing{ContentType: "application/json", MessageId: "bad-neg",
			Body: retry("bad-neg", func(m map[string]any) { m["retry_count"] = -3 })}},
		{"enormous retry_count", "poison", "over the limit of 10000", amqp.Publishing{ContentType: "application/json", MessageId: "bad-huge-count",
			Body: retry("bad-huge-count", func(m map[string]any) { m["retry_count"] = 1e15 })}},
		{"enormous retry_after_ms", "poison", "over the limit of 30 days", amqp.Publishing{ContentType: "application/json", MessageId: "bad-after",
			Body: retry("bad-after", func(m map[string]any) { m["retry_after_ms"] = int64(1) << 60 })}},
	}
	for _, r := range refused {
		s.publishRaw(s.ingress, r.p)
	}
	// A header of a forbidden type on the count, through real dead-lettering (RabbitMQ writes x-death).
	svc := s.queue(s.prefix+".svc", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": s.ingress})
	s.rejectThrough(svc, amqp.Publishing{MessageId: "bad-count-type", Body: []byte("svc body"),
		Headers: amqp.Table{"x-retry-count": amqp.Table{"n": int32(1)}}})

	// Accepted: republished to the queue (or, for a queue that does not exist, dead as unroutable).
	hugeID := strings.Repeat("i", 10*kib)
	payload256 := bytes.Repeat([]byte{0x5A}, 256*kib)
	accepted := []amqp.Publishing{
		{ContentType: "application/json", MessageId: "ok-256k", Body: retry("ok-256k", func(m map[string]any) { m["original_payload"] = base64.StdEncoding.EncodeToString(payload256) })},
		{ContentType: "application/json", Body: retry("", func(m map[string]any) {
			delete(m, "message_id")
			m["original_payload"] = base64.StdEncoding.EncodeToString([]byte("no id"))
		})},
		{ContentType: "application/json", Body: retry(hugeID, func(m map[string]any) { m["original_payload"] = base64.StdEncoding.EncodeToString([]byte("huge id")) })},
		{ContentType: "application/json", MessageId: "ok-policy", Body: retry("ok-policy", func(m map[string]any) { m["policy"] = "no-such-policy" })},
		{ContentType: "application/json", MessageId: "ok-category", Body: retry("ok-category", func(m map[string]any) { m["error_category"] = "cosmic-rays" })},
		{ContentType: "application/json", MessageId: "ok-8k-headers", Body: retry("ok-8k-headers", func(m map[string]any) { m["original_headers"] = manyHeaders(8000, true) })},
		{ContentType: "application/json", MessageId: "ok-deep", Body: retry("ok-deep", func(m map[string]any) { m["original_headers"] = map[string]any{"deep": nestedJSON(40)} })},
	}
	for _, p := range accepted {
		s.publishRaw(s.ingress, p)
	}
	s.rejectThrough(svc, amqp.Publishing{MessageId: "ok-decimal", Body: []byte("decimal header"),
		Headers: amqp.Table{"x-price": amqp.Decimal{Scale: 2, Value: 1999}, "x-kept": "yes"}})
	// It comes back to the service queue it failed on.
	svcDelivered := s.consume(svc, nil)
	missing := s.prefix + ".no-such-queue"
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "ok-missing-queue",
		Body: retry("ok-missing-queue", func(m map[string]any) { m["original_queue"] = missing })})

	// Every refusal arrives as an envelope with its reason and its bytes.
	// An envelope over DEAD_LETTER_MAX_BYTES (the 16 MiB body's) leaves its payload to a message
	// of its own on the same queue, named by the envelope's payloadRef.
	envelopes := map[string]message.Envelope{}
	payloads := map[string][]byte{}
	for len(envelopes) < len(refused)+2 {
		d := dead.next(t, patience)
		if part, _ := d.Headers[deadletter.HeaderPart].(string); part == "payload" {
			payloads[d.MessageId] = d.Body
			continue
		}
		e := envelopeOf(t, d)
		envelopes[e.OriginalMessage.MessageID] = e
	}
	payloadOf := func(e message.Envelope) []byte {
		if e.PayloadRef == nil {
			return e.OriginalMessage.Payload
		}
		// Published (and confirmed) before its envelope, so read before it.
		p, ok := payloads[e.PayloadRef.MessageID]
		require.True(t, ok, "payload message %s not on the dead-letter queue before its envelope", e.PayloadRef.MessageID)
		return p
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			e, ok := envelopes[r.p.MessageId]
			require.True(t, ok, "no envelope for %s; got %v", r.p.MessageId, keys(envelopes))
			assert.Equal(t, r.kind, e.DeadReason)
			assert.Contains(t, e.DeadDetail, r.reason)
			got := payloadOf(e)
			assert.True(t, bytes.Equal(r.p.Body, got), "dead-lettered bytes differ from the delivery (%d vs %d)", len(got), len(r.p.Body))
		})
	}
	t.Run("forbidden type on x-retry-count", func(t *testing.T) {
		e := envelopes["bad-count-type"]
		assert.Equal(t, "poison", e.DeadReason)
		assert.Contains(t, e.DeadDetail, "x-retry-count header must be an integer")
		assert.Equal(t, svc, e.OriginalQueue)
		assert.Equal(t, []byte("svc body"), e.OriginalMessage.Payload)
	})
	t.Run("original_queue that does not exist", func(t *testing.T) {
		e := envelopes["ok-missing-queue"]
		assert.Equal(t, workflows.CauseUnroutable, e.DeadReason)
		assert.Contains(t, e.DeadDetail, "unroutable")
		assert.Equal(t, missing, e.OriginalQueue)
		assert.Equal(t, []byte("payload of ok-missing-queue"), e.OriginalMessage.Payload)
	})

	got := map[string]amqp.Delivery{}
	want := []string{string(payload256[:16]), "no id", "huge id", "payload of ok-po", "payload of ok-ca", "payload of ok-8k", "payload of ok-de", "decimal header"}
	eventually(t, patience, func() error {
		for _, d := range append(delivered.all(), svcDelivered.all()...) {
			got[string(d.Body[:min(len(d.Body), 16)])] = d
		}
		var missing []string
		for _, w := range want {
			if _, ok := got[w]; !ok {
				missing = append(missing, strconv.Quote(w[:min(len(w), 16)]))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not republished yet: %s", strings.Join(missing, ", "))
		}
		return nil
	})
	t.Run("256 KiB payload republished intact", func(t *testing.T) {
		d := got[string(payload256[:16])]
		assert.True(t, bytes.Equal(payload256, d.Body))
		assert.Equal(t, "ok-256k", d.MessageId)
	})
	t.Run("missing message_id: the documented fallback", func(t *testing.T) {
		d := got["no id"]
		assert.Equal(t, message.FallbackMessageID(orders, []byte("no id")), d.MessageId)
	})
	t.Run("huge message_id: the documented fallback", func(t *testing.T) {
		d := got["huge id"]
		assert.Equal(t, message.FallbackMessageID(orders, []byte("huge id")), d.MessageId)
	})
	t.Run("8,000 small headers travel", func(t *testing.T) {
		d := got["payload of ok-8k"]
		assert.Len(t, d.Headers, 8000+3) // plus x-retry-count, x-retry-key and x-retry-republished-at
	})
	t.Run("headers nested 40 deep: cut to what a consumer reads, with a note", func(t *testing.T) {
		d := got["payload of ok-de"]
		assert.Contains(t, d.Headers, "deep")
		st, err := s.state(message.WorkflowID(orders, "ok-deep"))
		require.NoError(t, err)
		assert.Contains(t, eventDetails(st), "nested deeper than 31 levels")
	})
	t.Run("forbidden header type dropped, the rest kept", func(t *testing.T) {
		d := got["decimal header"]
		assert.Equal(t, "yes", d.Headers["x-kept"])
		assert.NotContains(t, d.Headers, "x-price")
		st, err := s.state(message.WorkflowID(svc, "ok-decimal"))
		require.NoError(t, err)
		assert.Contains(t, eventDetails(st), "header x-price: dropped a value of unsupported type")
	})
	t.Run("unknown policy: routed policy and a note", func(t *testing.T) {
		st, err := s.state(message.WorkflowID(orders, "ok-policy"))
		require.NoError(t, err)
		assert.Equal(t, "e2e-fast", st.Policy.Name)
		assert.Contains(t, eventDetails(st), `unknown policy "no-such-policy"`)
	})
	t.Run("unknown category: classified", func(t *testing.T) {
		st, err := s.state(message.WorkflowID(orders, "ok-category"))
		require.NoError(t, err)
		assert.Equal(t, "transient", st.Category, "classified from http_status 503")
	})

	// Nothing left behind: the ingress queue is empty and nothing else arrived (every
	// publish before the barriers has reached its consumer).
	eventually(t, patience, func() error {
		if n := s.depth(s.ingress); n != 0 {
			return fmt.Errorf("%d messages still on %s", n, s.ingress)
		}
		return nil
	})
	for _, c := range []*consumer{dead, delivered, svcDelivered} {
		c.caughtUp(t)
	}
	assert.Len(t, dead.all(), len(refused)+2+len(payloads), "dead-letter queue: the envelopes, and the payloads sent apart")
	assert.Len(t, append(delivered.all(), svcDelivered.all()...), len(accepted)+1, "original queues")
}

func nestedJSON(depth int) any {
	var v any = "bottom"
	for i := 0; i < depth; i++ {
		v = map[string]any{"n": v}
	}
	return v
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func eventDetails(st workflows.State) string {
	var b strings.Builder
	for _, e := range st.Events {
		b.WriteString(e.Kind + ": " + e.Detail + "\n")
	}
	return b.String()
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// rejectThrough publishes p to a service queue that dead-letters to the ingress queue, takes it
// back and rejects it: RabbitMQ adds x-death, the zero-code adoption path.
func (s *stack) rejectThrough(queue string, p amqp.Publishing) {
	s.t.Helper()
	s.publishRaw(queue, p)
	onChannel(s.t, s.brokerURL, func(ch *amqp.Channel) {
		deadline := time.Now().Add(patience)
		for {
			d, ok, err := ch.Get(queue, false)
			require.NoError(s.t, err)
			if ok {
				require.NoError(s.t, d.Reject(false))
				return
			}
			require.True(s.t, time.Now().Before(deadline), "message did not reach %s within %s", queue, patience)
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// depth is the number of ready messages on a queue.
func (s *stack) depth(queue string) (n int) {
	onChannel(s.t, s.brokerURL, func(ch *amqp.Channel) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		require.NoError(s.t, err)
		n = q.Messages
	})
	return n
}

// brokerMaxMessageSize is RabbitMQ's max_message_size (128 MiB by default in 3.x, 16 MiB in 4.x).
func brokerMaxMessageSize(t *testing.T) int64 {
	const def = 128 << 20
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		return def
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "environment").Output()
	if err != nil {
		return def
	}
	m := regexp.MustCompile(`\{max_message_size,(\d+)\}`).FindSubmatch(out)
	if m == nil {
		return def
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return def
	}
	return n
}
