//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// floodLegit is the number of legitimate failures in the flood; four times as many bad
// reports travel with them.
const floodLegit = 40

// A flood of malformed and hostile reports on the ingress among legitimate failures: the
// legitimate ones all come back (each fails once by the contract, then is taken), none more
// often than the at-least-once bound; every bad one is dead-lettered once (poison, or
// unroutable after its one publish) and nothing is published where a report aimed it against
// the rules; the service's AMQP connections are never dropped by a message's content; and
// no junk item is left retrying a publish that cannot succeed.
func TestFloodOfBadReportsAmongLegitimateOnes(t *testing.T) {
	s := newStack(t)
	// The consumer fails every legitimate message's first republish, by design: half of the
	// republishes to one queue, which its breaker rightly reads as a failing destination, and
	// holds retries for cooldowns that double while its probes keep meeting first republishes
	// (minutes on a slow machine). Breakers are tested in breaker_test.go; here they are off.
	s.cfg.Breakers = config.BreakersOff
	logs := &logRecorder{}
	s.runLogged("all", logs)

	orders := s.queue(s.prefix+".orders", nil)
	// A queue a hostile report tries to reach through the ingress or amq.direct: nothing may
	// arrive there. Its binding to amq.direct is the test's own and goes with the queue.
	canary := s.queue(s.prefix+".canary", nil)
	s.bind(canary, "amq.direct", canary)
	canaryC := s.consume(canary, nil)

	var mu sync.Mutex
	arrivals := map[string]int{}
	s.consume(orders, func(d amqp.Delivery) {
		mu.Lock()
		arrivals[d.MessageId]++
		n := arrivals[d.MessageId]
		mu.Unlock()
		if n == 1 {
			// The contract: copy x-retry-count and x-retry-key into the report.
			count, key := retryHeaders(d)
			_ = s.sendRetry(message.RetryMessage{
				MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: orders,
				ErrorReason: "timeout again", ErrorCode: "ETIMEDOUT", RetryCount: count, RetryKey: key,
			})
		}
		_ = d.Ack(false)
	})
	dlq := s.consume(s.dlq, nil)

	bad := floodBadReports(s, orders, canary)
	require.GreaterOrEqual(t, len(bad), 4*floodLegit)
	legit := make([]string, floodLegit)
	for i := range legit {
		legit[i] = fmt.Sprintf("legit-%03d", i)
	}
	// Interleaved: four bad reports before each legitimate one.
	for i, id := range legit {
		for _, b := range bad[4*i : 4*i+4] {
			s.publishRaw(s.ingress, b.pub)
		}
		s.publishRetry(message.RetryMessage{
			MessageID: id, OriginalPayload: []byte(`{"order":"` + id + `"}`), OriginalQueue: orders,
			ErrorReason: "connection reset", ErrorCode: "ECONNRESET",
		})
	}
	for _, b := range bad[4*floodLegit:] {
		s.publishRaw(s.ingress, b.pub)
	}

	// Every legitimate message ends delivered on its own run: republished, failed once, taken.
	// One deadline for all of them: on a loaded machine the last ones settle minutes after the
	// first.
	settle := time.Now().Add(4 * time.Minute)
	for _, id := range legit {
		r := s.workflowResult(message.WorkflowID(orders, id), time.Until(settle))
		assert.Equal(t, workflows.StatusDelivered, r.Status, "%s", id)
	}
	mu.Lock()
	for _, id := range legit {
		// Two republishes (first retry, second retry after its failure); a third only by the
		// documented at-least-once bound (a report redelivered after the next republish).
		assert.GreaterOrEqual(t, arrivals[id], 2, "%s came back %d times", id, arrivals[id])
		assert.LessOrEqual(t, arrivals[id], 3, "%s came back %d times", id, arrivals[id])
	}
	mu.Unlock()

	// Every bad report is one envelope on the dead-letter queue, with the reason it was
	// refused; nothing else arrives there (a report aimed at the DLQ is not republished into it).
	want := map[string]floodBad{}
	for _, b := range bad {
		want[b.id] = b
	}
	got := map[string]message.Envelope{}
	deadline := time.Now().Add(patience)
	for len(got) < len(want) && time.Now().Before(deadline) {
		d := dlq.next(t, time.Until(deadline))
		var e message.Envelope
		require.NoError(t, json.Unmarshal(d.Body, &e), "only envelopes on the dead-letter queue: %q", truncateForLog(d.Body))
		require.NotEmpty(t, e.DLQID, "only envelopes on the dead-letter queue: %q", truncateForLog(d.Body))
		_, dup := got[e.MessageID]
		require.False(t, dup, "two envelopes for %s", e.MessageID)
		got[e.MessageID] = e
	}
	for id, b := range want {
		e, ok := got[id]
		if !assert.True(t, ok, "no envelope for bad report %s (%s)", id, b.kind) {
			continue
		}
		assert.Equal(t, b.deadReason, e.DeadReason, "%s (%s): %s", id, b.kind, e.DeadDetail)
		if b.detail != "" {
			assert.Contains(t, e.DeadDetail, b.detail, "%s (%s)", id, b.kind)
		}
	}

	// Nothing reached the canary (no republish into the ingress, no amq.* exchange); the barrier
	// proves the queue was read up to now.
	canaryC.caughtUp(t)
	assert.Empty(t, canaryC.all(), "a hostile report reached %s", canary)

	// No item is left live: every legitimate one ended delivered, every bad one is parked dead.
	eventually(t, patience, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		resp, err := s.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: fmt.Sprintf("TaskQueue='%s' AND RetryStatus IN ('scheduled','republishing','awaiting-outcome','held')", s.prefix),
		})
		if err != nil {
			return err
		}
		if n := resp.GetCount(); n != 0 {
			return fmt.Errorf("%d items still live", n)
		}
		return nil
	})

	// No message's content dropped a connection: each of the service's publishers opened its
	// connection once and never lost it.
	opened, lost := logs.connections()
	assert.Empty(t, lost, "AMQP connections lost during the flood")
	assert.NotEmpty(t, opened, "the service's publishers log the connections they open")
	for name, n := range opened {
		assert.Equal(t, 1, n, "connection %s opened %d times", name, n)
	}
}

