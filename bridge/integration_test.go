//go:build integration

package bridge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// recordingStarter records reports and can be made to fail; every call is an event on calls.
type recordingStarter struct {
	failing atomic.Bool
	delay   time.Duration
	calls   chan string
	// Reports after the first gateAfter wait for gate to close, when gate is set.
	gate      chan struct{}
	gateAfter int64
	started   atomic.Int64

	// refused names a message whose every report hangs until its deadline, as a start that
	// Temporal's store refuses does.
	refused string

	mu  sync.Mutex
	ids map[string]int
}

func newRecordingStarter() *recordingStarter {
	return &recordingStarter{calls: make(chan string, 10000), ids: make(map[string]int)}
}

func (s *recordingStarter) Report(ctx context.Context, r message.FailureReport) error {
	if s.refused != "" && r.Message.MessageID == s.refused {
		select {
		case s.calls <- r.Message.MessageID:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	if s.gate != nil && s.started.Add(1) > s.gateAfter {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var err error
	if s.failing.Load() {
		err = errors.New("temporal unreachable")
	} else {
		s.mu.Lock()
		s.ids[r.Message.MessageID]++
		s.mu.Unlock()
	}
	select {
	case s.calls <- r.Message.MessageID:
	default:
	}
	return err
}

func (s *recordingStarter) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// total is how many reports succeeded so far, of every id.
func (s *recordingStarter) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.ids {
		n += k
	}
	return n
}

// fixture is one test's queues, a broker connection for the test itself, and a bridge.
type fixture struct {
	t        *testing.T
	ingress  string
	dlq      string
	connName string
	urls     string // what the bridge and its dead-letter publisher dial: broker.Config.URL
	admin    *amqp.Connection
	ch       *amqp.Channel
	reporter *recordingStarter
	bridge   *Bridge
	metrics  *Metrics

	mu    sync.Mutex
	conns []*amqp.Connection

	stop func()
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return newFixtureOn(t, cfg, brokertest.URL())
}

// newFixtureOn is newFixture with the bridge and its dead-letter publisher dialing urls (a
// comma-separated list); the test's own connection uses the test broker.
func newFixtureOn(t *testing.T, cfg Config, urls string) *fixture {
	t.Helper()
	suffix := randomHex(4)
	f := &fixture{
		t:        t,
		urls:     urls,
		ingress:  "bridge-it-" + t.Name() + "-" + suffix,
		dlq:      "bridge-it-" + t.Name() + "-dlq-" + suffix,
		connName: "bridge-it-" + suffix,
		reporter: newRecordingStarter(),
	}
	var err error
	f.admin, err = amqp.Dial(brokertest.URL())
	if err != nil {
		testenv.Missing(t, "no RabbitMQ at %s: %v", broker.RedactURL(brokertest.URL()), err)
	}
	f.ch, err = f.admin.Channel()
	require.NoError(t, err)
	require.NoError(t, f.ch.Confirm(false))
	for q, args := range map[string]amqp.Table{f.dlq: cfg.DeadLetterArgs, f.ingress: cfg.IngressArgs} {
		_, err := f.ch.QueueDeclare(q, true, false, false, false, args)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if f.stop != nil {
			f.stop()
		}
		for _, q := range []string{f.ingress, f.dlq} {
			_, _ = f.ch.QueueDelete(q, false, false, false)
		}
		_ = f.admin.Close()
	})

	pub := broker.NewPublisher(broker.Config{URL: f.urls, ConnectionName: f.connName + "-dlq"}, nil)
	t.Cleanup(func() { _ = pub.Close() })

	cfg.Queue = f.ingress
	cfg.DeadLetterQueue = f.dlq
	if cfg.ReportTimeout == 0 {
		cfg.ReportTimeout = 2 * time.Second
	}
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = 100 * time.Millisecond
	}
	f.metrics = NewMetrics(prometheus.NewRegistry())
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f.bridge = New(cfg, f.dial, f.reporter, pub, logger, f.metrics)
	return f
}

