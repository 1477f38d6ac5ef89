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
	// Now is the clock outcomes are dated by when their caller gives no date. Defaults to
	// time.Now.
	Now func() time.Time
}

// DefaultFlushTimeout bounds one flush: a Temporal that does not answer delays the next
// flush, never the counting.
const DefaultFlushTimeout = 5 * time.Second

// flushConcurrency bounds the signals one flush has in flight: one per destination.
const flushConcurrency = 8

// Counter aggregates the outcomes breakers judge by, per destination and date, and reports
// them in one signal per destination and flush (SignalWithStart of SignalBreakerOutcomes,
// which starts a destination's breaker on its first report). Each outcome is dated by when
// it happened, not when it is counted: a republish by its confirm, a failure by the
// republish it answers (the report's x-retry-republished-at). The counts go out in dated
// buckets (BreakerOutcomes.Buckets), which the breaker places in its window by date, so a
// failure that reaches it late, behind an ingress backlog or a lagging Temporal, is judged
// against the republishes of its own moment. Counting takes a lock and a map update, so it
// costs a retry nothing measurable. Counts a failed report could not deliver are kept for
// the next flush, as long as they are within their breaker's window. Safe for concurrent use.
type Counter struct {
	cfg CounterConfig
	log *slog.Logger
	// width is the span of one bucket: the flush interval, and no less than the second
	// the breaker's own buckets span (finer ones would only lengthen the signal).
	width time.Duration

	mu      sync.Mutex
	pending map[string]pending
}

// pending is one destination's counts since its last report, by bucket (its start in unix
// nanoseconds), with the latest settings.
type pending struct {
	buckets  map[int64]workflows.BreakerBucket
	settings policy.Breaker
}

// NewCounter returns a Counter; Run it to flush.
func NewCounter(cfg CounterConfig) *Counter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultFlush
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultFlushTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Counter{cfg: cfg, log: orDiscard(cfg.Logger), width: max(cfg.Interval, time.Second), pending: map[string]pending{}}
}

// Republished counts a confirmed republish to queue, dated now (activities.BreakerCounter).
func (c *Counter) Republished(queue string, settings policy.Breaker) {
	c.add(queue, settings, time.Time{}, 1, 0)
}

// RepublishedAt counts a republish to queue confirmed at at (activities.DatedBreakerCounter).
func (c *Counter) RepublishedAt(queue string, settings policy.Breaker, at time.Time) {
	c.add(queue, settings, at, 1, 0)
}

// Failed counts a failure report of a retry that was republished to queue, dated now: a
// report that does not say which republish it answers.
func (c *Counter) Failed(queue string, settings policy.Breaker) {
	c.add(queue, settings, time.Time{}, 0, 1)
}

// FailedAt counts a failure report of a retry republished to queue at at, as the report
// says (bridge.DatedBreakerCounter); a zero at is dated now. The date comes from whoever
// published the report, so it is clamped (Clamp).
func (c *Counter) FailedAt(queue string, settings policy.Breaker, at time.Time) {
	c.add(queue, settings, at, 0, 1)
}

// Clamp is the date an outcome is counted at: at, within the breaker's window back from now
// and not after now; now for a zero at. A date from the future (a producer's forgery, a
// clock ahead) counts as if it arrived now; one older than the window as the window's oldest,
// which the breaker has let go of by the time the signal reaches it.
func Clamp(at, now time.Time, window time.Duration) time.Time {
	switch {
	case at.IsZero() || at.After(now):
		return now
	case at.Before(now.Add(-window)):
		return now.Add(-window)
	}
	return at
}

func (c *Counter) add(queue string, settings policy.Breaker, at time.Time, republished, failed int) {
	if settings.Disabled {
		return
	}
	at = Clamp(at, c.cfg.Now(), settings.WithDefaults().Window).UTC()
	key := at.Truncate(c.width).UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[queue]
	if p.buckets == nil {
		p.buckets = map[int64]workflows.BreakerBucket{}
	}
	b := p.buckets[key]
	b.At = latest(b.At, at)
	b.Republished += republished
	b.Failed += failed
	p.buckets[key] = b
	p.settings = settings
	c.pending[queue] = p
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
			o, ok := c.outcomes(p)
			if !ok {
				return nil // every count older than the window: the breaker would drop them
			}
			if err := c.report(ctx, queue, o); err != nil {
				c.putBack(queue, p)
				c.log.Warn("breaker report failed; keeping its counts for the next flush", "queue", queue,
					"republished", o.Republished, "failed", o.Failed, "error", err)
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
// win. Buckets older than the window are let go: the breaker would drop them, and a Temporal
// down for long must not grow the counts without bound.
func (c *Counter) putBack(queue string, p pending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	since := c.cfg.Now().Add(-p.settings.WithDefaults().Window)
	maps.DeleteFunc(p.buckets, func(_ int64, b workflows.BreakerBucket) bool { return !b.At.After(since) })
	if now, ok := c.pending[queue]; ok {
		p.settings = now.settings
		for k, b := range now.buckets {
			mine := p.buckets[k]
			mine.At = latest(mine.At, b.At)
			mine.Republished += b.Republished
			mine.Failed += b.Failed
			p.buckets[k] = mine
		}
	}
	c.pending[queue] = p
}

// outcomes is the signal of p's counts: its buckets within the window, oldest first, each
// dated by the latest outcome it counts, and their totals, which a breaker from before dated
// buckets counts at arrival. False when no bucket is left.
func (c *Counter) outcomes(p pending) (workflows.BreakerOutcomes, bool) {
	settings := p.settings.WithDefaults()
	since := c.cfg.Now().Add(-settings.Window)
	o := workflows.BreakerOutcomes{Settings: settings}
	for _, k := range slices.Sorted(maps.Keys(p.buckets)) {
		b := p.buckets[k]
		if !b.At.After(since) {
			continue
		}
		o.Buckets = append(o.Buckets, b)
		o.Republished += b.Republished
		o.Failed += b.Failed
	}
	return o, len(o.Buckets) > 0
}

// report signals o to queue's breaker, starting it (closed) if it does not run.
func (c *Counter) report(ctx context.Context, queue string, o workflows.BreakerOutcomes) error {
	id := message.BreakerWorkflowID(queue)
	settings := o.Settings
	opts := client.StartWorkflowOptions{
		ID:        id,
		TaskQueue: c.cfg.TaskQueue,
		// Listed by queue and state from its start, before its first transition upserts them.
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SABreakerState.ValueSet(string(workflows.BreakerClosed)),
			workflows.SAOriginalQueue.ValueSet(queue),
		),
	}
	in := workflows.BreakerInput{Queue: queue, Settings: settings}
	if _, err := c.cfg.Client.SignalWithStartWorkflow(ctx, id, workflows.SignalBreakerOutcomes, o, opts, workflows.BreakerWorkflowName, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	return nil
}
