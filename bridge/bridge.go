// Package bridge consumes the ingress queue and hands each failed message to Temporal: it
// decodes a delivery into a message.FailureReport, has a Reporter report it (signal-with-start
// of the message's RetryWorkflow), and acks the delivery only once Temporal accepted it.
// Deliveries it can never decode are dead-lettered with a confirm, then acked.
//
// The broker keeps every delivery until it is acked, so each failure mode of the bridge ends in
// redelivery, never in loss: Temporal down → hold the deliveries unacked and probe; connection
// lost → the broker requeues everything unacked; poison → dead-letter first, ack second.
//
// While Temporal is down the bridge neither acks nor requeues: a requeue spends one of a
// quorum queue's deliveries (x-delivery-limit; 20 by default on RabbitMQ 4), so an outage
// that requeued would, after a few minutes, have the broker dead-letter or drop every message
// in flight. The prefetch bounds what is held; the broker keeps the rest ready.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"retry-scheduler/message"
)

// Reporter hands a report to Temporal. A nil error means Temporal durably accepted it (so the
// delivery may be acked); any other error means it may not have, and the delivery is requeued,
// unless the error is Permanent.
type Reporter interface {
	Report(ctx context.Context, r message.FailureReport) error
}

// DeadLetterPublisher publishes with a publisher confirm: a nil error means the broker has the
// message. *broker.Publisher implements it.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error
}

// permanentError marks a Reporter error that no retry can mend.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a Reporter error as one that retrying cannot mend (Temporal rejected the
// report as invalid, say). The bridge dead-letters such a delivery as poison instead of
// requeueing it, which would block the queue behind it for ever.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// unavailableError marks a Reporter error that says Temporal as a whole cannot take work now.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable marks a Reporter error as Temporal's, not the message's (overloaded, rate
// limited): the bridge holds the delivery and probes, and does not count a try against the
// message, whatever the Probe says.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err was marked by Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// Defaults of Config.
const (
	DefaultQueue          = "retry.scheduled"
	DefaultPrefetch       = 64
	DefaultWorkers        = 16
	DefaultReportTimeout  = 10 * time.Second
	DefaultReconnectDelay = 500 * time.Millisecond
	// DefaultReportTries bounds the reports of one message that fail while Temporal answers
	// the Probe: then the failure is the message's, and it is dead-lettered as poison.
	DefaultReportTries = 5
	// MaxBackoff caps the doubling of ReconnectDelay.
	MaxBackoff = 10 * time.Second
	// probeTimeout bounds one call of Config.Probe.
	probeTimeout = 5 * time.Second
)

// consumerTag names the bridge's one consumer on its channel (a channel consumes once: the
// bridge holds deliveries rather than cancelling and consuming again).
const consumerTag = "retry-scheduler-bridge"

// rpcTimeout bounds each AMQP method the bridge waits on (declare, qos, consume, cancel,
// close); a broker that does not answer in that time is treated as a lost connection.
const rpcTimeout = 10 * time.Second

// Config configures a Bridge. The zero value of every field has a default.
type Config struct {
	// Queue is the ingress queue. Defaults to "retry.scheduled".
	Queue string
	// DeadLetterQueue receives poison and oversize deliveries. Defaults to "manual-review.pending".
	DeadLetterQueue string
	// Prefetch is the channel's QoS: unacked deliveries held at once. Defaults to 64.
	Prefetch int
	// Workers is how many deliveries are handled concurrently. Defaults to 16.
	Workers int
	// ReportTimeout bounds one Report and one dead-letter publish, and the wait for in-flight
	// handlers on shutdown. Defaults to 10s.
	ReportTimeout time.Duration
	// ReconnectDelay is the first backoff after a lost connection, after a failed report and
	// between the probes of an outage; it doubles up to MaxBackoff, with jitter so that
	// several bridges do not retry in lockstep. Defaults to 500ms.
	ReconnectDelay time.Duration
	// Probe reports whether Temporal serves calls (nil: yes). It tells an outage from a
	// message Temporal refuses: when a report fails and Probe fails too, the delivery is held
	// and the bridge probes; when Probe passes, the failure counts against the message, and
	// after ReportTries such failures the message is dead-lettered as poison so that it
	// cannot stall the queue. A nil Probe presumes every failure an outage.
	Probe func(ctx context.Context) error
	// ReportTries is how many failed reports, with Temporal answering the Probe, make a
	// message poison. Defaults to DefaultReportTries.
	ReportTries int
	// IngressArgs and DeadLetterArgs are the arguments the queues are declared with
	// (broker.IngressArgs and broker.QueueArgs); a queue that exists with others is used as
	// it is.
	IngressArgs, DeadLetterArgs amqp.Table
	// Decode configures decoding; its DefaultDeadLetterQueue defaults to DeadLetterQueue.
	Decode DecodeOptions
	// ServiceName and ServiceVersion name the scheduler in the envelopes the bridge writes
	// itself (poison, oversize): metadata.service, metadata.service_version and the AMQP
	// app_id. ServiceName defaults to "retry-scheduler"; ServiceVersion to none.
	ServiceName, ServiceVersion string
}