// floodBad is one bad report: what it is and how it must end.
type floodBad struct {
	id, kind   string
	pub        amqp.Publishing
	deadReason string
	detail     string // a part of the envelope's deadDetail, when the kind has a fixed one
}

// floodBadReports are 4×floodLegit bad reports of every kind, cycling.
func floodBadReports(s *stack, orders, canary string) []floodBad {
	long := strings.Repeat("x", 300)
	inner, _ := json.Marshal(message.RetryMessage{MessageID: "smuggled", OriginalPayload: []byte("payload"), OriginalQueue: canary, ErrorReason: "x"})
	kinds := []struct {
		kind, reason, detail string
		msg                  func(id string) (message.RetryMessage, bool)
		raw                  func(id string) amqp.Publishing
	}{
		{kind: "aimed at the ingress", reason: "poison", detail: "destination not allowed",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: inner, OriginalQueue: s.ingress, ErrorReason: "x"}, true
			}},
		{kind: "aimed at the dead-letter queue", reason: "poison", detail: "destination not allowed",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: s.dlq, ErrorReason: "x"}, true
			}},
		{kind: "through amq.direct", reason: "poison", detail: "destination not allowed",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: canary,
					OriginalExchange: "amq.direct", OriginalRoutingKey: canary, ErrorReason: "x"}, true
			}},
		{kind: "300-byte correlation id", reason: "poison", detail: "correlation id",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: orders, CorrelationID: long, ErrorReason: "x"}, true
			}},
		{kind: "300-byte content type", reason: "poison", detail: "content type",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: orders, OriginalContentType: long, ErrorReason: "x"}, true
			}},
		{kind: "300-byte header name", reason: "poison", detail: "header",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: orders,
					OriginalHeaders: map[string]any{long: "v"}, ErrorReason: "x"}, true
			}},
		{kind: "negative retry count", reason: "poison", detail: "retry_count",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: orders, RetryCount: -1, ErrorReason: "x"}, true
			}},
		{kind: "not JSON", reason: "poison",
			raw: func(id string) amqp.Publishing {
				return amqp.Publishing{ContentType: "application/json", MessageId: id, Body: []byte("{not json")}
			}},
		{kind: "a queue that does not exist", reason: "unroutable",
			msg: func(id string) (message.RetryMessage, bool) {
				return message.RetryMessage{MessageID: id, OriginalPayload: []byte("junk"), OriginalQueue: s.prefix + ".nowhere", ErrorReason: "x"}, true
			}},
	}
	var out []floodBad
	for i := 0; len(out) < 4*floodLegit; i++ {
		k := kinds[i%len(kinds)]
		id := fmt.Sprintf("junk-%03d", i)
		b := floodBad{id: id, kind: k.kind, deadReason: k.reason, detail: k.detail}
		if k.raw != nil {
			b.pub = k.raw(id)
		} else {
			m, _ := k.msg(id)
			body, _ := json.Marshal(m)
			b.pub = amqp.Publishing{ContentType: "application/json", MessageId: id, Body: body}
		}
		out = append(out, b)
	}
	return out
}

// logRecorder reads the service's JSON logs (one record per write) for its connection events.
type logRecorder struct {
	mu     sync.Mutex
	opened map[string]int
	lost   []string
}

func (l *logRecorder) Write(p []byte) (int, error) {
	var rec struct {
		Msg            string `json:"msg"`
		ConnectionName string `json:"connection_name"`
	}
	if json.Unmarshal(p, &rec) != nil {
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case rec.Msg == "amqp connection opened":
		if l.opened == nil {
			l.opened = map[string]int{}
		}
		l.opened[rec.ConnectionName]++
	case strings.Contains(rec.Msg, "connection lost"):
		l.lost = append(l.lost, rec.Msg)
	}
	return len(p), nil
}

func (l *logRecorder) connections() (map[string]int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	opened := map[string]int{}
	for k, v := range l.opened {
		opened[k] = v
	}
	return opened, append([]string(nil), l.lost...)
}

func truncateForLog(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
