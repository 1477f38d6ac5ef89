package bridge

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// entry is a delivery in the bridge's hands, with the failed reports counted against it.
type entry struct {
	d amqp.Delivery
	// strikes counts reports that failed while Temporal answered the Probe.
	strikes int
	// deadLettered is set once its poison envelope is confirmed on the dead-letter queue (or
	// refused for good, envelopeErr), so that a delivery held while its parked workflow could
	// not be started is not published twice.
	deadLettered bool
	// payloadRef is where its payload went when the envelope could not carry it.
	payloadRef *message.PayloadRef
	// envelopeErr is why the broker refused its envelope for good; the parked workflow then
	// is the delivery's record.
	envelopeErr string
	// rep is the decoded report of a delivery that waits out its first delay (Config.Defer),
	// reported at due; nil until then.
	rep *message.FailureReport
	due time.Time
	// mayWait is set when the loop has room for one more waiting delivery.
	mayWait bool
	// admitted is set while the entry holds an admission of Config.Intake: from its take
	// until it waits out its first delay (given back then, taken again when due).
	admitted bool
	// spanCtx and span are the delivery's span while it waits (see session.process).
	spanCtx context.Context
	span    trace.Span
}

// dropWaiting ends the span of a waiting entry the session gives back to the broker.
func (e *entry) dropWaiting(why string) {
	if e.span != nil {
		e.span.SetStatus(codes.Error, why)
		e.span.End()
	}
}

// result is what a handler reports to its session's loop.
type result struct {
	outcome string
	err     error
	// paused is the entry to keep unsettled while the loop pauses, with outcome OutcomePaused.
	paused *entry
	// wait is the entry to report at its due time, with outcome outcomeWaiting.
	wait *entry
}

// outcomeWaiting is a handler's result for a delivery that waits out its first delay: not an
// outcome of the delivery (nothing is acked), so it is never counted.
const outcomeWaiting = "waiting"

// mode is the consuming state of a session.
type mode int

const (
	// running: up to Workers handlers, paused entries first, then new deliveries.
	running mode = iota
	// pausing: Temporal (or the dead-letter queue) is unavailable; nothing is dispatched,
	// nothing is acked or requeued; a timer starts the next probe. What the broker sends
	// meanwhile (at most the prefetch) waits unacked in the consumer's buffer.
	pausing
	// probing: the oldest paused entry alone is reported again; its success resumes
	// running, its failure pauses again with a longer backoff.
	probing
)

// loop is the dispatcher of a session: the only goroutine that consumes, dispatches and
// counts in-flight handlers.
type loop struct {
	s          *session
	mode       mode
	deliveries <-chan amqp.Delivery
	inflight   int
	consumed   bool
	// paused are entries waiting for Temporal, oldest first.
	paused []*entry
	// waiting are entries waiting out their first delay, soonest due first; wake fires at the
	// first one's due time.
	waiting waitQueue
	wake    *time.Timer
	// wakes counts the wake-up's firings. A due entry that finds every handler busy must not
	// set another: a timer already past fires at once, and the loop would spin on it.
	wakes atomic.Int64
	// admit fires when Config.Intake, which refused, may admit again; admits counts its
	// firings. While it is set the loop neither takes nor spins: it waits for it, a result,
	// a due entry or the end.
	admit  *time.Timer
	admits atomic.Int64
	// probeDelay is the next wait before a probe; it doubles up to MaxBackoff.
	probeDelay           time.Duration
	probe                *time.Timer
	connClosed, chClosed <-chan *amqp.Error
}