func (c Config) withDefaults() Config {
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if c.DeadLetterQueue == "" {
		c.DeadLetterQueue = DefaultDeadLetterQueue
	}
	if c.Prefetch <= 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.ReportTimeout <= 0 {
		c.ReportTimeout = DefaultReportTimeout
	}
	if c.ReconnectDelay <= 0 {
		c.ReconnectDelay = DefaultReconnectDelay
	}
	if c.ReportTries <= 0 {
		c.ReportTries = DefaultReportTries
	}
	if c.ServiceName == "" {
		c.ServiceName = serviceName
	}
	if c.Decode.DefaultDeadLetterQueue == "" {
		c.Decode.DefaultDeadLetterQueue = c.DeadLetterQueue
	}
	c.Decode = c.Decode.withDefaults()
	return c
}

// Bridge consumes the ingress queue. Create it with New and run it with Run.
type Bridge struct {
	cfg     Config
	dial    func() (*amqp.Connection, error)
	reporter Reporter
	dlq     DeadLetterPublisher
	log     *slog.Logger
	metrics *Metrics

	ready   atomic.Bool
	running atomic.Bool

	// gen is the generation of the current channel. A delivery is acked or nacked only while
	// its channel's generation is current, under genMu held for reading; a lost channel bumps
	// gen under genMu held for writing, so no ack can slip past the loss. This is what keeps
	// an old delivery tag from acking a different message on a later channel (SPEC §8).
	genMu sync.RWMutex
	gen   uint64

	// handlers counts handler goroutines of every session; Run waits for them.
	handlers sync.WaitGroup
}

// New returns a Bridge. dial opens a connection (broker.Dial, with its timeouts); it should
// not enable amqp091's automatic recovery, and if it does the bridge still treats the first
// close as the end of that connection. A nil logger logs nowhere; nil metrics are not registered.
func New(cfg Config, dial func() (*amqp.Connection, error), reporter Reporter, dlq DeadLetterPublisher, logger *slog.Logger, metrics *Metrics) *Bridge {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Bridge{
		cfg:     cfg.withDefaults(),
		dial:    dial,
		reporter: reporter,
		dlq:     dlq,
		log:     logger,
		metrics: metrics,
	}
}

// Ready reports whether the bridge is consuming right now: connected, and not holding
// deliveries because Temporal or the dead-letter queue is unavailable.
func (b *Bridge) Ready() bool {
	return b.ready.Load()
}

// Run consumes until ctx is done, reconnecting with backoff after a lost connection. On ctx
// done it stops consuming, lets in-flight handlers finish (bounded by ReportTimeout), closes
// the channel and returns nil. Every goroutine it starts has ended when it returns.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("bridge: Run is already running")
	}
	defer b.running.Store(false)
	defer b.handlers.Wait()

	delay := b.cfg.ReconnectDelay
	for {
		consumed, err := b.session(ctx)
		b.ready.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if consumed {
			delay = b.cfg.ReconnectDelay
		}
		wait := jitter(delay)
		b.log.Warn("amqp session ended; reconnecting", "error", err, "delay_ms", wait.Milliseconds())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, MaxBackoff)
	}
}

