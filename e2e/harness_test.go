//go:build integration

// Package e2e runs the whole service against the real RabbitMQ and a real Temporal dev
// server: retries, dead letters, counting and recovery as a user of the broker sees them.
//
// A test asserts outcomes, order and counts, never how soon something came: a latency or a
// lateness is a benchmark figure (cmd/bench), which a test may log. Where a test waits, it
// waits for an event (an arrival, a status, a barrier, a metric, a page's text) up to
// patience, and says what it waited for when it fails. A scenario's own clock (an outage's
// length, a policy's window) is a span the test sets, not a bound it judges; where a test must
// act within one (an operator's retry while a message waits), the span is long enough for any
// machine (an hour) or the test checks by an outcome that it did (a refusal that names the
// start delay). The few durations still asserted stand for a product guarantee and are ten
// seconds or more (the fatal error's exit, the gates learning of an open breaker).
//
// Every test has its own queues, task queue and processes, but most run one at a time, so
// that one test's load does not slow another's scenario. The few that spend minutes waiting
// on something no load moves (a Temporal outage on a server of their own, the SDK's
// fatal-error grace, the replay job at its rate) call t.Parallel: go test runs them together
// after the others (the Makefile's -parallel lets all of them run at once), which takes the
// longest of them instead of their sum. make test runs the package on the dev server and on
// PostgreSQL, which may run at once (E2E_POSTGRES_BESIDE), and CI must pass with a core kept
// busy by another process: every wait allows for a machine three times slower than that.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/service"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// policyFile routes the test's queues to short delays so that a test takes seconds:
// a retry 300 ms after each failure, a 2 s quiet window, 3 retries. "<prefix>.slow*" queues
// wait 4 s; "<prefix>.wait*" queues an hour, so that a retry stays scheduled for whatever an
// operator does to it, however slow the machine, and only the operator's action explains a
// republish; "<prefix>.delayed*" queues 30 s, a first delay a test can see pass. A message
// naming policy e2e-email (the ops tests' scheduled retries) gets the built-in email policy's
// 8 retries and 5-minute quiet window, its first retry an hour out, not the built-in's minute,
// which a loaded machine's test could outlast.
const policyFile = `
policies:
  e2e-fast:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 3
    quiet_window: 2s
  e2e-slow:
    backoff: {type: schedule, delays: [4s]}
    max_retries: 3
    quiet_window: 2s
  e2e-wait:
    backoff: {type: schedule, delays: [1h]}
    max_retries: 3
    quiet_window: 2s
  e2e-delayed:
    backoff: {type: schedule, delays: [30s]}
    max_retries: 3
    quiet_window: 2s
  e2e-email:
    backoff: {type: schedule, delays: [1h]}
    max_retries: 8
    quiet_window: 5m
routes:
  - queue: "e2e-*.slow*"
    policy: e2e-slow
  - queue: "e2e-*.wait*"
    policy: e2e-wait
  - queue: "e2e-*.delayed*"
    policy: e2e-delayed
  - queue: "e2e-*"
    policy: e2e-fast
`

// delayedFirstRetry is the first delay of the e2e-delayed policy ("<prefix>.delayed*" queues).
const delayedFirstRetry = 30 * time.Second

// patience bounds a test's wait for an event that comes in seconds on a quiet machine (a
// republish, a workflow's end, a status, a page's refresh): long enough for a machine three
// times slower than the loaded CI machine (2 cores, -race, the other pass beside it) where
// the test passed, so that the wait fails only when the event does not come, and then says
// what it waited for. A test never judges how soon the event came: a latency is a benchmark
// figure (cmd/bench), not an assertion.
const patience = 2 * time.Minute

// callTimeout bounds one call to Temporal (a query, a describe, a list): a query waits for a
// workflow task on a worker that a loaded machine may not run for seconds.
const callTimeout = 30 * time.Second

// stack is one test's private slice of the world: its own queues and task queue on the
// shared broker and Temporal server.
type stack struct {
	t        *testing.T
	prefix   string
	ingress  string
	dlq      string
	cfg      config.Config
	tc       client.Client
	pub      *broker.Publisher
	temporal *devserver.Server
	// brokerURL is what the service and the test's own connections dial (a comma list for a
	// cluster).
	brokerURL string
	// logger is the service's logger (stackOptions.logger).
	logger *slog.Logger
	// args are the service's flags, for processes started from the binary.
	args []string
}

