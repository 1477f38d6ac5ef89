//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// withBillingDLQ is policyFile with a route of the test's billing queues to a dead-letter
// queue of their own, which is then one of the scheduler's own queues.
func (s *stack) withBillingDLQ() (billingDLQ string) {
	s.t.Helper()
	billingDLQ = s.prefix + ".billing.dead"
	file := strings.Replace(policyFile, "routes:\n", fmt.Sprintf("routes:\n  - queue: %q\n    policy: e2e-fast\n    dead_letter_queue: %q\n", s.prefix+".billing*", billingDLQ), 1)
	require.NoError(s.t, os.WriteFile(s.cfg.PolicyFile, []byte(file), 0o600))
	s.t.Cleanup(func() { s.deleteQueues(billingDLQ) })
	return billingDLQ
}

// bindAmqDirect binds the test's queue to amq.direct under its own name, so that a retry
// wrongly sent through amq.direct would arrive there; the binding goes with the queue.
func (s *stack) bindAmqDirect(queue string) {
	s.t.Helper()
	s.bind(queue, "amq.direct", queue)
}

// waitDead waits for the parked workflow of a poison delivery: the bridge parks it once its
// envelope is on the dead-letter queue.
func (s *stack) waitDead(id string) {
	s.t.Helper()
	s.waitRetryStatus(id, workflows.StatusDead, patience)
}

// A report aimed at the ingress, at a dead-letter queue or at an amq.* exchange is poison:
// dead-lettered with the reason, parked, and nothing is published where it pointed.
func TestDestinationsOwnQueuesAndAmqArePoison(t *testing.T) {
	s := newStack(t)
	billingDLQ := s.withBillingDLQ()
	victim := s.queue(s.prefix+".victim", nil)
	s.bindAmqDirect(victim)
	s.run("all")
	dlq := s.consume(s.dlq, nil)
	atVictim := s.consume(victim, nil)
	atBillingDLQ := s.consume(billingDLQ, nil)

	// The payload aimed at the ingress is itself a report for the victim queue: republished
	// into the ingress, it would be decoded and reach the victim.
	inner, err := json.Marshal(message.RetryMessage{MessageID: "inner", OriginalQueue: victim, OriginalPayload: []byte("smuggled"), ErrorReason: "x"})
	require.NoError(t, err)
	reports := map[string]message.RetryMessage{
		"at-ingress":     {MessageID: "at-ingress", OriginalQueue: s.ingress, OriginalPayload: inner, ErrorReason: "x"},
		"at-manual":      {MessageID: "at-manual", OriginalQueue: s.dlq, OriginalPayload: []byte("p"), ErrorReason: "x"},
		"at-billing-dlq": {MessageID: "at-billing-dlq", OriginalQueue: billingDLQ, OriginalPayload: []byte("p"), ErrorReason: "x"},
		"at-amq-direct": {MessageID: "at-amq-direct", OriginalQueue: s.prefix + ".orders", OriginalExchange: "amq.direct",
			OriginalRoutingKey: victim, OriginalPayload: []byte("p"), ErrorReason: "x"},
	}
	want := map[string]string{
		"at-ingress":     fmt.Sprintf("destination not allowed: queue %q is the scheduler's own ingress queue", s.ingress),
		"at-manual":      fmt.Sprintf("destination not allowed: queue %q is the scheduler's own manual-review queue", s.dlq),
		"at-billing-dlq": fmt.Sprintf("destination not allowed: queue %q is the scheduler's own dead-letter queue", billingDLQ),
		"at-amq-direct":  `destination not allowed: exchange "amq.direct"`,
	}
	for _, r := range reports {
		s.publishRetry(r)
	}

	for range reports {
		d := dlq.next(t, patience)
		assert.Equal(t, "poison", d.Headers[message.HeaderDeadReason], "an envelope of the bridge's, not a republish")
		assert.Nil(t, d.Headers[message.HeaderRetryCount])
		env := envelopeOf(t, d)
		require.Contains(t, want, env.MessageID)
		assert.Contains(t, env.DeadDetail, want[env.MessageID])
		s.waitDead(env.WorkflowID)
	}

	// Nothing reached the victim (through the ingress or amq.direct) nor the billing DLQ.
	atVictim.caughtUp(t)
	atBillingDLQ.caughtUp(t)
	dlq.caughtUp(t)
	assert.Empty(t, atVictim.all())
	assert.Empty(t, atBillingDLQ.all())
	assert.Len(t, dlq.all(), len(reports), "only the envelopes")
}

