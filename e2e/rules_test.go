//go:build integration

package e2e

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// rulesPolicyFile adds to the tests' fast policy a classification rule and a route by service
// and event type to a policy of its own.
const rulesPolicyFile = `
policies:
  e2e-fast:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 3
    quiet_window: 2s
  e2e-invoices:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 7
    quiet_window: 2s
routes:
  - queue: "e2e-*"
    policy: e2e-fast
  - service: billing-svc
    event_type: "invoice.*"
    policy: e2e-invoices
rules:
  - name: validation errors
    reason: ["missing field", "bad uuid", "unsupported mime type"]
    category: permanent
`

// A failure that matches a rule of the policy file takes the rule's category (here permanent:
// dead at once, where the built-in classification would call "missing fields" unknown and
// retry it), and a message routed by service and event type runs under that route's policy
// while the same queue's other messages keep the queue's.
func TestPolicyFileRulesAndServiceRoutes(t *testing.T) {
	s := newStack(t)
	require.NoError(t, os.WriteFile(s.cfg.PolicyFile, []byte(rulesPolicyFile), 0o600))
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	dead := s.consume(s.dlq, nil)
	republished := s.consume(orders, nil)

	s.publishRetry(message.RetryMessage{
		MessageID: "invalid-1", OriginalPayload: []byte(`{"order":1}`), OriginalQueue: orders,
		ErrorReason: "Missing fields: customer_id", Service: "orders-svc", MaxRetries: 3,
	})
	s.publishRetry(message.RetryMessage{
		MessageID: "invoice-1", OriginalPayload: []byte(`{"invoice":1}`), OriginalQueue: orders,
		ErrorReason: "upstream timed out", Service: "billing-svc", EventType: "invoice.created",
	})
	s.publishRetry(message.RetryMessage{
		MessageID: "order-1", OriginalPayload: []byte(`{"order":2}`), OriginalQueue: orders,
		ErrorReason: "upstream timed out", Service: "billing-svc", EventType: "order.created",
	})

	t.Run("a rule's category", func(t *testing.T) {
		env := envelopeOf(t, dead.next(t, patience))
		assert.Equal(t, "invalid-1", env.MessageID)
		assert.Equal(t, "permanent", env.FailureCategory)
		assert.Equal(t, "non-retryable", env.DeadReason)
		assert.Zero(t, env.TotalRetries, "dead at once, never republished")
		id := message.WorkflowID(orders, "invalid-1")
		st, err := s.state(id)
		require.NoError(t, err)
		assert.Contains(t, eventDetails(st), `classified permanent by the policy file's rule 1 ("validation errors")`)
	})

	t.Run("routes by service and event type", func(t *testing.T) {
		got := map[string]bool{}
		for range 2 {
			got[republished.next(t, patience).MessageId] = true
		}
		assert.Equal(t, map[string]bool{"invoice-1": true, "order-1": true}, got)
		for msg, want := range map[string]string{"invoice-1": "e2e-invoices", "order-1": "e2e-fast"} {
			id := message.WorkflowID(orders, msg)
			assert.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status, msg)
			st, err := s.state(id)
			require.NoError(t, err)
			assert.Equal(t, want, st.Policy.Name, msg)
		}
	})

	dead.caughtUp(t)
	assert.Len(t, dead.all(), 1, "only the rule's permanent failure is dead")
}
