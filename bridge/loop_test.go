package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The loop's unit tests: a session on a fake channel, deliveries whose acknowledger says how
// each was settled, a reporter that can block or fail. No broker.

// fakeChannel is the consumer side of a channel: Consume hands out deliveries, Cancel closes
// it as the broker's cancel-ok does.
type fakeChannel struct {
	deliveries chan amqp.Delivery
	consumeErr error

	mu              sync.Mutex
	cancels, closes int
}

func newFakeChannel() *fakeChannel {
	return &fakeChannel{deliveries: make(chan amqp.Delivery, 16)}
}

func (c *fakeChannel) Consume(string, string, bool, bool, bool, bool, amqp.Table) (<-chan amqp.Delivery, error) {
	if c.consumeErr != nil {
		return nil, c.consumeErr
	}
	return c.deliveries, nil
}

func (c *fakeChannel) Cancel(string, bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancels++
	close(c.deliveries)
	return nil
}

func (c *fakeChannel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	return nil
}

func (c *fakeChannel) counts() (cancels, closes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancels, c.closes
}

func (c *fakeChannel) NotifyClose(ch chan *amqp.Error) chan *amqp.Error { return ch }
func (c *fakeChannel) Qos(int, int, bool) error                         { return nil }
func (c *fakeChannel) QueueDeclare(string, bool, bool, bool, bool, amqp.Table) (amqp.Queue, error) {
	return amqp.Queue{}, nil
}
func (c *fakeChannel) QueueDeclarePassive(string, bool, bool, bool, bool, amqp.Table) (amqp.Queue, error) {
	return amqp.Queue{}, nil
}

// settleSignal is an acknowledger that sends "ack" or "requeue" for each settlement.
type settleSignal chan string

func (s settleSignal) Ack(uint64, bool) error { s <- "ack"; return nil }
func (s settleSignal) Nack(_ uint64, _ bool, requeue bool) error {
	if requeue {
		s <- "requeue"
	} else {
		s <- "nack"
	}
	return nil
}
func (s settleSignal) Reject(uint64, bool) error { panic("not used") }

// gateReporter reports each message as the test says: it announces each report on entered,
// and a message named in block waits for release first. The first failures reports fail with fail.
type gateReporter struct {
	entered chan string
	release chan struct{}
	block   map[string]bool

	mu       sync.Mutex
	fail     error
	failures int
	reported []string
}

func newGateReporter(block ...string) *gateReporter {
	r := &gateReporter{entered: make(chan string, 16), release: make(chan struct{}), block: map[string]bool{}}
	for _, id := range block {
		r.block[id] = true
	}
	return r
}

func (r *gateReporter) Report(ctx context.Context, rep message.FailureReport) error {
	id := rep.Message.MessageID
	r.entered <- id
	if r.block[id] {
		select {
		case <-r.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures > 0 {
		r.failures--
		return r.fail
	}
	r.reported = append(r.reported, id)
	return nil
}

// failFirst makes the next n reports fail with err.
func (r *gateReporter) failFirst(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail, r.failures = err, n
}

// temporalDown is what a report returns while Temporal is unavailable.
var temporalDown = Unavailable(errors.New("temporal down"))

// awaitPaused waits until the loop holds (it reports not ready), having had a report fail.
func awaitPaused(t *testing.T, r *loopRun) {
	t.Helper()
	require.Eventually(t, func() bool { return !r.b.Ready() }, 5*time.Second, time.Millisecond)
}

// startHolding starts a loop with Temporal down and waits until it holds, after the failed
// report of its one delivery m-1; it returns the loop, its reporter and m-1's settlement.
// The hold probes after reconnectDelay: a delay longer than the test never probes.
func startHolding(t *testing.T, reconnectDelay time.Duration) (*loopRun, *gateReporter, settleSignal) {
	t.Helper()
	rep := newGateReporter()
	rep.failFirst(1000, temporalDown)
	r := startLoop(t, Config{ReconnectDelay: reconnectDelay}, rep, newFakeChannel())
	settled := make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-1", settled)
	next(t, rep.entered, "report")
	awaitPaused(t, r)
	return r, rep, settled
}

func (r *gateReporter) reports() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reported...)
}