// A 300-byte correlation id is poison at once; the message published right after it is
// republished undisturbed (its first retry, the publisher's first try: the long id never
// reached the publisher), and its producer (the user-id RabbitMQ validated) is recorded.
func TestLongCorrelationIDIsPoisonAndTheNextIsOnTime(t *testing.T) {
	s := newStack(t)
	orders := s.queue(s.prefix+".orders", nil)
	s.run("all")
	dlq := s.consume(s.dlq, nil)
	arrivals := s.consume(orders, nil)

	bad, err := json.Marshal(message.RetryMessage{MessageID: "long-corr", OriginalQueue: orders, OriginalPayload: []byte("bad"),
		ErrorReason: "x", CorrelationID: strings.Repeat("c", 300)})
	require.NoError(t, err)
	good, err := json.Marshal(message.RetryMessage{MessageID: "next", OriginalQueue: orders, OriginalPayload: []byte("good"), ErrorReason: "x"})
	require.NoError(t, err)
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "long-corr", Body: bad})
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "next", UserId: "guest", Body: good})

	d := arrivals.next(t, patience)
	assert.Equal(t, "good", string(d.Body))
	assert.EqualValues(t, 1, d.Headers[message.HeaderRetryCount], "republished as its first retry")
	assert.Empty(t, d.UserId, "the producer's user-id is never copied to the republish")
	// What "on time" stood for: the bridge judged each delivery once (one poison, one
	// accepted; none held, requeued or dropped with a lost channel) and the one republish
	// went out at the publisher's first try, none failed (how soon is the bench's figure).
	waitSeries(t, "http://"+s.cfg.HTTPAddr+"/metrics", map[string]float64{
		series("bridge_deliveries_total", "outcome", "poison"):                 1,
		series("bridge_deliveries_total", "outcome", "accepted"):               1,
		series("bridge_deliveries_total", "outcome", "held"):                   0,
		series("bridge_deliveries_total", "outcome", "requeued"):               0,
		series("bridge_deliveries_total", "outcome", "dropped_stale"):          0,
		series("retries_executed_total", "queue", orders, "status", "success"): 1,
		series("retries_executed_total", "queue", orders, "status", "failed"):  0,
	})

	env := envelopeOf(t, dlq.next(t, patience))
	assert.Equal(t, "poison", env.DeadReason)
	assert.Contains(t, env.DeadDetail, "correlation id is 300 bytes long, over AMQP's short-string limit of 255")
	s.waitDead(env.WorkflowID)

	id := message.WorkflowID(orders, "next")
	st, err := s.state(id)
	require.NoError(t, err)
	assert.Equal(t, "guest", st.Message.Producer)
	eventually(t, patience, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.temporal.Namespace,
			Query:     fmt.Sprintf("RetryProducer = 'guest' AND TaskQueue = '%s'", s.prefix),
		})
		if err != nil {
			return err
		}
		for _, e := range resp.Executions {
			if e.Execution.WorkflowId == id {
				return nil
			}
		}
		return fmt.Errorf("%s not listed by RetryProducer yet", id)
	})

	arrivals.caughtUp(t)
	assert.Len(t, arrivals.all(), 1, "the poison one was never published")
}

// With a destinations block, a report for a queue outside it, or from a producer outside its
// binding, is poison; what the block allows is republished.
func TestDestinationsOutsideTheBlockArePoison(t *testing.T) {
	s := newStack(t)
	orders := s.queue(s.prefix+".orders", nil)
	audit := s.queue(s.prefix+".audit", nil)
	file := policyFile + fmt.Sprintf(`
destinations:
  queues: [%q, %q]
  producers:
    - user: guest
      queues: [%q]
    - anonymous: true
      queues: [%q]
`, s.prefix+".orders*", s.prefix+".billing*", s.prefix+".billing*", s.prefix+".orders*")
	require.NoError(t, os.WriteFile(s.cfg.PolicyFile, []byte(file), 0o600))
	s.run("all")
	dlq := s.consume(s.dlq, nil)
	atOrders := s.consume(orders, nil)
	atAudit := s.consume(audit, nil)

	report := func(id, queue, user string) {
		body, err := json.Marshal(message.RetryMessage{MessageID: id, OriginalQueue: queue, OriginalPayload: []byte(id), ErrorReason: "x"})
		require.NoError(t, err)
		s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: id, UserId: user, Body: body})
	}
	report("outside", audit, "")
	report("unbound", orders, "guest")
	report("allowed", orders, "")

	assert.Equal(t, "allowed", string(atOrders.next(t, patience).Body))
	details := map[string]string{}
	for range 2 {
		env := envelopeOf(t, dlq.next(t, patience))
		details[env.MessageID] = env.DeadDetail
		assert.Equal(t, "poison", env.DeadReason)
	}
	assert.Contains(t, details["outside"], fmt.Sprintf("destination not allowed: queue %q matches no pattern in destinations.queues", audit))
	assert.Contains(t, details["unbound"], fmt.Sprintf(`destination not allowed: producer "guest" may not use queue %q`, orders))

	atOrders.caughtUp(t)
	atAudit.caughtUp(t)
	assert.Len(t, atOrders.all(), 1, "only the allowed one")
	assert.Empty(t, atAudit.all())
}
