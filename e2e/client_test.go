//go:build integration

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/clients/go/retryclient"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
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
	first := c.next(t, patience)
	require.Nil(t, first.Headers[message.HeaderRetryCount])
	for n := 1; n <= 2; n++ {
		d := c.next(t, patience)
		require.EqualValues(t, n, d.Headers[message.HeaderRetryCount])
		require.Equal(t, fmt.Sprintf("gc-1:%d", n), d.Headers[message.HeaderRetryKey])
		require.Equal(t, []byte(`{"order":1}`), d.Body)
		require.Equal(t, "gc-1", d.MessageId)
		require.Equal(t, "corr-1", d.CorrelationId)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, clientTraceparent, d.Headers["traceparent"])
		require.Equal(t, "acme", d.Headers["x-tenant"])
	}

	r := s.workflowResult(message.WorkflowID(orders, "gc-1"), patience)
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
	env := envelopeOf(t, dead.next(t, patience))
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

// nodeEvent is a line the Node client's example consumer prints.
type nodeEvent struct {
	Event      string `json:"event"`
	ID         string `json:"id"`
	RetryCount int    `json:"retry_count"`
	RetryKey   string `json:"retry_key"`
	Error      string `json:"error"`
}

// nodeConsumer runs clients/node/examples/consumer.js on queue, reporting to the stack's
// ingress, until the test ends; its events arrive on the returned channel. It needs node
// and the client's node_modules (make test-node installs them): without them the test is
// skipped, or fails under CI=true.
func (s *stack) nodeConsumer(queue string) <-chan nodeEvent {
	t := s.t
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "clients", "node"))
	require.NoError(t, err)
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "amqplib"))
	}
	if err != nil {
		if testenv.CI() {
			t.Fatalf("the Node client's e2e test needs node and clients/node/node_modules (make test-node): %v", err)
		}
		t.Skipf("node or clients/node/node_modules missing (run make test-node first): %v", err)
	}
	cmd := exec.Command(node, filepath.Join("examples", "consumer.js"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RABBITMQ_URL="+brokertest.URL(), "QUEUE="+queue, "INGRESS_QUEUE="+s.ingress, "FAIL_TIMES=2")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	events := make(chan nodeEvent, 64)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e nodeEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				select {
				case events <- e:
				default: // nobody is listening any more: the test asserts on the first events only
				}
			}
		}
	}()
	t.Cleanup(func() {
		// Stop the consumer and read its output to the end before Wait closes the pipe.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-readDone:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-readDone
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("node consumer: %v; stderr:\n%s", err, stderr.String())
		} else if t.Failed() {
			t.Logf("node consumer stderr:\n%s", stderr.String())
		}
	})
	if e := nextNodeEvent(t, events, patience); e.Event != "ready" {
		t.Fatalf("node consumer: first event %+v, want ready", e) // its stderr is logged at cleanup
	}
	return events
}

func nextNodeEvent(t *testing.T, events <-chan nodeEvent, timeout time.Duration) nodeEvent {
	t.Helper()
	select {
	case e, ok := <-events:
		if !ok {
			t.Fatal("the node consumer exited")
		}
		return e
	case <-time.After(timeout):
		t.Fatalf("no event from the node consumer within %s", timeout)
		return nodeEvent{}
	}
}

// The Node client against the real service: a consumer reports two transient failures
// (ECONNRESET), the retries come back with x-retry-count 1 and 2, the third delivery is
// processed and the workflow ends delivered; a permanent error is dead-lettered at once.
func TestNodeClientAgainstTheService(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	dead := s.consume(s.dlq, nil)
	events := s.nodeConsumer(orders)

	s.publishRaw(orders, amqp.Publishing{MessageId: "nc-1", ContentType: "application/json", Body: []byte(`{"order":1}`),
		Headers: amqp.Table{"traceparent": clientTraceparent}})
	want := []nodeEvent{
		{Event: "reported", ID: "nc-1", RetryCount: 0, RetryKey: "", Error: "read ECONNRESET"},
		{Event: "reported", ID: "nc-1", RetryCount: 1, RetryKey: "nc-1:1", Error: "read ECONNRESET"},
		{Event: "processed", ID: "nc-1", RetryCount: 2, RetryKey: "nc-1:2"},
	}
	for _, w := range want {
		require.Equal(t, w, nextNodeEvent(t, events, patience))
	}
	r := s.workflowResult(message.WorkflowID(orders, "nc-1"), patience)
	require.Equal(t, workflows.StatusDelivered, r.Status)
	require.Equal(t, 2, r.RetryCount)
	st, err := s.state(message.WorkflowID(orders, "nc-1"))
	require.NoError(t, err)
	require.Len(t, st.Attempts, 2)
	for _, a := range st.Attempts {
		require.Equal(t, "ECONNRESET", a.ErrorCode)
		require.Equal(t, "transient", a.Category)
	}

	s.publishRaw(orders, amqp.Publishing{MessageId: "nc-2", Body: []byte(`{"order":2}`), Headers: amqp.Table{"x-fail": "permanent"}})
	require.Equal(t, nodeEvent{Event: "reported", ID: "nc-2", Error: "order nc-2 references no customer"}, nextNodeEvent(t, events, patience))
	env := envelopeOf(t, dead.next(t, patience))
	require.Equal(t, "nc-2", env.MessageID)
	require.Equal(t, "non-retryable", env.DeadReason)
	require.Equal(t, "permanent", env.FailureCategory)
	require.Equal(t, "orders-node", env.ConsumerService)
	require.Equal(t, "Error", env.ErrorType)
	require.Contains(t, env.StackTrace, "references no customer")
}