// loopRun is a loop running on a fake channel.
type loopRun struct {
	l          *loop
	b          *Bridge
	ch         *fakeChannel
	m          *Metrics
	connClosed chan *amqp.Error
	chClosed   chan *amqp.Error
	cancel     context.CancelFunc
	done       chan error
}

// startLoop runs a loop of a current session as Bridge.session does, with cfg's test
// defaults (a short ReportTimeout and ReconnectDelay).
func startLoop(t *testing.T, cfg Config, reporter Reporter, ch *fakeChannel) *loopRun {
	t.Helper()
	cfg.Decode = testOptions()
	if cfg.ReportTimeout == 0 {
		cfg.ReportTimeout = 2 * time.Second
	}
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = time.Millisecond
	}
	m := NewMetrics(prometheus.NewRegistry())
	b := New(cfg, nil, reporter, &fakePublisher{}, nil, m)
	b.gen = 1
	s := &session{b: b, ch: ch, gen: 1, results: make(chan result, b.cfg.Workers)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	r := &loopRun{b: b, ch: ch, m: m, connClosed: make(chan *amqp.Error, 1), chClosed: make(chan *amqp.Error, 1), done: make(chan error, 1)}
	r.l = &loop{s: s, mode: running, probeDelay: b.cfg.ReconnectDelay, connClosed: r.connClosed, chClosed: r.chClosed}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.l.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		s.cancel()
		b.handlers.Wait()
	})
	return r
}

// wait is the loop's return, or a failed test after a few seconds.
func (r *loopRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not return")
		return nil
	}
}

// delivery is a valid RetryMessage with message id id, settled through settled.
func delivery(t *testing.T, id string, settled settleSignal) amqp.Delivery {
	fields := validRetryMessage()
	fields["message_id"] = id
	return amqp.Delivery{Acknowledger: settled, ContentType: "application/json", Body: jsonBody(t, fields), MessageId: id}
}

// next is the next value on c, or a failed test after a few seconds.
func next[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", what)
		var zero T
		return zero
	}
}

func TestLoopHandsADeliveryToAHandlerAndAcksIt(t *testing.T) {
	rep := newGateReporter()
	r := startLoop(t, Config{}, rep, newFakeChannel())
	settled := make(settleSignal, 1)

	r.ch.deliveries <- delivery(t, "m-1", settled)

	assert.Equal(t, "m-1", next(t, rep.entered, "report"))
	assert.Equal(t, "ack", next(t, settled, "settlement"))
	assert.Equal(t, []string{"m-1"}, rep.reports())
	assert.True(t, r.b.Ready())
	// The outcome is counted just after the ack, which the test saw: wait for the count.
	assert.Eventually(t, func() bool { return outcomes(r.m, OutcomeAccepted) == 1 }, 5*time.Second, time.Millisecond,
		"no accepted outcome counted")
}

func TestLoopEndsTheSessionWhenTheChannelOrConnectionCloses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(r *loopRun)
		want  string
	}{
		{"channel closed", func(r *loopRun) { r.chClosed <- &amqp.Error{Code: 320, Reason: "CONNECTION_FORCED"} }, "channel closed"},
		{"connection closed", func(r *loopRun) { r.connClosed <- &amqp.Error{Code: 320, Reason: "CONNECTION_FORCED"} }, "connection closed"},
		{"consumer cancelled", func(r *loopRun) { close(r.ch.deliveries) }, "consumer cancelled by the broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startLoop(t, Config{}, newGateReporter(), newFakeChannel())
			settled := make(settleSignal, 1)
			r.ch.deliveries <- delivery(t, "m-1", settled)
			require.Equal(t, "ack", next(t, settled, "settlement"))

			tc.close(r)

			err := r.wait(t)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.False(t, r.b.Ready())
			assert.NotEqual(t, r.l.s.gen, r.b.gen, "the session is retired: its deliveries are never settled again")
			assert.Error(t, r.l.s.ctx.Err(), "the handlers' context ends with the connection")
			_, closes := r.ch.counts()
			assert.Zero(t, closes, "a lost channel is not closed again")
		})
	}
}

