//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/clients/go/retryclient"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// goClient is the Go producer client on a connection of the test's, reporting to the
// stack's ingress.
func (s *stack) goClient() *retryclient.Client {
	s.t.Helper()
	conn, err := amqp.Dial(brokertest.URL())
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = conn.Close() })
	c, err := retryclient.New(conn, retryclient.Options{IngressQueue: s.ingress, Service: "orders-api", ServiceVersion: "1.0.0"})
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// reportingConsumer consumes queue with the Go client's failure handling: fail(d) decides
// whether d fails and with what; a failure is reported, then d is acked. reportErr is the
// first report that could not be sent.
func (s *stack) reportingConsumer(queue string, fail func(d amqp.Delivery) error) (c *consumer, reportErr func() error) {
	client := s.goClient()
	var mu sync.Mutex
	var first error
	c = s.consume(queue, func(d amqp.Delivery) {
		if err := fail(d); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := client.Report(ctx, d, queue, err); rerr != nil {
				mu.Lock()
				if first == nil {
					first = rerr
				}
				mu.Unlock()
				_ = d.Nack(false, true)
				return
			}
		}
		_ = d.Ack(false)
	})
	return c, func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

const clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A consumer using the Go client fails a message twice, then takes it: the retries carry
// x-retry-count 1 and 2 with their keys, the payload, properties and trace header intact,
// and the workflow ends delivered.
func TestGoClientRetriesThenDelivered(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c, reportErr := s.reportingConsumer(orders, func(d amqp.Delivery) error {
		n, _ := message.HeaderInt64(d.Headers[message.HeaderRetryCount])
		if n < 2 {
			return fmt.Errorf("call payments: %w", &retryclient.HTTPError{Status: 503})
		}
		return nil
	})

	s.publishRaw(orders, amqp.Publishing{
		MessageId: "gc-1", CorrelationId: "corr-1", ContentType: "application/json", Type: "order.created",
		Body: []byte(`{"order":1}`), Headers: amqp.Table{"traceparent": clientTraceparent, "x-tenant": "acme"},
	})
	first := c.next(t, 10*time.Second)
	require.Nil(t, first.Headers[message.HeaderRetryCount])
	for n := 1; n <= 2; n++ {
		d := c.next(t, 30*time.Second)
		require.EqualValues(t, n, d.Headers[message.HeaderRetryCount])
		require.Equal(t, fmt.Sprintf("gc-1:%d", n), d.Headers[message.HeaderRetryKey])
		require.Equal(t, []byte(`{"order":1}`), d.Body)
		require.Equal(t, "gc-1", d.MessageId)
		require.Equal(t, "corr-1", d.CorrelationId)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, clientTraceparent, d.Headers["traceparent"])
		require.Equal(t, "acme", d.Headers["x-tenant"])
	}

	r := s.workflowResult(message.WorkflowID(orders, "gc-1"), 60*time.Second)
	require.Equal(t, workflows.StatusDelivered, r.Status)
	require.Equal(t, 2, r.RetryCount)
	require.NoError(t, reportErr())
	c.caughtUp(t)
	require.Len(t, c.all(), 3, "the first delivery and two retries, nothing more")
}

// A Permanent error dead-letters the message at once, with the client's metadata.
func TestGoClientPermanentDeadLetters(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c, reportErr := s.reportingConsumer(orders, func(amqp.Delivery) error {
		return retryclient.Permanent(errors.New("order 2 references no customer"))
	})
	dead := s.consume(s.dlq, nil)

	s.publishRaw(orders, amqp.Publishing{MessageId: "gc-2", Body: []byte(`{"order":2}`)})
	env := envelopeOf(t, dead.next(t, 30*time.Second))
	require.NoError(t, reportErr())
	require.Equal(t, "non-retryable", env.DeadReason)
	require.Equal(t, "permanent", env.FailureCategory)
	require.Equal(t, "gc-2", env.MessageID)
	require.Equal(t, orders, env.OriginalQueue)
	require.Equal(t, 0, env.TotalRetries)
	require.Equal(t, "orders-api", env.ConsumerService)
	require.Equal(t, []byte(`{"order":2}`), env.OriginalMessage.Payload)
	require.Len(t, env.RetryAttempts, 1)
	require.Equal(t, "order 2 references no customer", env.RetryAttempts[0].Error)

	c.caughtUp(t)
	require.Len(t, c.all(), 1, "no retry of a permanent failure")
	st, err := s.state(message.WorkflowID(orders, "gc-2"))
	require.NoError(t, err)
	require.Equal(t, workflows.StatusDead, st.Status)
}
