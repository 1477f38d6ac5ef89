//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// httpClient reads the service's health endpoints: a loaded machine can take seconds to answer.
var httpClient = &http.Client{Timeout: 10 * time.Second}

func nopLogger() log.Logger { return log.NewStructuredLogger(discard()) }

// binaryPayload is not valid UTF-8, so any re-encoding on the way would show.
var binaryPayload = []byte{0x00, 0xff, 0xfe, 'h', 'i', 0x80, '\n'}

// 1. A RetryMessage reaches its original queue after the policy delay, bytes identical.
func TestRetryMessageIsRepublishedAfterDelay(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)

	sent := time.Now()
	s.publishRetry(message.RetryMessage{
		MessageID: "m-1", OriginalPayload: binaryPayload, OriginalQueue: orders,
		ErrorReason: "503 from payments", HTTPStatus: 503,
		OriginalHeaders: map[string]any{"x-trace": "abc"},
	})
	d := c.next(t, patience)
	require.GreaterOrEqual(t, time.Since(sent), 300*time.Millisecond, "republished before the policy delay")
	require.Equal(t, binaryPayload, d.Body)
	require.Equal(t, "m-1", d.MessageId)
	require.EqualValues(t, 1, d.Headers["x-retry-count"])
	require.Equal(t, "m-1:1", d.Headers["x-retry-key"])
	require.Equal(t, "abc", d.Headers["x-trace"])
	require.Equal(t, amqp.Persistent, d.DeliveryMode)

	id := message.WorkflowID(orders, "m-1")
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status)
	s.recordHistory(id, "delivered-start-delay")
}

// 2. A consumer that keeps failing: exactly max republishes, then one envelope with every attempt.
func TestFailingConsumerExhaustsThenDeadLetters(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	// The consumer's own failure handling: report to the scheduler, then ack.
	c, reportErr := s.failingConsumer(orders, func(d amqp.Delivery, n int, key string) message.RetryMessage {
		return message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: orders,
			ErrorReason: fmt.Sprintf("timeout #%d", n+1), ErrorCode: "ETIMEDOUT", RetryCount: n, RetryKey: key}
	})
	dead := s.consume(s.dlq, nil)

	s.publishRetry(message.RetryMessage{MessageID: "m-2", OriginalPayload: []byte("p"), OriginalQueue: orders,
		ErrorReason: "timeout #1", ErrorCode: "ETIMEDOUT"})
	env := envelopeOf(t, dead.next(t, patience))
	require.NoError(t, reportErr())

	got := c.all()
	require.Len(t, got, 3, "exactly max_retries republishes")
	for i, d := range got {
		require.EqualValues(t, i+1, d.Headers["x-retry-count"])
		require.Equal(t, fmt.Sprintf("m-2:%d", i+1), d.Headers["x-retry-key"])
	}
	require.Equal(t, "exhausted", env.DeadReason)
	require.Equal(t, 3, env.TotalRetries)
	require.Len(t, env.RetryAttempts, 4)
	for i, a := range env.RetryAttempts {
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, fmt.Sprintf("timeout #%d", i+1), a.Error)
		require.Equal(t, "ETIMEDOUT", a.ErrorCode)
		require.Equal(t, "transient", a.Category)
	}
	require.Equal(t, []byte("p"), env.OriginalMessage.Payload)

	id := message.WorkflowID(orders, "m-2")
	st, err := s.state(id)
	require.NoError(t, err)
	require.Equal(t, workflows.StatusDead, st.Status)
	s.recordHistory(id, "exhausted-dead-start-delay")
}

// 3. Dead-letter adoption: a rejected message comes back after the delay, headers intact.
func TestDeadLetterAdoption(t *testing.T) {
	s := newStack(t)
	s.run("all")
	payments := s.queue(s.prefix+".payments", amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": s.ingress,
	})
	var mu sync.Mutex
	seen := 0
	c := s.consume(payments, func(d amqp.Delivery) {
		mu.Lock()
		seen++
		first := seen == 1
		mu.Unlock()
		if first {
			_ = d.Reject(false) // the consumer fails: RabbitMQ dead-letters it to the scheduler
			return
		}
		_ = d.Ack(false)
	})
	s.publishRaw(payments, amqp.Publishing{
		MessageId: "pay-1", ContentType: "text/plain", Body: []byte("charge 10 EUR"),
		Headers: amqp.Table{"x-customer": "c-9", "x-amount": int32(10)},
	})
	first := c.next(t, patience)
	require.Nil(t, first.Headers["x-retry-count"])
	again := c.next(t, patience)
	require.Equal(t, []byte("charge 10 EUR"), again.Body)
	require.Equal(t, "pay-1", again.MessageId)
	require.Equal(t, "text/plain", again.ContentType)
	require.Equal(t, "c-9", again.Headers["x-customer"])
	require.EqualValues(t, 10, again.Headers["x-amount"])
	require.EqualValues(t, 1, again.Headers["x-retry-count"])
	require.Equal(t, "pay-1:1", again.Headers["x-retry-key"])
	require.Nil(t, again.Headers["x-death"], "x-death is not copied back")
}