func TestLoopLostDropsHeldDeliveriesAsStale(t *testing.T) {
	r, _, settled := startHolding(t, time.Minute)

	r.chClosed <- &amqp.Error{Code: 504, Reason: "CHANNEL_ERROR"}

	require.ErrorContains(t, r.wait(t), "channel closed")
	assert.Equal(t, 1.0, outcomes(r.m, OutcomePaused))
	assert.Equal(t, 1.0, outcomes(r.m, OutcomeDroppedStale))
	assert.Empty(t, settled, "a held delivery of a lost channel is left to the broker")
}

func TestLoopReturnsTheConsumeError(t *testing.T) {
	ch := newFakeChannel()
	ch.consumeErr = errors.New("NOT_FOUND - no queue")
	r := startLoop(t, Config{}, newGateReporter(), ch)

	err := r.wait(t)

	require.ErrorContains(t, err, "consume retry.scheduled: NOT_FOUND - no queue")
	assert.False(t, r.l.consumed)
	assert.False(t, r.b.Ready())
	assert.NotEqual(t, r.l.s.gen, r.b.gen)
}

func TestLoopShutdownLetsTheHandlerFinishAndRequeuesTheRest(t *testing.T) {
	rep := newGateReporter("m-1")
	r := startLoop(t, Config{Workers: 1}, rep, newFakeChannel())
	first, second := make(settleSignal, 1), make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-1", first)
	require.Equal(t, "m-1", next(t, rep.entered, "report"))
	// The only handler is busy: m-2 stays in the consumer's buffer.
	r.ch.deliveries <- delivery(t, "m-2", second)

	r.cancel()

	assert.Equal(t, "requeue", next(t, second, "settlement of m-2"))
	select {
	case err := <-r.done:
		t.Fatalf("the loop returned (%v) before its handler finished", err)
	default:
	}
	close(rep.release)
	assert.Equal(t, "ack", next(t, first, "settlement of m-1"))
	require.NoError(t, r.wait(t))
	cancels, closes := r.ch.counts()
	assert.Equal(t, 1, cancels)
	assert.Equal(t, 1, closes)
	assert.False(t, r.b.Ready())
	assert.Equal(t, []string{"m-1"}, rep.reports())
	assert.Equal(t, 1.0, outcomes(r.m, OutcomeRequeued))
}

func TestLoopShutdownRequeuesHeldDeliveries(t *testing.T) {
	r, _, settled := startHolding(t, time.Minute)

	r.cancel()

	assert.Equal(t, "requeue", next(t, settled, "settlement"))
	require.NoError(t, r.wait(t))
	assert.Equal(t, 1.0, outcomes(r.m, OutcomeRequeued))
}

func TestLoopHoldsThenProbesThenResumes(t *testing.T) {
	rep := newGateReporter()
	// The report and the first probe fail; the second probe goes through.
	rep.failFirst(2, temporalDown)
	r := startLoop(t, Config{}, rep, newFakeChannel())
	settled := make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-1", settled)

	for _, what := range []string{"report", "first probe", "second probe"} {
		require.Equal(t, "m-1", next(t, rep.entered, what))
	}

	assert.Equal(t, "ack", next(t, settled, "settlement"))
	assert.Equal(t, []string{"m-1"}, rep.reports())
	// Running again: a new delivery is taken and acked.
	again := make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-2", again)
	assert.Equal(t, "ack", next(t, again, "settlement of m-2"))
	assert.True(t, r.b.Ready())
	assert.Equal(t, 2.0, outcomes(r.m, OutcomePaused))
	assert.Equal(t, r.b.cfg.ReconnectDelay, readProbeDelay(t, r), "a success resets the backoff")
}

// readProbeDelay reads the loop's backoff once the loop is idle (its channel closed), since
// the loop goroutine owns it.
func readProbeDelay(t *testing.T, r *loopRun) time.Duration {
	t.Helper()
	r.chClosed <- &amqp.Error{Code: 320, Reason: "test"}
	require.Error(t, r.wait(t))
	return r.l.probeDelay
}