// stackOptions change what newStackWith sets up; the zero value is the shared broker with
// the service's default queue type.
type stackOptions struct {
	brokerURLs string // the service's RABBITMQ_URL (a comma list for a cluster); default brokertest.URL()
	queueType  string // the service's QUEUE_TYPE; default the service's
	// logger is where the service processes run logs; default nowhere.
	logger *slog.Logger
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackOn(t, devserver.StartForTest(t))
}

// newStackOn is newStack on a given Temporal server (one the test owns, to kill it).
func newStackOn(t *testing.T, temporal *devserver.Server) *stack {
	t.Helper()
	return newStackWith(t, temporal, stackOptions{})
}

// newStackWith is newStackOn with opts.
func newStackWith(t *testing.T, temporal *devserver.Server, opts stackOptions) *stack {
	t.Helper()
	if opts.brokerURLs == "" {
		opts.brokerURLs = brokertest.URL()
	}
	prefix := devserver.UniqueName("e2e")
	if opts.logger == nil {
		opts.logger = discard()
	}
	s := &stack{t: t, prefix: prefix, ingress: prefix + ".retry", dlq: prefix + ".dead", brokerURL: opts.brokerURLs, logger: opts.logger}
	s.temporal = temporal

	dir := t.TempDir()
	pf := filepath.Join(dir, "policies.yaml")
	require.NoError(t, os.WriteFile(pf, []byte(policyFile), 0o600))
	port, err := freeport.Get()
	require.NoError(t, err)
	args := []string{
		"-rabbitmq-url", s.brokerURL,
		"-temporal-address", s.temporal.Address,
		"-namespace", s.temporal.Namespace,
		"-task-queue", prefix,
		"-retry-queue", s.ingress,
		"-manual-review-queue", s.dlq,
		"-policy-file", pf,
		"-http-addr", "127.0.0.1:" + strconv.Itoa(port),
		"-max-message-bytes", "65536",
	}
	if opts.queueType != "" {
		args = append(args, "-queue-type", opts.queueType)
	}
	cfg, err := config.Load(args, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	s.cfg, s.args = cfg, args

	s.tc, err = client.Dial(client.Options{HostPort: s.temporal.Address, Namespace: s.temporal.Namespace, Logger: nopLogger()})
	require.NoError(t, err)
	t.Cleanup(s.tc.Close)
	s.pub = broker.NewPublisher(broker.Config{URL: s.brokerURL, ConnectionName: "e2e-test"}, discard())
	t.Cleanup(func() { _ = s.pub.Close() })
	bc := broker.Config{URL: s.brokerURL, QueueType: cfg.QueueType}
	require.NoError(t, broker.Declare(bc, discard(), broker.Topology(bc, s.ingress, s.dlq)...))
	t.Cleanup(func() { s.deleteQueues(s.ingress, s.dlq) })
	return s
}

// run starts the service in this process in the given mode until the test ends.
func (s *stack) run(mode string) {
	s.t.Helper()
	s.runWithLogger(mode, s.logger)
}

// runWithLogger is run with the service logging to logger.
func (s *stack) runWithLogger(mode string, logger *slog.Logger) {
	s.t.Helper()
	cfg := s.cfg
	cfg.Mode = mode
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, cfg, logger) }()
	s.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(s.t, err)
		case <-time.After(patience):
			s.t.Errorf("service did not stop within %s", patience)
		}
	})
	s.waitReady(cfg)
}

func (s *stack) waitReady(cfg config.Config) {
	s.t.Helper()
	url := "http://" + cfg.HTTPAddr + "/readyz"
	require.Eventually(s.t, func() bool { return httpOK(url) }, patience, 50*time.Millisecond, "service not ready at %s", url)
}

// queue declares a durable queue owned by the test.
func (s *stack) queue(name string, args amqp.Table) string {
	s.t.Helper()
	return s.queueOn(s.brokerURL, name, args)
}

// queueOn is queue, declared through the broker at url (one node of a cluster).
func (s *stack) queueOn(url, name string, args amqp.Table) string {
	s.t.Helper()
	onChannel(s.t, url, func(ch *amqp.Channel) {
		_, err := ch.QueueDeclare(name, true, false, false, false, args)
		require.NoError(s.t, err)
	})
	s.t.Cleanup(func() { s.deleteQueues(name) })
	return name
}

// onChannel runs f on a channel of a connection of its own to the broker at url, both closed
// when f returns.
func onChannel(t *testing.T, url string, f func(ch *amqp.Channel)) {
	t.Helper()
	conn, err := broker.Dial(broker.Config{URL: url})
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	f(ch)
}