// dial is broker.Dial with a connection name only this test uses, remembering each
// connection so that the test can have the broker close exactly those.
func (f *fixture) dial() (*amqp.Connection, error) {
	return f.keep(broker.Dial(broker.Config{URL: f.urls, ConnectionName: f.connName}))
}

// keep remembers a connection just dialled, so that the test can have the broker close it.
func (f *fixture) keep(c *amqp.Connection, err error) (*amqp.Connection, error) {
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	return c, nil
}

// dialWithRecovery enables amqp091's automatic connection recovery, retrying fast.
func (f *fixture) dialWithRecovery() (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(f.connName)
	return f.keep(amqp.DialConfig(brokertest.URL(), amqp.Config{
		Properties: props,
		Recovery: &amqp.Recovery{ReconnectionConfig: &amqp.ReconnectionConfig{
			MaxRetryCount: 10, RetryInterval: time.Millisecond,
		}},
	}))
}

func (f *fixture) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.bridge.Run(ctx) }()
	f.stop = func() {
		f.stop = nil
		cancel()
		select {
		case err := <-done:
			assert.NoError(f.t, err)
		case <-time.After(30 * time.Second):
			f.t.Fatal("Run did not return after cancel")
		}
	}
	f.eventually("bridge ready", 10*time.Second, f.bridge.Ready)
}