// 4. The same report delivered twice gives one republish.
func TestDuplicateReportRepublishesOnce(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)
	m := message.RetryMessage{MessageID: "m-4", OriginalPayload: []byte("x"), OriginalQueue: orders, ErrorReason: "503", HTTPStatus: 503}
	s.publishRetry(m)
	s.publishRetry(m)

	id := message.WorkflowID(orders, "m-4")
	r := s.workflowResult(id, patience)
	require.Equal(t, workflows.StatusDelivered, r.Status)
	require.Len(t, c.all(), 1, "one republish for a report delivered twice")
}

// 5. Poison and oversize input goes to the dead-letter queue with its reason; the bridge keeps going.
func TestPoisonAndOversizeAreDeadLettered(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)
	dead := s.consume(s.dlq, nil)

	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "text/plain", MessageId: "bad-1", Body: []byte("not json at all")})
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "bad-2", Body: []byte(`{"message_id":"x","original_queue":"q"}`)})
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "big-1", Body: bytes.Repeat([]byte("a"), 70000)})

	// Keyed by the first bytes of the raw payload: each envelope keeps the delivery as it came.
	got := map[string]message.Envelope{}
	for i := 0; i < 3; i++ {
		e := envelopeOf(t, dead.next(t, patience))
		got[string(e.OriginalMessage.Payload[:5])] = e
	}
	require.Len(t, got, 3)
	notJSON, missing, big := got["not j"], got[`{"mes`], got["aaaaa"]
	require.Equal(t, "poison", notJSON.DeadReason)
	require.Equal(t, []byte("not json at all"), notJSON.OriginalMessage.Payload)
	require.Equal(t, "poison", missing.DeadReason)
	require.Contains(t, missing.DeadDetail, "original_payload")
	require.Equal(t, "oversize", big.DeadReason)
	require.Len(t, big.OriginalMessage.Payload, 70000)
	require.Contains(t, big.DeadDetail, "65536")

	s.publishRetry(message.RetryMessage{MessageID: "good", OriginalPayload: []byte("ok"), OriginalQueue: orders, ErrorReason: "503"})
	require.Equal(t, "good", c.next(t, patience).MessageId, "the bridge still runs after poison")
}

// 6. The worker killed with SIGKILL while a retry waits; a new worker fires it. Once with
// the first delay as the workflow's start delay (a lever, off by default), once as a timer
// of the run the killed worker has cached (the default): its task then waits on the dead
// worker's sticky queue until Temporal gives it to another (WORKFLOW_STICKY_TIMEOUT, 30 s).
func TestWorkerKilledWhileRetryWaits(t *testing.T) {
	t.Run("start delay", func(t *testing.T) {
		workerKilledWhileRetryWaits(t, 10*time.Second, "delivered-signal-with-start-delay")
	})
	t.Run("timer of a cached run", func(t *testing.T) {
		workerKilledWhileRetryWaits(t, 0, "")
	})
}

func workerKilledWhileRetryWaits(t *testing.T, startDelayMax time.Duration, history string) {
	s := newStack(t)
	bin := buildBinary(t)
	s.cfg.StartDelayMax = startDelayMax
	s.run("bridge")
	orders := s.queue(s.prefix+".slow-orders", nil) // routed to the 4 s policy
	c := s.consume(orders, nil)

	w1 := s.startWorker(t, bin)
	s.publishRetry(message.RetryMessage{MessageID: "m-6", OriginalPayload: []byte("durable"), OriginalQueue: orders, ErrorReason: "503"})
	id := message.WorkflowID(orders, "m-6")
	// The search attributes say scheduled from the start with a start delay (the run has
	// no task before it ends), and after the run's first task with a timer.
	s.waitRetryStatus(id, workflows.StatusScheduled, patience)
	require.NoError(t, w1.Process.Kill()) // SIGKILL
	_ = w1.Wait()
	killed := time.Now()

	s.startWorker(t, bin)
	d := c.next(t, patience)
	t.Logf("republished %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	require.Equal(t, []byte("durable"), d.Body)
	require.EqualValues(t, 1, d.Headers["x-retry-count"])
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status)
	if history != "" {
		s.recordHistory(id, history)
	}
}