// bind binds the test's queue to exchange with key.
func (s *stack) bind(queue, exchange, key string) {
	s.t.Helper()
	onChannel(s.t, s.brokerURL, func(ch *amqp.Channel) {
		require.NoError(s.t, ch.QueueBind(queue, key, exchange, false, nil))
	})
}

func (s *stack) deleteQueues(names ...string) {
	conn, err := broker.Dial(broker.Config{URL: s.brokerURL})
	if err != nil {
		return
	}
	defer conn.Close()
	for _, n := range names {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(n, false, false, false)
			_ = ch.Close()
		}
	}
}

// publishRetry publishes a RetryMessage to the ingress queue.
func (s *stack) publishRetry(m message.RetryMessage) {
	s.t.Helper()
	require.NoError(s.t, s.sendRetry(m))
}

// sendRetry is publishRetry for goroutines other than the test's.
func (s *stack) sendRetry(m message.RetryMessage) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.pub.Publish(ctx, "", s.ingress, true, amqp.Publishing{
		ContentType: "application/json", MessageId: m.MessageID, Body: body, DeliveryMode: amqp.Persistent,
	})
}

func (s *stack) publishRaw(queue string, p amqp.Publishing) {
	s.t.Helper()
	p.DeliveryMode = amqp.Persistent
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(s.t, s.pub.Publish(ctx, "", queue, true, p))
}

func (s *stack) workflowResult(id string, timeout time.Duration) workflows.Result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var r workflows.Result
	for {
		// The bridge starts the workflow asynchronously after the publish: until it has,
		// the ID is unknown.
		err := s.tc.GetWorkflow(ctx, id, "").Get(ctx, &r)
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		require.NoError(s.t, err, "the end of workflow %s, awaited for %s", id, timeout)
		return r
	}
}

func (s *stack) state(id string) (workflows.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := s.tc.QueryWorkflow(ctx, id, "", workflows.QueryState)
	if err != nil {
		return workflows.State{}, err
	}
	var st workflows.State
	return st, v.Get(&st)
}

// retryStatus is the workflow's RetryStatus search attribute, "" when it has none (or the
// workflow cannot be described).
func (s *stack) retryStatus(id string) workflows.Status {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	d, err := s.tc.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return ""
	}
	var st string
	if p := d.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[workflows.SAStatus.GetName()]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &st)
	}
	return workflows.Status(st)
}

// waitRetryStatus waits until the workflow's RetryStatus search attribute reads want.
func (s *stack) waitRetryStatus(id string, want workflows.Status, timeout time.Duration) {
	s.t.Helper()
	eventually(s.t, timeout, func() error {
		if st := s.retryStatus(id); st != want {
			return fmt.Errorf("%s is %q, want %q", id, st, want)
		}
		return nil
	})
}

// waitQueriedStatus waits until the workflow's queried state has status want. t is the
// calling test's own (a subtest's inside t.Run).
func (s *stack) waitQueriedStatus(t *testing.T, id string, want workflows.Status, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() error {
		st, err := s.state(id)
		if err == nil && st.Status != want {
			err = fmt.Errorf("%s: status %q, want %q", id, st.Status, want)
		}
		return err
	})
}

// recordHistory writes the workflow's history to $RECORD_HISTORIES/<name>.json for the replay
// tests (workflows/testdata/histories); without the variable it does nothing. It never
// replaces a recorded history (historytest.ErrExists).
func (s *stack) recordHistory(id, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := historytest.Record(ctx, s.tc, id, name)
	require.NoError(s.t, err)
}

// consumer collects what arrives on a queue, reconnecting when the broker drops it.
type consumer struct {
	s       *stack
	queue   string
	mu      sync.Mutex
	got     []amqp.Delivery
	arrived chan amqp.Delivery
	// barriers receives the id of each barrier message (see caughtUp), which got leaves out.
	barriers chan string
	// onMessage, when set, decides the fate of each delivery; the default acks it.
	onMessage func(d amqp.Delivery)
}

// barrierHeader marks the test's own barrier messages (see caughtUp).
const barrierHeader = "x-e2e-barrier"

func (s *stack) consume(queue string, onMessage func(d amqp.Delivery)) *consumer {
	c := &consumer{s: s, queue: queue, arrived: make(chan amqp.Delivery, 10000), barriers: make(chan string, 16), onMessage: onMessage}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			c.session(ctx, queue)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	s.t.Cleanup(func() { cancel(); wg.Wait() })
	return c
}