func TestLoopHoldsWhileTemporalIsDown(t *testing.T) {
	r, rep, settled := startHolding(t, 4*time.Second)
	later := make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-2", later)

	// Holding: the probe is seconds away, and nothing more is taken or settled. Ending the
	// loop (its channel lost) lets the test read its state.
	r.chClosed <- &amqp.Error{Code: 320, Reason: "test"}
	require.Error(t, r.wait(t))
	assert.Empty(t, rep.entered, "no delivery is reported while pausing")
	assert.Empty(t, settled)
	assert.Empty(t, later)
	assert.Len(t, r.ch.deliveries, 1, "m-2 stays in the consumer's buffer")
	assert.Equal(t, pausing, r.l.mode)
	assert.Equal(t, 8*time.Second, r.l.probeDelay, "the next hold waits twice as long")
}

// TestLoopDueEntryWithEveryHandlerBusyDoesNotSpin guards the loop against spinning on a
// wake-up timer already past: an entry whose first delay is over while every handler is busy
// waits for a handler's result, and the wake-up fires once, not continuously.
//
// The order the test needs (both handlers busy before the waiting entry is due) is checked as
// an order, not a time: the busy reports are the first two the reporter sees, and the wake-up
// has not fired by then. hold (five times the 200 ms the order once had to come within, which
// a loaded machine under -race missed) leaves ample time for it; the test waits it out once.
func TestLoopDueEntryWithEveryHandlerBusyDoesNotSpin(t *testing.T) {
	const hold = time.Second
	rep := newGateReporter("busy-1", "busy-2")
	// The busy reports are held past hold: their timeout must outlast it.
	cfg := Config{Workers: 2, Prefetch: 16, ReportTimeout: time.Minute, Defer: func(r message.FailureReport) time.Duration {
		if r.Message.MessageID == "waits" {
			return hold
		}
		return 0
	}}
	r := startLoop(t, cfg, rep, newFakeChannel())
	waits, busy1, busy2 := make(settleSignal, 1), make(settleSignal, 1), make(settleSignal, 1)

	r.ch.deliveries <- delivery(t, "waits", waits)
	r.ch.deliveries <- delivery(t, "busy-1", busy1)
	r.ch.deliveries <- delivery(t, "busy-2", busy2)
	busy := []string{next(t, rep.entered, "a busy report"), next(t, rep.entered, "the other busy report")}
	require.ElementsMatch(t, []string{"busy-1", "busy-2"}, busy, "both handlers must be busy before the waiting entry is due")
	require.Zero(t, r.l.wakes.Load(), "the waiting entry came due before both handlers were busy: raise hold")

	// The wake-up fires at the entry's due time, with both handlers busy.
	require.Eventually(t, func() bool { return r.l.wakes.Load() >= 1 }, 5*time.Second, time.Millisecond)
	// Let a spinning loop spin: a past timer fires every few microseconds.
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int64(1), r.l.wakes.Load(), "the wake-up fired again while every handler was busy")
	assert.Empty(t, waits, "a due entry waits for a free handler")

	close(rep.release)
	assert.Equal(t, "waits", next(t, rep.entered, "the due entry's report"))
	for _, s := range []settleSignal{busy1, busy2, waits} {
		assert.Equal(t, "ack", next(t, s, "settlement"))
	}
	assert.Equal(t, int64(1), r.l.wakes.Load())
}

// fakeIntake admits as many deliveries as the test grants. Each refusal is announced on
// refused and asks the loop to look again in a millisecond.
type fakeIntake struct {
	refused chan struct{}
	gave    chan struct{}

	mu                   sync.Mutex
	tokens, taken, given int
	// keepGiven keeps a given admission from being taken again: another session spent it.
	keepGiven bool
}

func newFakeIntake() *fakeIntake {
	return &fakeIntake{refused: make(chan struct{}, 1), gave: make(chan struct{}, 16)}
}

func (f *fakeIntake) Ready() (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tokens > 0 {
		return true, 0
	}
	select {
	case f.refused <- struct{}{}:
	default:
	}
	return false, time.Millisecond
}

func (f *fakeIntake) Take() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens--
	f.taken++
}

func (f *fakeIntake) Give() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.keepGiven {
		f.tokens++
	}
	f.given++
	f.gave <- struct{}{}
}

// grant admits n more, and forgets the refusals before: the next one comes once they are
// taken.
func (f *fakeIntake) grant(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens += n
	select {
	case <-f.refused:
	default:
	}
}