// session is one connection and channel: its generation, and the handlers' context, which
// outlives Run's ctx (so that in-flight reports finish on shutdown) but ends when the
// connection is lost (an ack is impossible then).
type session struct {
	b       *Bridge
	conn    *amqp.Connection
	ch      *amqp.Channel
	gen     uint64
	ctx     context.Context
	cancel  context.CancelFunc
	results chan result
	// bg counts goroutines running AMQP methods under rpc; they end once the connection is closed.
	bg sync.WaitGroup
}

// entry is a delivery in the bridge's hands, with the failed reports counted against it.
type entry struct {
	d amqp.Delivery
	// strikes counts reports that failed while Temporal answered the Probe.
	strikes int
	// deadLettered is set once its poison envelope is confirmed on the dead-letter queue, so
	// that a delivery held while its parked workflow could not be started is not published twice.
	deadLettered bool
}

// result is what a handler reports to its session's loop.
type result struct {
	outcome string
	err     error
	// held is the entry to hold, with outcome OutcomeHeld.
	held *entry
}

// session runs one connection until it is lost or ctx is done. consumed says whether it got
// as far as consuming, which resets the reconnect backoff.
func (b *Bridge) session(ctx context.Context) (consumed bool, err error) {
	conn, err := b.dial()
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	s := &session{b: b, conn: conn, results: make(chan result, b.cfg.Workers)}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		s.cancel()
		_ = conn.CloseDeadline(time.Now().Add(rpcTimeout))
		s.bg.Wait()
	}()
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))

	if err := s.setup(); err != nil {
		return false, err
	}
	chClosed := s.ch.NotifyClose(make(chan *amqp.Error, 1))

	b.genMu.Lock()
	b.gen++
	s.gen = b.gen
	b.genMu.Unlock()

	l := &loop{s: s, mode: running, holdDelay: b.cfg.ReconnectDelay, connClosed: connClosed, chClosed: chClosed}
	err = l.run(ctx)
	return l.consumed, err
}

// setup opens the channel, declares the queues and sets the prefetch.
func (s *session) setup() error {
	if err := s.rpc("open channel", func() (err error) {
		s.ch, err = s.conn.Channel()
		return err
	}); err != nil {
		return err
	}
	// The dead-letter queue first: the ingress queue may dead-letter into it.
	if err := s.declare(s.b.cfg.DeadLetterQueue, s.b.cfg.DeadLetterArgs); err != nil {
		return err
	}
	if err := s.declare(s.b.cfg.Queue, s.b.cfg.IngressArgs); err != nil {
		return err
	}
	return s.rpc("set prefetch", func() error { return s.ch.Qos(s.b.cfg.Prefetch, 0, false) })
}

