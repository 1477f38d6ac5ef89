// Package bridge consumes the ingress queue and hands each failed message to Temporal: it
// decodes a delivery into a message.FailureReport, has a Starter report it (signal-with-start
// of the message's RetryWorkflow), and acks the delivery only once Temporal accepted it.
// Deliveries it can never decode are dead-lettered with a confirm, then acked.
//
// The broker keeps every delivery until it is acked, so each failure mode of the bridge ends in
// redelivery, never in loss: Temporal down → nack with requeue and pause; connection lost → the
// broker requeues everything unacked; poison → dead-letter first, ack second.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"retry-scheduler/message"
)

// Starter hands a report to Temporal. A nil error means Temporal durably accepted it (so the
// delivery may be acked); any other error means it may not have, and the delivery is requeued,
// unless the error is Permanent.
type Starter interface {
	Report(ctx context.Context, r message.FailureReport) error
}

// DeadLetterPublisher publishes with a publisher confirm: a nil error means the broker has the
// message. *broker.Publisher implements it.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error
}

// permanentError marks a Starter error that no retry can mend.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a Starter error as one that retrying cannot mend (Temporal rejected the
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

// Defaults of Config.
const (
	DefaultQueue          = "retry.scheduled"
	DefaultPrefetch       = 64
	DefaultWorkers        = 16
	DefaultReportTimeout  = 10 * time.Second
	DefaultReconnectDelay = 500 * time.Millisecond
	// MaxBackoff caps the doubling of ReconnectDelay.
	MaxBackoff = 10 * time.Second
)

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
	// ReconnectDelay is the first backoff after a lost connection, and the first pause after a
	// failed Report; it doubles up to MaxBackoff. Defaults to 500ms.
	ReconnectDelay time.Duration
	// Decode configures decoding; its DefaultDeadLetterQueue defaults to DeadLetterQueue.
	Decode DecodeOptions
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
	starter Starter
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
func New(cfg Config, dial func() (*amqp.Connection, error), starter Starter, dlq DeadLetterPublisher, logger *slog.Logger, metrics *Metrics) *Bridge {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Bridge{
		cfg:     cfg.withDefaults(),
		dial:    dial,
		starter: starter,
		dlq:     dlq,
		log:     logger,
		metrics: metrics,
	}
}

// Ready reports whether the bridge is consuming right now: connected, and not paused
// because Temporal or the dead-letter queue is unavailable.
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
		b.log.Warn("amqp session ended; reconnecting", "error", err, "delay", delay)
		t := time.NewTimer(delay)
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

// result is what a handler reports to its session's loop.
type result struct {
	outcome string
	err     error
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

	l := &loop{s: s, mode: running, pauseDelay: b.cfg.ReconnectDelay, connClosed: connClosed, chClosed: chClosed}
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
	for _, q := range []string{s.b.cfg.Queue, s.b.cfg.DeadLetterQueue} {
		if err := s.declare(q); err != nil {
			return err
		}
	}
	return s.rpc("set prefetch", func() error { return s.ch.Qos(s.b.cfg.Prefetch, 0, false) })
}

