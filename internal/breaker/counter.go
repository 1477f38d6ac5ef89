package breaker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// CounterConfig configures a Counter.
type CounterConfig struct {
	// Client starts or signals the breakers. Required.
	Client Signaller
	// TaskQueue is where a breaker this process starts runs: the service's. Required.
	TaskQueue string
	// Interval is the time between two flushes. Defaults to DefaultFlush.
	Interval time.Duration
	// Timeout bounds one flush (all its signals). Defaults to DefaultFlushTimeout.
	Timeout time.Duration
	// Logger logs failed reports. Nil discards them.
	Logger *slog.Logger
}

// DefaultFlushTimeout bounds one flush: a Temporal that does not answer delays the next
// flush, never the counting.
const DefaultFlushTimeout = 5 * time.Second

// flushConcurrency bounds the signals one flush has in flight: one per destination.
const flushConcurrency = 8

// Counter aggregates the outcomes breakers judge by, per destination, and reports them in
// one signal per destination and flush (SignalWithStart of SignalBreakerOutcomes, which
// starts a destination's breaker on its first report). Counting takes a lock and a map
// update, so it costs a retry nothing measurable. Counts a failed report could not deliver
// are kept for the next flush. Safe for concurrent use.
type Counter struct {
	cfg CounterConfig
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]pending
}

// pending is one destination's counts since its last report, with the latest settings.
type pending struct {
	republished, failed int
	settings            policy.Breaker
}

// NewCounter returns a Counter; Run it to flush.
func NewCounter(cfg CounterConfig) *Counter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultFlush
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultFlushTimeout
	}
	return &Counter{cfg: cfg, log: orDiscard(cfg.Logger), pending: map[string]pending{}}
}

// Republished counts a confirmed republish to queue (activities.BreakerCounter).
func (c *Counter) Republished(queue string, settings policy.Breaker) { c.add(queue, settings, 1, 0) }

// Failed counts a failure report of a retry that was republished to queue (the bridge).
func (c *Counter) Failed(queue string, settings policy.Breaker) { c.add(queue, settings, 0, 1) }

func (c *Counter) add(queue string, settings policy.Breaker, republished, failed int) {
	if settings.Disabled {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[queue]
	p.republished += republished
	p.failed += failed
	p.settings = settings
	c.pending[queue] = p
}

// Run flushes every Interval until ctx is done, then once more (within Timeout) so that a
// stopping process reports what it counted; it returns nil. Counts added after Run returned
// wait for a Flush.
func (c *Counter) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.Flush(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
			c.Flush(ctx)
		}
	}
}

// Flush reports every destination's pending counts now, within Timeout, and returns how many
// destinations it reported. A destination whose report failed keeps its counts (added to
// whatever was counted meanwhile) for the next flush; the failure is logged.
func (c *Counter) Flush(ctx context.Context) int {
	batch := c.take()
	if len(batch) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var (
		mu       sync.Mutex
		reported int
		g        errgroup.Group
	)
	g.SetLimit(flushConcurrency)
	for _, queue := range slices.Sorted(maps.Keys(batch)) {
		p := batch[queue]
		g.Go(func() error {
			if err := c.report(ctx, queue, p); err != nil {
				c.putBack(queue, p)
				c.log.Warn("breaker report failed; keeping its counts for the next flush", "queue", queue,
					"republished", p.republished, "failed", p.failed, "error", err)
				return nil
			}
			mu.Lock()
			reported++
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return reported
}

// take empties the pending counts and returns them.
func (c *Counter) take() map[string]pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	batch := c.pending
	c.pending = make(map[string]pending, len(batch))
	return batch
}

// putBack adds p's counts to queue's pending ones; settings counted meanwhile are newer and
// win.
func (c *Counter) putBack(queue string, p pending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now, ok := c.pending[queue]; ok {
		p.settings = now.settings
		p.republished += now.republished
		p.failed += now.failed
	}
	c.pending[queue] = p
}

// report signals p to queue's breaker, starting it (closed) if it does not run.
func (c *Counter) report(ctx context.Context, queue string, p pending) error {
	id := message.BreakerWorkflowID(queue)
	settings := p.settings.WithDefaults()
	opts := client.StartWorkflowOptions{
		ID:        id,
		TaskQueue: c.cfg.TaskQueue,
		// Listed by queue and state from its start, before its first transition upserts them.
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SABreakerState.ValueSet(string(workflows.BreakerClosed)),
			workflows.SAOriginalQueue.ValueSet(queue),
		),
	}
	outcomes := workflows.BreakerOutcomes{Republished: p.republished, Failed: p.failed, Settings: settings}
	in := workflows.BreakerInput{Queue: queue, Settings: settings}
	if _, err := c.cfg.Client.SignalWithStartWorkflow(ctx, id, workflows.SignalBreakerOutcomes, outcomes, opts, workflows.BreakerWorkflowName, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	return nil
}
