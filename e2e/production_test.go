//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Temporal's SQL stores keep workflow_id at 255 bytes. On a queue name of 255 bytes (AMQP's
// limit) a message id of 255 bytes gets the hashed workflow ID and keeps its id; one of 256
// bytes, which AMQP's message-id property cannot carry on republish, gets the fallback id.
// Each is one workflow, republished max_retries times and dead-lettered with its story.
func TestLongIDsOnALongQueueName(t *testing.T) {
	s := newStack(t)
	s.run("all")
	name := s.prefix + ".orders-"
	orders := s.queue(name+strings.Repeat("q", 255-len(name)), nil)
	require.Len(t, orders, 255)
	c, reportErr := s.failingConsumer(orders, func(d amqp.Delivery, n int, key string) message.RetryMessage {
		return message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: orders,
			ErrorReason: fmt.Sprintf("timeout #%d", n+1), ErrorCode: "ETIMEDOUT", RetryCount: n, RetryKey: key}
	})
	dead := s.consume(s.dlq, nil)

	id255, id256 := strings.Repeat("a", 255), strings.Repeat("b", 256)
	p256 := []byte("payload of the 256-byte id")
	s.publishRetry(message.RetryMessage{MessageID: id255, OriginalPayload: []byte("p"), OriginalQueue: orders, ErrorReason: "timeout #1", ErrorCode: "ETIMEDOUT"})
	// An id that long travels in the JSON only: the AMQP property cannot hold it.
	body, err := json.Marshal(message.RetryMessage{MessageID: id256, OriginalPayload: p256, OriginalQueue: orders, ErrorReason: "timeout #1", ErrorCode: "ETIMEDOUT"})
	require.NoError(t, err)
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", Body: body})
	fallback := message.FallbackMessageID(orders, p256)

	envs := map[string]message.Envelope{}
	for range 2 {
		env := envelopeOf(t, dead.next(t, patience))
		envs[env.MessageID] = env
	}
	require.NoError(t, reportErr())
	for _, id := range []string{id255, fallback} {
		env, ok := envs[id]
		require.True(t, ok, "envelope of %.20s…", id)
		assert.Equal(t, "exhausted", env.DeadReason)
		assert.Equal(t, orders, env.OriginalQueue)
		assert.Equal(t, 3, env.TotalRetries)
		assert.Len(t, env.RetryAttempts, 4)

		var republished []amqp.Delivery
		for _, d := range c.all() {
			if d.MessageId == id {
				republished = append(republished, d)
			}
		}
		require.Len(t, republished, 3, "exactly max_retries republishes")
		for i, d := range republished {
			assert.Equal(t, fmt.Sprintf("%s:%d", id, i+1), d.Headers["x-retry-key"])
		}

		wid := message.WorkflowID(orders, id)
		assert.LessOrEqual(t, len(wid), message.MaxWorkflowIDLen)
		assert.True(t, strings.HasPrefix(wid, "retry/sha256-"), wid)
		st, err := s.state(wid)
		require.NoError(t, err)
		assert.Equal(t, workflows.StatusDead, st.Status)
		assert.Equal(t, id, st.Message.MessageID)
		assert.Equal(t, orders, st.Message.OriginalQueue)
	}

	// One workflow per message, found by the queue's search attribute (the queue's breaker
	// carries it too: it is another workflow type).
	query := fmt.Sprintf("WorkflowType = '%s' AND %s = '%s'", workflows.RetryWorkflowName, workflows.SAOriginalQueue.GetName(), orders)
	eventually(t, patience, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return err
		}
		ids := map[string]bool{}
		for _, e := range resp.GetExecutions() {
			ids[e.GetExecution().GetWorkflowId()] = true
		}
		want := map[string]bool{message.WorkflowID(orders, id255): true, message.WorkflowID(orders, fallback): true}
		if len(resp.GetExecutions()) != 2 || !assert.ObjectsAreEqual(want, ids) {
			return fmt.Errorf("%d runs: %v", len(resp.GetExecutions()), ids)
		}
		return nil
	})
}

// The production shape's ingress: a quorum queue with a delivery limit of 3 that dead-letters
// to the dead-letter queue. Temporal is down for 120 s while 300 failed messages arrive; the
// bridge holds what it has without spending deliveries, so after Temporal is back every one is
// republished and none was dead-lettered for its delivery limit.
func TestQuorumIngressSurvivesATemporalOutage(t *testing.T) {
	t.Parallel() // minutes of waiting, beside the other long waits (the package doc says why)
	srv := devserver.StartOwnedForTest(t)
	s := newStackOn(t, srv)
	quorum := broker.Config{URL: brokertest.URL(), QueueType: broker.QueueTypeQuorum}
	args := broker.IngressArgs(quorum, s.dlq)
	args["x-delivery-limit"] = int64(3)
	s.deleteQueues(s.ingress)
	s.queue(s.ingress, args)
	s.cfg.QueueType = broker.QueueTypeQuorum
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	dead := s.consume(s.dlq, nil)

	require.NoError(t, srv.Kill())
	const n = 300
	for i := range n {
		s.publishRetry(message.RetryMessage{MessageID: fmt.Sprintf("q-%03d", i), OriginalPayload: []byte("p"),
			OriginalQueue: orders, ErrorReason: "503", HTTPStatus: 503})
	}
	// The outage itself: two minutes of a bridge with 300 reports it cannot hand over.
	outage := time.NewTimer(120 * time.Second)
	<-outage.C
	require.Empty(t, dead.all(), "nothing dead-lettered during the outage")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, srv.Restart(ctx))
	c := s.consume(orders, nil)
	got := map[string]int{}
	deadline := time.After(3 * time.Minute)
	for len(got) < n {
		select {
		case d := <-c.arrived:
			assert.EqualValues(t, 1, d.Headers["x-retry-count"], d.MessageId)
			got[d.MessageId]++
		case <-deadline:
			t.Fatalf("%d of %d messages republished after the outage", len(got), n)
		}
	}
	assert.Empty(t, dead.all(), "0 dead-lettered, for the delivery limit or otherwise")
	for id, k := range got {
		assert.Equal(t, 1, k, "republished once: %s", id)
	}
}