func (f *fixture) eventually(what string, timeout time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fixture) publish(queue string, p amqp.Publishing) {
	f.t.Helper()
	p.DeliveryMode = amqp.Persistent
	dc, err := f.ch.PublishWithDeferredConfirm("", queue, true, false, p)
	require.NoError(f.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := dc.WaitContext(ctx)
	require.NoError(f.t, err)
	require.True(f.t, ok, "broker nacked the publish")
}

func (f *fixture) publishRetry(id string) {
	f.t.Helper()
	body, err := json.Marshal(map[string]any{
		"message_id":       id,
		"original_payload": base64.StdEncoding.EncodeToString([]byte("payload " + id)),
		"original_queue":   "orders",
		"error_reason":     "timeout",
		"retry_count":      0,
		"max_retries":      3,
	})
	require.NoError(f.t, err)
	f.publish(f.ingress, amqp.Publishing{ContentType: "application/json", MessageId: id, Body: body})
}

// messages is the queue's ready count. Unacked deliveries are not in it, so it is read with
// the bridge stopped (which requeues anything unacked) when checking for a missing ack.
func (f *fixture) messages(queue string) int {
	f.t.Helper()
	q, err := f.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(f.t, err)
	return q.Messages
}

func (f *fixture) waitCall(timeout time.Duration) string {
	f.t.Helper()
	select {
	case id := <-f.reporter.calls:
		return id
	case <-time.After(timeout):
		f.t.Fatal("timed out waiting for a Report")
		return ""
	}
}

func TestIntegrationAcceptedAckedOnce(t *testing.T) {
	f := newFixture(t, Config{})
	f.start()

	f.publishRetry("acc-1")
	assert.Equal(t, "acc-1", f.waitCall(10*time.Second))
	f.eventually("accepted counted", 5*time.Second, func() bool { return outcomes(f.metrics, OutcomeAccepted) == 1 })

	f.stop()
	assert.Equal(t, 0, f.messages(f.ingress), "acked, so nothing was requeued by the channel close")
	assert.Equal(t, 1, f.reporter.count("acc-1"))
	assert.Equal(t, 1.0, counterValue(f.metrics.scheduled.WithLabelValues("orders")))
	assert.False(t, f.bridge.Ready())
}

// While Temporal is down the bridge holds what it has: on a quorum queue that drops a message
// returned twice, requeueing (the bridge before holding) lost every message of an outage.
func TestIntegrationTemporalDownHoldsWithoutSpendingDeliveries(t *testing.T) {
	f := newFixture(t, Config{Prefetch: 3, IngressArgs: amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": 1}})
	f.reporter.failing.Store(true)
	f.start()

	const n = 6 // more than the prefetch: some held, the rest ready in the queue
	for i := range n {
		f.publishRetry(fmt.Sprintf("fail-%d", i))
	}
	f.waitCall(10 * time.Second)
	f.eventually("bridge holding", 10*time.Second, func() bool {
		return outcomes(f.metrics, OutcomePaused) >= 1 && !f.bridge.Ready()
	})

	// Backoff, not a spin: in 3 s of failures the doubling probe allows only a handful of tries.
	window := time.After(3 * time.Second)
	tries := 1
loop:
	for {
		select {
		case <-f.reporter.calls:
			tries++
		case <-window:
			break loop
		}
	}
	assert.LessOrEqual(t, tries, 3+8, "Report attempts while Temporal is down")
	assert.Equal(t, 0.0, outcomes(f.metrics, OutcomeRequeued), "nothing returned to the queue")
	assert.Equal(t, 0.0, gaugeValue(f.metrics.consuming), "bridge_consuming while holding")

	f.reporter.failing.Store(false)
	for i := range n {
		id := fmt.Sprintf("fail-%d", i)
		f.eventually(id+" accepted after recovery", 30*time.Second, func() bool { return f.reporter.count(id) == 1 })
	}
	f.eventually("bridge consuming again", 10*time.Second, f.bridge.Ready)
	assert.Equal(t, 1.0, gaugeValue(f.metrics.consuming), "bridge_consuming after recovery")
	f.publishRetry("after-1")
	f.eventually("next message accepted", 10*time.Second, func() bool { return f.reporter.count("after-1") == 1 })

	f.stop()
	assert.Equal(t, 0, f.messages(f.ingress))
	assert.Equal(t, 0, f.messages(f.dlq))
	assert.Equal(t, float64(n+1), outcomes(f.metrics, OutcomeAccepted))
}

// A message whose report fails while Temporal answers is that message's problem: it is tried
// ReportTries times, then dead-lettered as poison, and the messages behind it flow meanwhile.
func TestIntegrationRefusedMessageDoesNotStallTheQueue(t *testing.T) {
	f := newFixture(t, Config{ReportTimeout: 2 * time.Second, Probe: func(context.Context) error { return nil }})
	f.reporter.refused = "refused-1"
	f.start()

	f.publishRetry("refused-1")
	require.Equal(t, "refused-1", f.waitCall(10*time.Second))
	const n = 100
	for i := range n {
		f.publishRetry(fmt.Sprintf("behind-%03d", i))
	}
	f.eventually("the 100 behind it accepted", 20*time.Second, func() bool {
		return outcomes(f.metrics, OutcomeAccepted) == n
	})
	assert.Equal(t, 0.0, outcomes(f.metrics, OutcomePoison), "all 100 went through while the refused one was still being tried")
	assert.True(t, f.bridge.Ready())

	f.eventually("refused message dead-lettered", 30*time.Second, func() bool { return outcomes(f.metrics, OutcomePoison) == 1 })
	d, ok, err := f.ch.Get(f.dlq, true)
	require.NoError(t, err)
	require.True(t, ok)
	var env message.Envelope
	require.NoError(t, json.Unmarshal(d.Body, &env))
	assert.Equal(t, "refused-1", env.MessageID)
	assert.Equal(t, "poison", env.DeadReason)
	assert.Contains(t, env.DeadDetail, fmt.Sprintf("report failed %d times while Temporal answered other calls", DefaultReportTries))
	assert.Contains(t, env.DeadDetail, "context deadline exceeded")

	f.stop()
	assert.Equal(t, 0, f.messages(f.ingress))
}

func TestIntegrationPoisonAndOversize(t *testing.T) {
	f := newFixture(t, Config{Decode: DecodeOptions{MaxMessageBytes: 1024}})
	f.start()

	f.publish(f.ingress, amqp.Publishing{ContentType: "text/plain", MessageId: "junk-1", Body: []byte("not a retry message")})
	big := bytes.Repeat([]byte("x"), 2048)
	f.publish(f.ingress, amqp.Publishing{
		MessageId: "big-1",
		Headers: amqp.Table{"x-death": []any{amqp.Table{
			"queue": "orders", "exchange": "", "routing-keys": []any{"orders"}, "reason": "rejected", "count": int64(1),
		}}},
		Body: big,
	})
	f.publishRetry("good-1")
	f.eventually("good message accepted", 10*time.Second, func() bool { return f.reporter.count("good-1") == 1 })
	f.eventually("both dead-lettered", 10*time.Second, func() bool {
		return outcomes(f.metrics, OutcomePoison) == 1 && outcomes(f.metrics, OutcomeOversize) == 1
	})
	assert.True(t, f.bridge.Ready())

	envelopes := map[string]message.Envelope{}
	for range 2 {
		d, ok, err := f.ch.Get(f.dlq, true)
		require.NoError(t, err)
		require.True(t, ok, "envelope on the dead-letter queue")
		var env message.Envelope
		require.NoError(t, json.Unmarshal(d.Body, &env))
		assert.Equal(t, env.DeadReason, d.Headers["x-dead-reason"])
		assert.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
		envelopes[env.DeadReason] = env
	}
	poison := envelopes["poison"]
	assert.Equal(t, "not a RetryMessage and no x-death header", poison.DeadDetail)
	assert.Equal(t, "junk-1", poison.MessageID)
	assert.Equal(t, []byte("not a retry message"), poison.OriginalMessage.Payload)
	oversize := envelopes["oversize"]
	assert.Contains(t, oversize.DeadDetail, "2048 bytes")
	assert.Equal(t, "orders", oversize.OriginalQueue)
	assert.Equal(t, big, oversize.OriginalMessage.Payload)

	f.stop()
	assert.Equal(t, 0, f.messages(f.ingress), "poison, oversize and good message all acked")
}

func TestIntegrationDeadLetterPublishFailsHolds(t *testing.T) {
	f := newFixture(t, Config{})
	// A dead-letter queue that cannot take the envelope must not cost the poison message.
	f.bridge = New(f.bridge.cfg, f.dial, f.reporter, failingPublisher{}, nil, f.metrics)
	f.start()

	f.publish(f.ingress, amqp.Publishing{ContentType: "text/plain", Body: []byte("junk")})
	f.eventually("poison held and bridge holding", 10*time.Second, func() bool {
		return outcomes(f.metrics, OutcomePaused) >= 1 && !f.bridge.Ready()
	})

	f.stop()
	assert.Equal(t, 1, f.messages(f.ingress), "requeued at shutdown")
	assert.Equal(t, 1.0, outcomes(f.metrics, OutcomeRequeued))
	assert.Equal(t, 0.0, outcomes(f.metrics, OutcomePoison))
}

func TestIntegrationShutdownLetsInFlightFinish(t *testing.T) {
	f := newFixture(t, Config{ReportTimeout: 10 * time.Second})
	f.reporter.gate = make(chan struct{})
	f.start()

	f.publishRetry("inflight-1")
	f.eventually("report in flight", 10*time.Second, func() bool { return f.reporter.started.Load() == 1 })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		f.stop()
	}()
	f.eventually("consumer cancelled", 10*time.Second, func() bool { return !f.bridge.Ready() })
	select {
	case <-stopped:
		t.Fatal("Run returned with a report in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(f.reporter.gate)
	<-stopped

	assert.Equal(t, 1, f.reporter.count("inflight-1"))
	assert.Equal(t, 1.0, outcomes(f.metrics, OutcomeAccepted))
	assert.Equal(t, 0, f.messages(f.ingress), "acked before the channel closed")
}

type failingPublisher struct{}

func (failingPublisher) Publish(context.Context, string, string, bool, amqp.Publishing) error {
	return broker.ErrUnroutable
}

func TestIntegrationConnectionClosedMidStream(t *testing.T) {
	testConnectionClosedMidStream(t, false)
}

// With amqp091's automatic recovery switched on by the dial function, the bridge must still
// treat the close as the end of the channel: the recovered channel restarts delivery tags.
func TestIntegrationConnectionClosedMidStreamRecoveryDial(t *testing.T) {
	testConnectionClosedMidStream(t, true)
}

func testConnectionClosedMidStream(t *testing.T, recovery bool) {
	testenv.LookPath(t, "rabbitmqctl", "RabbitMQ's own CLI, installed with rabbitmq-server")
	f := newFixture(t, Config{Prefetch: 32, Workers: 8, ReportTimeout: 20 * time.Second})
	if recovery {
		f.bridge.dial = f.dialWithRecovery
	}
	// Reports stall after 150 until the connection is gone: the close lands with handlers in
	// flight and deliveries prefetched, the case where an ack on the wrong channel would bite.
	f.reporter.delay = time.Millisecond
	f.reporter.gateAfter = 150
	f.reporter.gate = make(chan struct{})
	f.start()

	const n = 500
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("mid-%03d", i)
	}
	go func() {
		// Published from its own connection so that the close hits only the bridge.
		conn, err := amqp.Dial(brokertest.URL())
		if err != nil {
			t.Errorf("dial publisher: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("open channel: %v", err)
			return
		}
		for _, id := range ids {
			body, _ := json.Marshal(map[string]any{
				"message_id": id, "original_payload": "", "original_queue": "orders", "retry_count": 0,
			})
			if err := ch.Publish("", f.ingress, false, false, amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()

	f.eventually("stream under way", 20*time.Second, func() bool { return f.reporter.started.Load() >= 150+8 })
	closed := f.closeBridgeConnections()
	require.Positive(t, closed, "closed the bridge's connection")
	f.eventually("in-flight deliveries of the closed channel dropped", 10*time.Second, func() bool {
		return outcomes(f.metrics, OutcomeDroppedStale) >= 1
	})
	close(f.reporter.gate)

	allReported := func() bool {
		for _, id := range ids {
			if f.reporter.count(id) == 0 {
				return false
			}
		}
		return true
	}
	f.eventually("every id reported", 60*time.Second, allReported)
	f.eventually("bridge resumed", 10*time.Second, f.bridge.Ready)
	f.mu.Lock()
	sessions := len(f.conns)
	f.mu.Unlock()
	assert.GreaterOrEqual(t, sessions, 2, "reconnected")

	f.stop()
	assert.Equal(t, 0, f.messages(f.ingress), "every delivery acked exactly on its own channel")
	t.Logf("accepted=%v dropped_stale=%v requeued=%v",
		outcomes(f.metrics, OutcomeAccepted), outcomes(f.metrics, OutcomeDroppedStale), outcomes(f.metrics, OutcomeRequeued))
}

// closeBridgeConnections has the broker close the bridge's connections, as
// `rabbitmqctl close_all_connections "test"` would, but only those: other tests and services
// share the broker.
func (f *fixture) closeBridgeConnections() int {
	f.t.Helper()
	f.mu.Lock()
	local := map[string]bool{}
	for _, c := range f.conns {
		if !c.IsClosed() {
			local[c.LocalAddr().String()] = true
		}
	}
	f.mu.Unlock()

	out, err := exec.Command("rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid", "name").Output()
	require.NoError(f.t, err)
	closed := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pid, name, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			continue
		}
		from, _, _ := strings.Cut(name, " -> ")
		if !local[strings.TrimSpace(from)] {
			continue
		}
		if out, err := exec.Command("rabbitmqctl", "close_connection", strings.TrimSpace(pid), "test").CombinedOutput(); err != nil {
			f.t.Fatalf("close_connection %s: %v: %s", pid, err, out)
		}
		closed++
	}
	return closed
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}