func (l *loop) run(ctx context.Context) error {
	s, b := l.s, l.s.b
	defer func() {
		if l.probe != nil {
			l.probe.Stop()
		}
		if l.wake != nil {
			l.wake.Stop()
		}
		if l.admit != nil {
			l.admit.Stop()
		}
	}()
	if err := l.consume(); err != nil {
		s.retire()
		return err
	}
	for {
		l.dispatchPaused()
		l.dispatchDue()
		var take <-chan amqp.Delivery
		if l.mode == running && len(l.paused) == 0 && l.inflight < b.cfg.Workers && l.admissible() {
			take = l.deliveries
		}
		var probe, wake, admit <-chan time.Time
		if l.probe != nil {
			probe = l.probe.C
		}
		if l.wake != nil {
			wake = l.wake.C
		}
		if l.admit != nil {
			admit = l.admit.C
		}
		select {
		case <-ctx.Done():
			return l.shutdown()
		case e := <-l.connClosed:
			return l.lost(fmt.Errorf("connection closed: %v", e))
		case e := <-l.chClosed:
			return l.lost(fmt.Errorf("channel closed: %v", e))
		case d, ok := <-take:
			if !ok {
				l.deliveries = nil
				return l.lost(errors.New("consumer cancelled by the broker"))
			}
			e := &entry{d: d}
			l.takeAdmission(e)
			l.dispatch(e)
		case <-wake:
			l.wake = nil
			l.wakes.Add(1)
		case <-admit:
			l.admit = nil
			l.admits.Add(1)
		case r := <-s.results:
			l.inflight--
			l.onResult(r)
		case <-probe:
			l.probe = nil
			l.mode = probing
			b.log.Info("probing: reporting the oldest held delivery again", "held", len(l.paused))
		}
	}
}

// dispatchPaused hands held entries to handlers: all of them (as workers allow) while
// running, the oldest alone while probing.
func (l *loop) dispatchPaused() {
	switch l.mode {
	case running:
		for len(l.paused) > 0 && l.inflight < l.s.b.cfg.Workers {
			e := l.paused[0]
			l.paused = l.paused[1:]
			l.dispatch(e)
		}
	case probing:
		if len(l.paused) == 0 {
			l.resume()
			return
		}
		if l.inflight == 0 {
			e := l.paused[0]
			l.paused = l.paused[1:]
			l.dispatch(e)
		}
	}
}

// dispatchDue hands the waiting entries whose first delay is over to handlers, as workers
// and the intake allow, while running, and sets the wake-up for the next one.
func (l *loop) dispatchDue() {
	if l.mode != running {
		return
	}
	now := time.Now()
	for l.waiting.Len() > 0 && l.inflight < l.s.b.cfg.Workers && !l.waiting.next().due.After(now) && l.admissible() {
		e := l.waiting.pop()
		l.takeAdmission(e)
		l.dispatch(e)
	}
	// A due entry that found every handler busy waits for a handler's result, which wakes
	// the loop anyway: a timer already past would only spin it.
	if l.wake == nil && l.waiting.Len() > 0 && l.waiting.next().due.After(now) {
		l.wake = time.NewTimer(l.waiting.next().due.Sub(now))
	}
}

// admissible reports whether Config.Intake admits one more delivery now. When it does not,
// the admit timer is set for when it will, so that the loop waits rather than spins; what is
// not admitted stays where it is (the broker's, the consumer's buffer, the waiting queue).
func (l *loop) admissible() bool {
	in := l.s.b.cfg.Intake
	if in == nil {
		return true
	}
	ok, wait := in.Ready()
	if !ok && l.admit == nil {
		// At least a millisecond: a timer already past would spin the loop.
		l.admit = time.NewTimer(max(wait, time.Millisecond))
	}
	return ok
}

// takeAdmission spends an admission of Config.Intake for e, after admissible said yes.
func (l *loop) takeAdmission(e *entry) {
	if in := l.s.b.cfg.Intake; in != nil {
		in.Take()
		e.admitted = true
	}
}

func (l *loop) dispatch(e *entry) {
	cfg := l.s.b.cfg
	e.mayWait = cfg.Defer != nil && l.waiting.Len()+l.inflight < cfg.Prefetch-cfg.Workers
	l.inflight++
	l.s.b.handlers.Add(1)
	go l.s.handle(e)
}