// declare declares a durable queue. One that exists with other arguments (a quorum queue
// declared by the deployment, say) is accepted as it is: the bridge only needs it to exist.
func (s *session) declare(name string, args amqp.Table) error {
	err := s.rpc("declare queue "+name, func() error {
		_, err := s.ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	var ae *amqp.Error
	if err == nil || !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return err
	}
	// The refused declare closed the channel.
	if err := s.rpc("reopen channel", func() (err error) {
		s.ch, err = s.conn.Channel()
		return err
	}); err != nil {
		return err
	}
	return s.rpc("check queue "+name, func() error {
		_, err := s.ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
}

// rpc runs an AMQP method with rpcTimeout. amqp091's methods have no deadline of their own;
// on timeout the caller ends the session, and closing the connection releases the goroutine.
func (s *session) rpc(what string, f func() error) error {
	done := make(chan error, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		done <- f()
	}()
	t := time.NewTimer(rpcTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%s: no answer from the broker within %s", what, rpcTimeout)
	}
}

// retire makes the session's deliveries stale: from now on none of them is acked or nacked,
// and the handlers' reports are cancelled. The broker redelivers them.
func (s *session) retire() {
	s.b.genMu.Lock()
	if s.b.gen == s.gen {
		s.b.gen++
	}
	s.b.genMu.Unlock()
	s.cancel()
}

// settle acks or requeues d if its channel is still current; false means it was not settled
// (stale, or the channel refused) and the broker will redeliver it.
func (s *session) settle(d amqp.Delivery, ack bool) bool {
	s.b.genMu.RLock()
	defer s.b.genMu.RUnlock()
	if s.gen != s.b.gen {
		return false
	}
	var err error
	if ack {
		err = d.Ack(false)
	} else {
		err = d.Nack(false, true)
	}
	return err == nil
}

// requeue returns an unprocessed delivery to the queue (the bridge is stopping).
func (s *session) requeue(d amqp.Delivery) {
	if s.settle(d, false) {
		s.b.metrics.outcome(OutcomeRequeued)
	} else {
		s.b.metrics.outcome(OutcomeDroppedStale)
	}
}

// mode is the consuming state of a session.
type mode int

const (
	// running: up to Workers handlers, held entries first, then new deliveries.
	running mode = iota
	// holding: Temporal (or the dead-letter queue) is unavailable; nothing is dispatched,
	// nothing is acked or requeued; a timer starts the next probe. What the broker sends
	// meanwhile (at most the prefetch) waits unacked in the consumer's buffer.
	holding
	// probing: the oldest held entry alone is reported again; its success resumes running,
	// its failure holds again with a longer backoff.
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
	// held are entries waiting for Temporal, oldest first.
	held []*entry
	// holdDelay is the next wait before a probe; it doubles up to MaxBackoff.
	holdDelay            time.Duration
	probe                *time.Timer
	connClosed, chClosed <-chan *amqp.Error
}

func (l *loop) run(ctx context.Context) error {
	s, b := l.s, l.s.b
	defer func() {
		if l.probe != nil {
			l.probe.Stop()
		}
	}()
	if err := l.consume(); err != nil {
		s.retire()
		return err
	}
	for {
		l.dispatchHeld()
		var take <-chan amqp.Delivery
		if l.mode == running && len(l.held) == 0 && l.inflight < b.cfg.Workers {
			take = l.deliveries
		}
		var probe <-chan time.Time
		if l.probe != nil {
			probe = l.probe.C
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
			l.dispatch(&entry{d: d})
		case r := <-s.results:
			l.inflight--
			l.onResult(r)
		case <-probe:
			l.probe = nil
			l.mode = probing
			b.log.Info("probing: reporting the oldest held delivery again", "held", len(l.held))
		}
	}
}

// dispatchHeld hands held entries to handlers: all of them (as workers allow) while
// running, the oldest alone while probing.
func (l *loop) dispatchHeld() {
	switch l.mode {
	case running:
		for len(l.held) > 0 && l.inflight < l.s.b.cfg.Workers {
			e := l.held[0]
			l.held = l.held[1:]
			l.dispatch(e)
		}
	case probing:
		if len(l.held) == 0 {
			l.resume()
			return
		}
		if l.inflight == 0 {
			e := l.held[0]
			l.held = l.held[1:]
			l.dispatch(e)
		}
	}
}

func (l *loop) dispatch(e *entry) {
	l.inflight++
	l.s.b.handlers.Add(1)
	go l.s.handle(e)
}

// onResult holds an entry that could not be reported, and resumes running once a report
// (or a dead-letter publish) went through.
func (l *loop) onResult(r result) {
	b := l.s.b
	switch r.outcome {
	case OutcomeHeld:
		l.held = append(l.held, r.held)
		if l.mode == holding {
			return
		}
		if l.mode == running {
			b.log.Warn("holding deliveries: Temporal or the dead-letter queue is unavailable; nothing is acked or requeued until a probe succeeds",
				"error", r.err)
		}
		b.ready.Store(false)
		l.mode = holding
		wait := jitter(l.holdDelay)
		l.probe = time.NewTimer(wait)
		b.log.Info("next probe", "in_ms", wait.Milliseconds(), "held", len(l.held), "error", r.err)
		l.holdDelay = min(2*l.holdDelay, MaxBackoff)
	case OutcomeAccepted, OutcomePoison, OutcomeOversize:
		if l.mode == probing {
			l.resume()
		}
		if l.mode == running {
			l.holdDelay = b.cfg.ReconnectDelay
		}
	}
}

// resume goes back to running after a successful probe.
func (l *loop) resume() {
	b := l.s.b
	l.mode = running
	l.holdDelay = b.cfg.ReconnectDelay
	b.ready.Store(true)
	b.log.Info("resumed consumption", "held", len(l.held))
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
	for range l.held {
		l.s.b.metrics.outcome(OutcomeDroppedStale)
	}
	l.held = nil
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
			if r.held != nil {
				l.held = append(l.held, r.held)
			}
		case <-deadline.C:
			return l.lost(fmt.Errorf("shutdown: %d handlers still running after %s", l.inflight, b.cfg.ReportTimeout))
		case e := <-l.connClosed:
			return l.lost(fmt.Errorf("shutdown: connection closed: %v", e))
		case e := <-l.chClosed:
			return l.lost(fmt.Errorf("shutdown: channel closed: %v", e))
		}
	}
	for _, e := range l.held {
		s.requeue(e.d)
	}
	l.held = nil
	return s.rpc("close channel", s.ch.Close)
}

// handle processes one entry and reports the outcome to the loop. The results channel has
// room for every handler the loop allows in flight, so the send never blocks, even after the
// loop has returned.
func (s *session) handle(e *entry) {
	defer s.b.handlers.Done()
	s.results <- s.process(e)
}

func (s *session) process(e *entry) result {
	b, d := s.b, e.d
	rep, err := Decode(DeliveryFrom(d), b.cfg.Decode)
	if err != nil {
		var pe *PoisonError
		if !errors.As(err, &pe) {
			pe = &PoisonError{Kind: KindPoison, Reason: err.Error(), MessageID: d.MessageId}
		}
		return s.deadLetter(e, pe)
	}
	log := withCorrelationID(b.log.With("message_id", rep.Message.MessageID, "original_queue", rep.Message.OriginalQueue,
		"retry_count", rep.RetryCount), rep.Message.CorrelationID)

	for {
		ctx, cancel := context.WithTimeout(s.ctx, b.cfg.ReportTimeout)
		err = b.reporter.Report(ctx, rep)
		cancel()
		if err == nil {
			break
		}
		switch s.judge(err) {
		case failPermanent:
			return s.deadLetter(e, &PoisonError{
				Kind:          KindPoison,
				Reason:        "report rejected: " + err.Error(),
				OriginalQueue: rep.Message.OriginalQueue,
				MessageID:     rep.Message.MessageID,
			})
		case failStale:
			return s.stale(d, err)
		case failOutage:
			log.Warn("report failed; holding the delivery unacked until Temporal answers", "outcome", OutcomeHeld, "error", err)
			return s.hold(e, fmt.Errorf("report: %w", err))
		}
		e.strikes++
		if e.strikes >= b.cfg.ReportTries {
			return s.deadLetter(e, &PoisonError{
				Kind:          KindPoison,
				Reason:        fmt.Sprintf("report failed %d times while Temporal answered other calls: %v", e.strikes, err),
				OriginalQueue: rep.Message.OriginalQueue,
				MessageID:     rep.Message.MessageID,
			})
		}
		wait := jitter(b.cfg.ReconnectDelay << (e.strikes - 1))
		log.Warn("report failed while Temporal answers; trying this message again", "try", e.strikes, "of", b.cfg.ReportTries, "in_ms", wait.Milliseconds(), "error", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return s.stale(d, err)
		}
	}
	r := s.conclude(d, true, OutcomeAccepted, nil)
	if r.outcome == OutcomeAccepted {
		b.metrics.scheduled.WithLabelValues(rep.Message.OriginalQueue).Inc()
		log.Info("failure report accepted", "outcome", r.outcome, "source", rep.Source)
	} else {
		log.Warn("failure report accepted but delivery not acked: channel gone; the broker will redeliver it", "outcome", r.outcome)
	}
	return r
}

// reportFailure is what a failed report means; judge tells.
type reportFailure int

const (
	// failPermanent: no retry mends it (Permanent).
	failPermanent reportFailure = iota
	// failStale: the session is retired; the delivery can be neither acked nor held.
	failStale
	// failOutage: Temporal as a whole is unavailable; hold the delivery.
	failOutage
	// failMessage: Temporal answers; the failure is the message's own.
	failMessage
)

// judge classifies a failed report, for the report of a delivery and the start of a parked
// workflow alike.
func (s *session) judge(err error) reportFailure {
	switch {
	case IsPermanent(err):
		return failPermanent
	case s.ctx.Err() != nil:
		return failStale
	case !s.messageFault(err):
		return failOutage
	}
	return failMessage
}

// messageFault reports whether a failed report is the message's own: Temporal answers the
// Probe, and the error does not say Temporal is unavailable.
func (s *session) messageFault(err error) bool {
	if IsUnavailable(err) || s.b.cfg.Probe == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
	defer cancel()
	return s.b.cfg.Probe(ctx) == nil
}

// stale ends a delivery of a retired session (its connection is gone): it can be neither
// acked nor held, and the broker redelivers it.
func (s *session) stale(d amqp.Delivery, err error) result {
	return s.conclude(d, false, OutcomeDroppedStale, fmt.Errorf("report: %w", err))
}

// hold hands e back to the loop unsettled: no ack, no requeue, so no delivery is spent.
func (s *session) hold(e *entry, err error) result {
	s.b.metrics.outcome(OutcomeHeld)
	return result{outcome: OutcomeHeld, err: err, held: e}
}

// deadLetter publishes the poison envelope with a confirm, then parks the delivery as a dead
// RetryWorkflow (park.go), then acks. If the publish fails, or Temporal is unavailable for
// the parked workflow, the delivery is held (and the bridge probes), so a poison message is
// never dropped; a parked workflow Temporal refuses for good leaves the envelope alone.
func (s *session) deadLetter(e *entry, pe *PoisonError) result {
	b, d := s.b, e.d
	env := poisonEnvelope(d, pe, b.cfg.Decode, b.cfg.Decode.Now())
	env.Metadata.Service, env.Metadata.ServiceVersion = b.cfg.ServiceName, b.cfg.ServiceVersion
	env.WorkflowID = parkedWorkflowID(env, pe, b.cfg.Queue)
	log := withCorrelationID(b.log.With("message_id", env.MessageID, "original_queue", env.OriginalQueue, "reason", pe.Reason,
		"workflow_id", env.WorkflowID), env.CorrelationID)
	if !e.deadLettered {
		pub, err := envelopePublishing(env)
		if err == nil {
			pub.AppId = b.cfg.ServiceName
			ctx, cancel := context.WithTimeout(s.ctx, b.cfg.ReportTimeout)
			err = b.dlq.Publish(ctx, "", b.cfg.DeadLetterQueue, true, pub)
			cancel()
		}
		if err != nil {
			b.metrics.deadLetterPublishFailed(b.cfg.DeadLetterQueue)
			log.Error("dead-letter publish failed; holding the delivery", "outcome", OutcomeHeld, "error", err)
			return s.hold(e, fmt.Errorf("dead-letter %s message to %s: %w", pe.Kind, b.cfg.DeadLetterQueue, err))
		}
		e.deadLettered = true
	}
	rep := parkReport(env, pe, b.cfg.Queue, b.cfg.DeadLetterQueue, b.cfg.Decode)
	if held, err := s.park(e, rep, log); held {
		log.Warn("parked workflow not started; holding the dead-lettered delivery unacked until Temporal answers", "outcome", OutcomeHeld, "error", err)
		return s.hold(e, fmt.Errorf("park %s message: %w", pe.Kind, err))
	} else if err != nil && s.ctx.Err() != nil {
		return s.stale(d, err)
	}
	r := s.conclude(d, true, pe.Kind, nil)
	log.Warn("delivery dead-lettered", "outcome", r.outcome, "dead_letter_queue", b.cfg.DeadLetterQueue)
	return r
}

// withCorrelationID adds the message's correlation id to l's lines when it has one.
func withCorrelationID(l *slog.Logger, id string) *slog.Logger {
	if id == "" {
		return l
	}
	return l.With("correlation_id", id)
}

// conclude settles d and counts the outcome; a delivery that could not be settled is
// dropped_stale whatever was intended.
func (s *session) conclude(d amqp.Delivery, ack bool, outcome string, err error) result {
	if !s.settle(d, ack) {
		outcome = OutcomeDroppedStale
	}
	s.b.metrics.outcome(outcome)
	return result{outcome: outcome, err: err}
}

// jitter spreads a backoff over [d/2, d], so that bridges that lost Temporal or the broker
// together do not come back in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