// 7. Every connection of the service force-closed during a run of 500 messages: every one
// republished, and any duplicate carries the same key. Only the service's own connections
// (named after this test's prefix) are closed: the broker is shared.
func TestBrokerConnectionsClosedDuringRun(t *testing.T) {
	testenv.LookPath(t, "rabbitmqctl", "apt-get install -y rabbitmq-server")
	s := newStack(t)
	s.cfg.ServiceName = s.prefix + "-svc" // its connections are named <service>-<mode>
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)
	const n = 500
	for i := 0; i < n; i++ {
		s.publishRetry(message.RetryMessage{MessageID: fmt.Sprintf("bulk-%d", i), OriginalPayload: []byte(fmt.Sprint(i)), OriginalQueue: orders, ErrorReason: "503"})
		if i == n/2 {
			closed, err := brokertest.CloseConnections(context.Background(), s.cfg.ServiceName, "e2e: forced close")
			require.NoError(t, err)
			require.Positive(t, closed, "the service's connections, named %s-*", s.cfg.ServiceName)
		}
	}
	keys := map[string]map[string]bool{}
	eventually(t, 5*time.Minute, func() error {
		for _, d := range c.all() {
			if keys[d.MessageId] == nil {
				keys[d.MessageId] = map[string]bool{}
			}
			k, _ := d.Headers["x-retry-key"].(string)
			keys[d.MessageId][k] = true
		}
		if len(keys) < n {
			return fmt.Errorf("%d of %d republished", len(keys), n)
		}
		return nil
	})
	dups := len(c.all()) - n
	for id, ks := range keys {
		require.Len(t, ks, 1, "message %s arrived with different keys: %v", id, ks)
		require.True(t, ks[id+":1"], "message %s key", id)
	}
	t.Logf("500 messages, connections force-closed mid-run: 0 lost, %d duplicates (same key)", dups)
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := t.TempDir() + "/retry-scheduler"
	out, err := exec.Command("go", "build", "-o", bin, "github.com/retry-scheduler/retry-scheduler/cmd/retry-scheduler").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// startWorker runs a worker as its own process, so the test can SIGKILL it.
func (s *stack) startWorker(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "worker",
		"-rabbitmq-url", brokertest.URL(),
		"-temporal-address", s.temporal.Address,
		"-namespace", s.temporal.Namespace,
		"-task-queue", s.cfg.TaskQueue,
		"-retry-queue", s.ingress,
		"-manual-review-queue", s.dlq,
		"-http-addr", "127.0.0.1:0",
	)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("worker output:\n%s", logs.String())
		}
	})
	return cmd
}

// A failure reported after the run ended: the new run continues the count and its dead
// letter still carries the earlier run's attempts. The bridge names that run, read from the
// server's record rather than visibility, so the new run looks it up once: one PriorAttempts
// local activity, no retry waiting for visibility in its first workflow task.
func TestLateReportNewRunKeepsTheWholeStory(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	var mu sync.Mutex
	failing := false
	c := s.consume(orders, func(d amqp.Delivery) {
		mu.Lock()
		f := failing
		mu.Unlock()
		if f {
			n, key := retryHeaders(d)
			_ = s.sendRetry(message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: orders,
				ErrorReason: fmt.Sprintf("fail #%d", n+1), HTTPStatus: 503, RetryCount: n, RetryKey: key})
		}
		_ = d.Ack(false)
	})
	dead := s.consume(s.dlq, nil)

	s.publishRetry(message.RetryMessage{MessageID: "late-1", OriginalPayload: []byte("x"), OriginalQueue: orders, ErrorReason: "fail #1", HTTPStatus: 503})
	id := message.WorkflowID(orders, "late-1")
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status)
	c.next(t, patience)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	d, err := s.tc.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	earlier := d.WorkflowExecution.RunID

	// The consumer's report of retry 1 arrives only now, after the run ended as delivered.
	mu.Lock()
	failing = true
	mu.Unlock()
	s.publishRetry(message.RetryMessage{MessageID: "late-1", OriginalPayload: []byte("x"), OriginalQueue: orders,
		ErrorReason: "fail #2", HTTPStatus: 503, RetryCount: 1, RetryKey: "late-1:1"})

	env := envelopeOf(t, dead.next(t, patience))
	require.Equal(t, "exhausted", env.DeadReason)
	require.Len(t, env.RetryAttempts, 4, "attempts of both runs")
	for i, a := range env.RetryAttempts {
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, fmt.Sprintf("fail #%d", i+1), a.Error)
	}
	st, err := s.state(id)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(st.Attempts), 1)
	require.Equal(t, "fail #1", st.Attempts[0].Error, "the earlier run's attempt carried over")
	require.True(t, slices.ContainsFunc(st.Events, func(e workflows.Event) bool {
		return e.Detail == "continues the earlier run "+earlier+": 1 attempts carried over"
	}), "the run says which run it continued: %+v", st.Events)
	require.Equal(t, []int32{1}, s.priorAttemptsTries(id), "one PriorAttempts local activity, tried once")
	s.recordHistory(id, "late-report-continues-earlier-run")
}

// priorAttemptsTries are the attempts recorded by each PriorAttempts local-activity marker in
// the history of workflow id's latest run: a local activity's retries end in one marker,
// which records the attempt that ended it.
func (s *stack) priorAttemptsTries(id string) []int32 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	dc := converter.GetDefaultDataConverter()
	var tries []int32
	it := s.tc.GetWorkflowHistory(ctx, id, "", false, 0)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(s.t, err)
		m := e.GetMarkerRecordedEventAttributes()
		if m.GetMarkerName() != "LocalActivity" {
			continue
		}
		var data struct {
			ActivityType string
			Attempt      int32
		}
		require.NoError(s.t, dc.FromPayloads(m.GetDetails()["data"], &data))
		if data.ActivityType == "PriorAttempts" {
			tries = append(tries, data.Attempt)
		}
	}
	return tries
}