// onResult holds an entry that could not be reported, and resumes running once a report
// (or a dead-letter publish) went through.
func (l *loop) onResult(r result) {
	b := l.s.b
	switch r.outcome {
	case outcomeWaiting:
		if r.wait.admitted {
			// No report yet: the admission is taken again when the entry is due.
			b.cfg.Intake.Give()
			r.wait.admitted = false
		}
		l.waiting.push(r.wait)
		if l.wake != nil && l.waiting.next() == r.wait {
			// The new entry is due first: dispatchDue sets the wake-up for it.
			l.wake.Stop()
			l.wake = nil
		}
	case OutcomePaused:
		l.paused = append(l.paused, r.paused)
		if l.mode == pausing {
			return
		}
		if l.mode == running {
			b.log.Warn("pausing deliveries: Temporal or the dead-letter queue is unavailable; nothing is acked or requeued until a probe succeeds",
				"error", r.err)
		}
		b.ready.Store(false)
		l.mode = pausing
		wait := jitter(l.probeDelay)
		l.probe = time.NewTimer(wait)
		b.log.Info("next probe", "in_ms", wait.Milliseconds(), "held", len(l.paused), "error", r.err)
		l.probeDelay = min(2*l.probeDelay, MaxBackoff)
	case OutcomeAccepted, OutcomePoison, OutcomeOversize:
		if l.mode == probing {
			l.resume()
		}
		if l.mode == running {
			l.probeDelay = b.cfg.ReconnectDelay
		}
	}
}

// resume goes back to running after a successful probe.
func (l *loop) resume() {
	b := l.s.b
	l.mode = running
	l.probeDelay = b.cfg.ReconnectDelay
	b.ready.Store(true)
	b.log.Info("resumed consumption", "held", len(l.paused))
}

func (l *loop) consume() error {
	var d <-chan amqp.Delivery
	if err := l.s.rpc("consume "+l.s.b.cfg.Queue, func() (err error) {
		d, err = l.s.ch.Consume(l.s.b.cfg.Queue, consumerTag, false, false, false, false, nil)
		return err
	}); err != nil {
		return err
	}
	l.deliveries = d
	l.consumed = true
	l.s.b.ready.Store(true)
	return nil
}

// lost ends a session whose connection or channel is gone. Its held entries are stale: the
// broker requeues them with everything else this channel had.
func (l *loop) lost(err error) error {
	l.s.b.ready.Store(false)
	l.s.retire()
	for range l.paused {
		l.s.b.metrics.outcome(OutcomeDroppedStale)
	}
	for _, e := range l.waiting {
		l.s.b.metrics.outcome(OutcomeDroppedStale)
		e.dropWaiting(OutcomeDroppedStale)
	}
	l.paused, l.waiting = nil, nil
	return err
}

// shutdown stops consuming, requeues what the consumer still holds and what is held, waits
// for in-flight handlers (bounded by ReportTimeout plus a margin), then closes the channel.
func (l *loop) shutdown() error {
	s, b := l.s, l.s.b
	b.ready.Store(false)
	if l.deliveries != nil {
		if err := s.rpc("cancel consumer", func() error { return s.ch.Cancel(consumerTag, false) }); err != nil {
			return l.lost(err)
		}
	}
	deadline := time.NewTimer(b.cfg.ReportTimeout + time.Second)
	defer deadline.Stop()
	for l.deliveries != nil || l.inflight > 0 {
		select {
		case d, ok := <-l.deliveries:
			if !ok {
				l.deliveries = nil
				continue
			}
			s.requeue(d)
		case r := <-s.results:
			l.inflight--
			if r.paused != nil {
				l.paused = append(l.paused, r.paused)
			}
			if r.wait != nil {
				l.waiting.push(r.wait)
			}
		case <-deadline.C:
			return l.lost(fmt.Errorf("shutdown: %d handlers still running after %s", l.inflight, b.cfg.ReportTimeout))
		case e := <-l.connClosed:
			return l.lost(fmt.Errorf("shutdown: connection closed: %v", e))
		case e := <-l.chClosed:
			return l.lost(fmt.Errorf("shutdown: channel closed: %v", e))
		}
	}
	for _, e := range l.paused {
		s.requeue(e.d)
	}
	for _, e := range l.waiting {
		s.requeue(e.d)
		e.dropWaiting("requeued at shutdown")
	}
	l.paused, l.waiting = nil, nil
	return s.rpc("close channel", s.ch.Close)
}

// waitQueue is the entries waiting out their first delay, a min-heap by due time.
type waitQueue []*entry

func (q waitQueue) Len() int           { return len(q) }
func (q waitQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q waitQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *waitQueue) Push(x any)        { *q = append(*q, x.(*entry)) }
func (q *waitQueue) push(e *entry)     { heap.Push(q, e) }
func (q *waitQueue) pop() *entry       { return heap.Pop(q).(*entry) }
func (q waitQueue) next() *entry       { return q[0] }
func (q *waitQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