func (c *consumer) session(ctx context.Context, queue string) {
	conn, err := broker.Dial(broker.Config{URL: c.s.brokerURL, ConnectionName: "e2e-consumer"})
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			if id, ok := d.Headers[barrierHeader].(string); ok {
				_ = d.Ack(false)
				c.barriers <- id
				continue
			}
			c.mu.Lock()
			c.got = append(c.got, d)
			c.mu.Unlock()
			if c.onMessage != nil {
				c.onMessage(d)
			} else {
				_ = d.Ack(false)
			}
			c.arrived <- d
		}
	}
}

// retryHeaders reads what the scheduler stamps on a republish: x-retry-count (0 when it is
// absent or not an integer) and x-retry-key. A consumer's callback must not panic on a
// delivery without them: the panic would end the whole e2e run, not one test.
func retryHeaders(d amqp.Delivery) (n int, key string) {
	count, _ := message.HeaderInt64(d.Headers[message.HeaderRetryCount])
	key, _ = d.Headers[message.HeaderRetryKey].(string)
	return int(count), key
}

// failingConsumer is a consumer of queue that fails on every delivery: it reports the failure
// that report builds (from the delivery, its x-retry-count and x-retry-key) back to the
// scheduler, as a service integrated with the scheduler does, then acks. reportErr is the first report that could
// not be sent.
func (s *stack) failingConsumer(queue string, report func(d amqp.Delivery, n int, key string) message.RetryMessage) (c *consumer, reportErr func() error) {
	var mu sync.Mutex
	var first error
	c = s.consume(queue, func(d amqp.Delivery) {
		n, key := retryHeaders(d)
		if err := s.sendRetry(report(d, n, key)); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
		_ = d.Ack(false)
	})
	return c, func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// next waits for the next arrival on the consumer's queue.
func (c *consumer) next(t *testing.T, timeout time.Duration) amqp.Delivery {
	t.Helper()
	select {
	case d := <-c.arrived:
		return d
	case <-time.After(timeout):
		t.Fatalf("nothing arrived on %s within %s", c.queue, timeout)
		return amqp.Delivery{}
	}
}

// caughtUp returns once everything published to the consumer's queue so far has arrived:
// it publishes a barrier message and waits for it, and a queue hands its messages to its one
// consumer in the order they were enqueued (every publish of the service and the tests is
// confirmed before it returns). Tests that assert "nothing more arrived" call it once the
// producers are done (their workflows closed, their deliveries handled) instead of
// waiting a fixed time.
func (c *consumer) caughtUp(t *testing.T) {
	t.Helper()
	id := randomHex(t, 8)
	c.s.publishRaw(c.queue, amqp.Publishing{Headers: amqp.Table{barrierHeader: id}, Body: []byte("barrier")})
	timeout := time.After(patience)
	for {
		select {
		case got := <-c.barriers:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("the barrier message did not come back from %s within %s", c.queue, patience)
		}
	}
}

func (c *consumer) all() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.got...)
}

func envelopeOf(t *testing.T, d amqp.Delivery) message.Envelope {
	t.Helper()
	var e message.Envelope
	require.NoError(t, json.Unmarshal(d.Body, &e), "envelope: %s", d.Body)
	return e
}

func httpOK(url string) bool {
	resp, err := httpClient.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == 200
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	eventuallyEvery(t, timeout, 50*time.Millisecond, f)
}

// awaitProgress calls check once a second until it says finished. check's mark measures
// progress (higher is nearer); the wait fails when the mark has not risen for stall, or after
// limit in all. On a loaded server (CI on 2 cores) a long count or job is told from a stuck
// one by whether it moves, not by a fixed total.
func awaitProgress(t *testing.T, stall, limit time.Duration, check func() (finished bool, mark int, state string)) {
	t.Helper()
	began := time.Now()
	best, moved := math.MinInt, began
	for {
		finished, mark, state := check()
		if finished {
			return
		}
		if mark > best {
			best, moved = mark, time.Now()
		}
		if time.Since(moved) > stall || time.Since(began) > limit {
			t.Fatalf("%s; no progress for %s, %s in all", state,
				time.Since(moved).Round(time.Second), time.Since(began).Round(time.Second))
		}
		time.Sleep(time.Second)
	}
}

// eventuallyEvery is eventually for a check that costs the server work (a query, a count),
// made every interval.
func eventuallyEvery(t *testing.T, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(interval)
	}
	t.Fatalf("condition not met within %s: %v", timeout, err)
}