// declare declares a durable queue. One that exists with other arguments (a quorum queue
// declared by the deployment, say) is accepted as it is: the bridge only needs it to exist.
func (s *session) declare(name string) error {
	err := s.rpc("declare queue "+name, func() error {
		_, err := s.ch.QueueDeclare(name, true, false, false, false, nil)
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

// requeue returns an unprocessed delivery to the queue (the bridge is pausing or stopping).
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
	// running: consuming with up to Workers handlers.
	running mode = iota
	// probing: consuming one delivery at a time after a pause, until a report succeeds, so
	// that a still-unavailable Temporal costs one requeue rather than a prefetch-full.
	probing
	// paused: consumer cancelled; what it still delivers is requeued; a timer resumes.
	paused
)

// loop is the dispatcher of a session: the only goroutine that consumes, cancels and
// counts in-flight handlers.
type loop struct {
	s                    *session
	mode                 mode
	deliveries           <-chan amqp.Delivery
	tag                  string
	tags                 int
	inflight             int
	consumed             bool
	pauseDelay           time.Duration
	resume               *time.Timer
	resumeWhenDrained    bool
	connClosed, chClosed <-chan *amqp.Error
}

func (l *loop) run(ctx context.Context) error {
	s, b := l.s, l.s.b
	defer func() {
		if l.resume != nil {
			l.resume.Stop()
		}
	}()
	if err := l.consume(); err != nil {
		s.retire()
		return err
	}
	for {
		var take <-chan amqp.Delivery
		switch {
		case l.mode == paused:
			take = l.deliveries
		case l.mode == probing && l.inflight == 0:
			take = l.deliveries
		case l.mode == running && l.inflight < b.cfg.Workers:
			take = l.deliveries
		}
		var resume <-chan time.Time
		if l.resume != nil {
			resume = l.resume.C
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
				if l.mode != paused {
					return l.lost(errors.New("consumer cancelled by the broker"))
				}
				if l.resumeWhenDrained {
					if err := l.resumeConsuming(); err != nil {
						return l.lost(err)
					}
				}
				continue
			}
			if l.mode == paused {
				s.requeue(d)
				continue
			}
			l.inflight++
			b.handlers.Add(1)
			go s.handle(d)
		case r := <-s.results:
			l.inflight--
			if err := l.onResult(r); err != nil {
				return l.lost(err)
			}
		case <-resume:
			l.resume = nil
			if l.deliveries != nil {
				// The cancelled consumer is still handing over what it held; resume after.
				l.resumeWhenDrained = true
				continue
			}
			if err := l.resumeConsuming(); err != nil {
				return l.lost(err)
			}
		}
	}
}

// onResult pauses consuming on a requeue (Temporal or the dead-letter queue unavailable) and
// ends probing on a success.
func (l *loop) onResult(r result) error {
	b := l.s.b
	switch r.outcome {
	case OutcomeRequeued:
		if l.mode == paused {
			return nil
		}
		b.ready.Store(false)
		if err := l.s.rpc("cancel consumer", func() error { return l.s.ch.Cancel(l.tag, false) }); err != nil {
			return err
		}
		l.mode = paused
		l.resume = time.NewTimer(l.pauseDelay)
		b.log.Warn("pausing consumption", "pause", l.pauseDelay, "error", r.err)
		l.pauseDelay = min(2*l.pauseDelay, MaxBackoff)
	case OutcomeAccepted, OutcomePoison, OutcomeOversize:
		if l.mode == probing {
			l.mode = running
			b.log.Info("resumed consumption")
		}
		if l.mode == running {
			l.pauseDelay = b.cfg.ReconnectDelay
		}
	}
	return nil
}

func (l *loop) consume() error {
	l.tags++
	l.tag = fmt.Sprintf("retry-scheduler-bridge-%d", l.tags)
	var d <-chan amqp.Delivery
	if err := l.s.rpc("consume "+l.s.b.cfg.Queue, func() (err error) {
		d, err = l.s.ch.Consume(l.s.b.cfg.Queue, l.tag, false, false, false, false, nil)
		return err
	}); err != nil {
		return err
	}
	l.deliveries = d
	l.consumed = true
	l.s.b.ready.Store(true)
	return nil
}

func (l *loop) resumeConsuming() error {
	l.resumeWhenDrained = false
	if err := l.consume(); err != nil {
		return err
	}
	l.mode = probing
	l.s.b.log.Info("probing: consuming one delivery at a time until a report succeeds")
	return nil
}

// lost ends a session whose connection or channel is gone.
func (l *loop) lost(err error) error {
	l.s.b.ready.Store(false)
	l.s.retire()
	return err
}

// shutdown stops consuming, requeues what the consumer still holds, waits for in-flight
// handlers (bounded by ReportTimeout plus a margin), then closes the channel.
func (l *loop) shutdown() error {
	s, b := l.s, l.s.b
	b.ready.Store(false)
	if l.deliveries != nil && l.mode != paused {
		if err := s.rpc("cancel consumer", func() error { return s.ch.Cancel(l.tag, false) }); err != nil {
			s.retire()
			return err
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
		case <-s.results:
			l.inflight--
		case <-deadline.C:
			s.retire()
			return fmt.Errorf("shutdown: %d handlers still running after %s", l.inflight, b.cfg.ReportTimeout)
		case e := <-l.connClosed:
			s.retire()
			return fmt.Errorf("shutdown: connection closed: %v", e)
		case e := <-l.chClosed:
			s.retire()
			return fmt.Errorf("shutdown: channel closed: %v", e)
		}
	}
	return s.rpc("close channel", s.ch.Close)
}

// handle processes one delivery and reports the outcome to the loop. The results channel
// has room for every handler the loop allows in flight, so the send never blocks, even after
// the loop has returned.
func (s *session) handle(d amqp.Delivery) {
	defer s.b.handlers.Done()
	s.results <- s.process(d)
}

func (s *session) process(d amqp.Delivery) result {
	b := s.b
	rep, err := Decode(DeliveryFrom(d), b.cfg.Decode)
	if err != nil {
		var pe *PoisonError
		if !errors.As(err, &pe) {
			pe = &PoisonError{Kind: KindPoison, Reason: err.Error(), MessageID: d.MessageId}
		}
		return s.deadLetter(d, pe)
	}
	log := b.log.With("message_id", rep.Message.MessageID, "original_queue", rep.Message.OriginalQueue,
		"retry_count", rep.RetryCount)

	ctx, cancel := context.WithTimeout(s.ctx, b.cfg.ReportTimeout)
	err = b.starter.Report(ctx, rep)
	cancel()
	if err != nil && IsPermanent(err) {
		return s.deadLetter(d, &PoisonError{
			Kind:          KindPoison,
			Reason:        "report rejected: " + err.Error(),
			OriginalQueue: rep.Message.OriginalQueue,
			MessageID:     rep.Message.MessageID,
		})
	}
	if err != nil {
		r := s.conclude(d, false, OutcomeRequeued, fmt.Errorf("report: %w", err))
		log.Warn("report failed; the broker will deliver the message again", "outcome", r.outcome, "error", err)
		return r
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

// deadLetter publishes the poison envelope with a confirm, then acks; if the publish fails
// the delivery is requeued (and the loop pauses), so a poison message is never dropped.
func (s *session) deadLetter(d amqp.Delivery, pe *PoisonError) result {
	b := s.b
	env := poisonEnvelope(d, pe, b.cfg.Decode, b.cfg.Decode.Now())
	log := b.log.With("message_id", env.MessageID, "original_queue", env.OriginalQueue, "reason", pe.Reason)
	pub, err := envelopePublishing(env)
	if err == nil {
		ctx, cancel := context.WithTimeout(s.ctx, b.cfg.ReportTimeout)
		err = b.dlq.Publish(ctx, "", b.cfg.DeadLetterQueue, true, pub)
		cancel()
	}
	if err != nil {
		r := s.conclude(d, false, OutcomeRequeued, fmt.Errorf("dead-letter %s message to %s: %w", pe.Kind, b.cfg.DeadLetterQueue, err))
		log.Error("dead-letter publish failed; the broker will deliver the message again", "outcome", r.outcome, "error", err)
		return r
	}
	r := s.conclude(d, true, pe.Kind, nil)
	log.Warn("undecodable delivery dead-lettered", "outcome", r.outcome, "dead_letter_queue", b.cfg.DeadLetterQueue)
	return r
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
