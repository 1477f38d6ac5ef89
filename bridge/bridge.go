// Package bridge consumes the ingress queue and hands each failed message to Temporal: it
// decodes a delivery into a message.FailureReport, has a Reporter report it (signal-with-start
// of the message's RetryWorkflow), and acks the delivery only once Temporal accepted it.
// Deliveries it can never decode are dead-lettered with a confirm, then acked.
//
// The broker keeps every delivery until it is acked, so each failure mode of the bridge ends in
// redelivery, never in loss: Temporal down → pause with the deliveries unacked and probe; connection
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
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Reporter hands a report to Temporal. A nil error means Temporal durably accepted it (so the
// delivery may be acked); any other error means it may not have, and the delivery is requeued,
// unless the error is Permanent.
type Reporter interface {
	Report(ctx context.Context, r message.FailureReport) error
}

// DeadLetterPublisher publishes with a publisher confirm: a nil error means the broker has the
// message. *broker.Publisher implements it.
type DeadLetterPublisher = deadletter.Publisher

// Bridge consumes the ingress queue. Create it with New and run it with Run.
type Bridge struct {
	cfg      Config
	dial     func() (*amqp.Connection, error)
	reporter Reporter
	dlq      DeadLetterPublisher
	log      *slog.Logger
	metrics  *Metrics

	ready   readyFlag
	running atomic.Bool

	// gen is the generation of the current channel. A delivery is acked or nacked only while
	// its channel's generation is current, under genMu held for reading; a lost channel bumps
	// gen under genMu held for writing, so no ack can slip past the loss. This is what keeps
	// an old delivery tag from acking a different message on a later channel.
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
	configured := cfg.Prefetch
	cfg = cfg.withDefaults()
	logger.Info("bridge prefetch", "prefetch", cfg.Prefetch, "configured_prefetch", configured,
		"memory_budget_bytes", cfg.MemoryBudget, "max_message_bytes", cfg.Decode.MaxMessageBytes)
	return &Bridge{
		cfg:      cfg,
		dial:     dial,
		reporter: reporter,
		dlq:      dlq,
		log:      logger,
		metrics:  metrics,
		ready:    readyFlag{gauge: metrics.consuming},
	}
}

// Ready reports whether the bridge is consuming right now: connected, and not pausing
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

// jitter spreads a backoff over [d/2, d], so that bridges that lost Temporal or the broker
// together do not come back in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