func (f *fakeIntake) counts() (taken, given int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taken, f.given
}

// The intake admits none, then three of five deliveries: exactly three are taken, reported
// and acked; the other two stay in the consumer's buffer, unsettled, and are requeued at
// shutdown, never dropped.
func TestLoopTakesOnlyWhatTheIntakeAdmits(t *testing.T) {
	in := newFakeIntake()
	rep := newGateReporter()
	r := startLoop(t, Config{Intake: in}, rep, newFakeChannel())
	settled := make([]settleSignal, 5)
	for i := range settled {
		settled[i] = make(settleSignal, 1)
		r.ch.deliveries <- delivery(t, fmt.Sprintf("m-%d", i+1), settled[i])
	}

	next(t, in.refused, "a refusal")
	taken, _ := in.counts()
	assert.Zero(t, taken)
	assert.Len(t, r.ch.deliveries, 5, "nothing taken while the intake admits none")

	in.grant(3)

	// The next refusal comes once the three are spent: the loop asked again and stopped.
	next(t, in.refused, "the refusal after three admissions")
	taken, _ = in.counts()
	assert.Equal(t, 3, taken)
	assert.Len(t, r.ch.deliveries, 2, "two stay in the consumer's buffer")
	for i := range 3 {
		assert.Equal(t, "ack", next(t, settled[i], fmt.Sprintf("settlement of m-%d", i+1)))
	}
	assert.ElementsMatch(t, []string{"m-1", "m-2", "m-3"}, rep.reports())
	assert.Empty(t, settled[3])
	assert.Empty(t, settled[4])
	assert.Positive(t, r.l.admits.Load(), "the loop waited on its admit timer")
	assert.True(t, r.b.Ready(), "a limited intake is not an outage")

	r.cancel()
	assert.Equal(t, "requeue", next(t, settled[3], "settlement of m-4"))
	assert.Equal(t, "requeue", next(t, settled[4], "settlement of m-5"))
	require.NoError(t, r.wait(t))
	assert.Equal(t, 3.0, outcomes(r.m, OutcomeAccepted))
}

// A deferred delivery gives its admission back while it waits and takes one again when due:
// its report waits for the intake as a new delivery does.
func TestLoopAsksTheIntakeBeforeADeferredReport(t *testing.T) {
	in := newFakeIntake()
	in.keepGiven = true
	in.grant(1)
	rep := newGateReporter()
	cfg := Config{Intake: in, Workers: 2, Prefetch: 16, Defer: func(message.FailureReport) time.Duration { return time.Millisecond }}
	r := startLoop(t, cfg, rep, newFakeChannel())
	settled := make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-1", settled)

	next(t, in.gave, "the admission given back while m-1 waits")
	next(t, in.refused, "a refusal")
	taken, given := in.counts()
	assert.Equal(t, 1, taken)
	assert.Equal(t, 1, given)
	assert.Empty(t, rep.entered, "not reported without an admission")

	in.grant(1)

	assert.Equal(t, "m-1", next(t, rep.entered, "the deferred report"))
	assert.Equal(t, "ack", next(t, settled, "settlement"))
	taken, given = in.counts()
	assert.Equal(t, 2, taken, "taken when received and again when due")
	assert.Equal(t, 1, given)
}

// Deliveries held through an outage are reported again without asking the intake: outage
// handling is not admission.
func TestLoopReportsHeldDeliveriesWithoutTheIntake(t *testing.T) {
	in := newFakeIntake()
	in.grant(1)
	rep := newGateReporter()
	// The report and the first probe fail; the second probe goes through.
	rep.failFirst(2, temporalDown)
	r := startLoop(t, Config{Intake: in}, rep, newFakeChannel())
	settled := make(settleSignal, 1)
	r.ch.deliveries <- delivery(t, "m-1", settled)

	for _, what := range []string{"report", "first probe", "second probe"} {
		require.Equal(t, "m-1", next(t, rep.entered, what))
	}

	assert.Equal(t, "ack", next(t, settled, "settlement"))
	taken, _ := in.counts()
	assert.Equal(t, 1, taken, "one admission, when received")
}
