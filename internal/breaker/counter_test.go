package breaker

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// t0 is the counters' clock in these tests, unless a test moves it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 400e6, time.UTC)

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestCounter(f *fakeSignaller) *Counter {
	return NewCounter(CounterConfig{Client: f, TaskQueue: "rs", Interval: time.Hour, Now: func() time.Time { return t0 }})
}

// newClockedCounter is a counter flushing every second on a clock of the test's.
func newClockedCounter(f *fakeSignaller) (*Counter, *testClock) {
	clock := &testClock{now: t0}
	return NewCounter(CounterConfig{Client: f, TaskQueue: "rs", Interval: time.Second, Now: clock.Now}), clock
}

// outcomesByID is what the signals said, by workflow ID.
func outcomesByID(t *testing.T, calls []signal) map[string]workflows.BreakerOutcomes {
	t.Helper()
	out := map[string]workflows.BreakerOutcomes{}
	for _, c := range calls {
		o, ok := c.arg.(workflows.BreakerOutcomes)
		require.True(t, ok, "%T", c.arg)
		_, dup := out[c.id]
		require.False(t, dup, "one signal per destination and flush: %s", c.id)
		out[c.id] = o
	}
	return out
}

// One signal per destination and flush, starting its breaker with the destination, the
// settings (defaults filled in) and its search attributes.
func TestCounterFlushesOneSignalPerDestination(t *testing.T) {
	f := &fakeSignaller{}
	c := newTestCounter(f)
	custom := policy.Breaker{FailureRatio: 0.9}
	for range 5 {
		c.Republished("orders", policy.Breaker{})
	}
	c.Failed("orders", custom)
	c.Failed("payments", policy.Breaker{})
	c.Republished("audit", policy.Breaker{Disabled: true})
	c.Failed("audit", policy.Breaker{Disabled: true})

	assert.Equal(t, 2, c.Flush(context.Background()))
	calls := f.take()
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		message.BreakerWorkflowID("orders"): {Republished: 5, Failed: 1, Settings: custom.WithDefaults(),
			Buckets: []workflows.BreakerBucket{{At: t0, Republished: 5, Failed: 1}}},
		message.BreakerWorkflowID("payments"): {Failed: 1, Settings: policy.Breaker{}.WithDefaults(),
			Buckets: []workflows.BreakerBucket{{At: t0, Failed: 1}}},
	}, outcomesByID(t, calls), "a disabled breaker counts nothing; the latest settings win; undated outcomes are dated now")

	for _, call := range calls {
		assert.Equal(t, workflows.SignalBreakerOutcomes, call.name)
		assert.Equal(t, workflows.BreakerWorkflowName, call.workflow)
		assert.Equal(t, call.id, call.opts.ID)
		assert.Equal(t, "rs", call.opts.TaskQueue)
		require.Len(t, call.args, 1)
		in, ok := call.args[0].(workflows.BreakerInput)
		require.True(t, ok)
		assert.Equal(t, call.id, message.BreakerWorkflowID(in.Queue))
		assert.Equal(t, call.arg.(workflows.BreakerOutcomes).Settings, in.Settings)
		assert.Nil(t, in.State)
		sa := call.opts.TypedSearchAttributes
		q, _ := sa.GetKeyword(workflows.SAOriginalQueue)
		assert.Equal(t, in.Queue, q)
		m, _ := sa.GetKeyword(workflows.SABreakerState)
		assert.Equal(t, string(workflows.BreakerClosed), m)
	}

	assert.Zero(t, c.Flush(context.Background()), "nothing pending: no call")
	assert.Empty(t, f.take())
}

// A failed report keeps its counts for the next flush, added to what came meanwhile.
func TestCounterKeepsCountsOfAFailedReport(t *testing.T) {
	f := &fakeSignaller{}
	c := newTestCounter(f)
	orders := message.BreakerWorkflowID("orders")
	f.setFail(orders, true)
	c.Republished("orders", policy.Breaker{})
	c.Failed("orders", policy.Breaker{})
	c.Republished("payments", policy.Breaker{})

	assert.Equal(t, 1, c.Flush(context.Background()), "payments reported, orders not")
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		message.BreakerWorkflowID("payments"): {Republished: 1, Settings: policy.Breaker{}.WithDefaults(),
			Buckets: []workflows.BreakerBucket{{At: t0, Republished: 1}}},
	}, outcomesByID(t, f.take()))

	newer := policy.Breaker{Probes: 7}
	c.Failed("orders", newer)
	assert.Zero(t, c.Flush(context.Background()), "still failing")
	f.setFail(orders, false)
	assert.Equal(t, 1, c.Flush(context.Background()))
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		orders: {Republished: 1, Failed: 2, Settings: newer.WithDefaults(),
			Buckets: []workflows.BreakerBucket{{At: t0, Republished: 1, Failed: 2}}},
	}, outcomesByID(t, f.take()), "every count kept over two failed flushes, the newest settings")
}

// Counting from many goroutines while flushing loses nothing.
func TestCounterConcurrentCounting(t *testing.T) {
	f := &fakeSignaller{}
	c := newTestCounter(f)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range each {
				c.Republished("orders", policy.Breaker{})
				if i%2 == 0 {
					c.Failed("orders", policy.Breaker{})
				}
				if i%100 == 0 {
					c.Flush(context.Background())
				}
			}
		})
	}
	wg.Wait()
	c.Flush(context.Background())
	var total workflows.BreakerOutcomes
	for _, call := range f.take() {
		o := call.arg.(workflows.BreakerOutcomes)
		total.Republished += o.Republished
		total.Failed += o.Failed
	}
	assert.Equal(t, goroutines*each, total.Republished)
	assert.Equal(t, goroutines*each/2, total.Failed)
}

// Run flushes on its interval, and once more when its context ends.
func TestCounterRunFlushesOnIntervalAndShutdown(t *testing.T) {
	f := &fakeSignaller{sent: make(chan signal, 10)}
	c := NewCounter(CounterConfig{Client: f, TaskQueue: "rs", Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	c.Republished("orders", policy.Breaker{})
	select {
	case s := <-f.sent:
		assert.Equal(t, 1, s.arg.(workflows.BreakerOutcomes).Republished)
	case <-time.After(5 * time.Second):
		t.Fatal("no flush on the interval")
	}

	cancel()
	require.NoError(t, <-done)

	// A long interval: only the final flush can report this.
	c = newTestCounter(f)
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- c.Run(ctx) }()
	c.Failed("orders", policy.Breaker{})
	cancel()
	require.NoError(t, <-done)
	select {
	case s := <-f.sent:
		assert.Equal(t, 1, s.arg.(workflows.BreakerOutcomes).Failed, "flushed on shutdown, with a context of its own")
	default:
		t.Fatal("no flush on shutdown")
	}
}

// Outcomes go out in buckets of their dates (a second wide at the least), oldest first,
// each dated by the latest outcome in it; the totals are the buckets' sums, which a breaker
// from before dated buckets counts.
func TestCounterReportsDatedBuckets(t *testing.T) {
	f := &fakeSignaller{}
	c, _ := newClockedCounter(f)
	s := policy.Breaker{}
	tenAgo := t0.Truncate(time.Second).Add(-10 * time.Second)
	c.RepublishedAt("orders", s, tenAgo.Add(100*time.Millisecond))
	c.RepublishedAt("orders", s, tenAgo.Add(700*time.Millisecond))
	c.FailedAt("orders", s, tenAgo.Add(300*time.Millisecond)) // answers the first
	c.FailedAt("orders", s, t0.Add(-2*time.Second))
	c.Republished("orders", s)
	c.Failed("orders", s) // a report without a date: now

	require.Equal(t, 1, c.Flush(context.Background()))
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		message.BreakerWorkflowID("orders"): {Republished: 3, Failed: 3, Settings: s.WithDefaults(), Buckets: []workflows.BreakerBucket{
			{At: tenAgo.Add(700 * time.Millisecond), Republished: 2, Failed: 1},
			{At: t0.Add(-2 * time.Second), Failed: 1},
			{At: t0, Republished: 1, Failed: 1},
		}},
	}, outcomesByID(t, f.take()))
}

// A bucket spans the flush interval when that is longer than a second.
func TestCounterBucketsSpanTheFlushInterval(t *testing.T) {
	f := &fakeSignaller{}
	c := NewCounter(CounterConfig{Client: f, TaskQueue: "rs", Interval: 10 * time.Second, Now: func() time.Time { return t0 }})
	start := t0.Truncate(10 * time.Second).Add(-10 * time.Second)
	c.FailedAt("orders", policy.Breaker{}, start.Add(time.Second))
	c.RepublishedAt("orders", policy.Breaker{}, start.Add(3*time.Second))
	c.RepublishedAt("orders", policy.Breaker{}, start.Add(-time.Second))
	c.Flush(context.Background())
	o := outcomesByID(t, f.take())[message.BreakerWorkflowID("orders")]
	assert.Equal(t, []workflows.BreakerBucket{
		{At: start.Add(-time.Second), Republished: 1},
		{At: start.Add(3 * time.Second), Republished: 1, Failed: 1},
	}, o.Buckets)
}

// Clamp keeps a date within the window back from now and not after now.
func TestClamp(t *testing.T) {
	w := 30 * time.Second
	for name, tc := range map[string]struct{ at, want time.Time }{
		"zero: undated, now":            {time.Time{}, t0},
		"within the window":             {t0.Add(-29 * time.Second), t0.Add(-29 * time.Second)},
		"now":                           {t0, t0},
		"the future":                    {t0.Add(time.Millisecond), t0},
		"the far future":                {time.UnixMilli(math.MaxInt64), t0},
		"older than the window":         {t0.Add(-31 * time.Second), t0.Add(-w)},
		"the epoch":                     {time.UnixMilli(1), t0.Add(-w)},
		"the window's oldest, as it is": {t0.Add(-w), t0.Add(-w)},
	} {
		assert.Equal(t, tc.want, Clamp(tc.at, t0, w), name)
	}
}

// A report's date is a producer's word: one from the future counts now, one older than the
// window counts for nothing (the breaker would drop it), and neither is reported as it came.
func TestCounterClampsHostileDates(t *testing.T) {
	f := &fakeSignaller{}
	c, _ := newClockedCounter(f)
	s := policy.Breaker{Window: time.Minute}
	c.FailedAt("orders", s, t0.Add(24*time.Hour))
	c.FailedAt("orders", s, time.UnixMilli(math.MaxInt64))
	c.FailedAt("orders", s, t0.Add(-time.Hour))
	c.FailedAt("orders", s, time.UnixMilli(1))
	c.FailedAt("payments", s, t0.Add(-2*time.Minute))

	require.Equal(t, 1, c.Flush(context.Background()), "payments has nothing within its window: no signal")
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		message.BreakerWorkflowID("orders"): {Failed: 2, Settings: s.WithDefaults(),
			Buckets: []workflows.BreakerBucket{{At: t0, Failed: 2}}},
	}, outcomesByID(t, f.take()))
	assert.Zero(t, c.Flush(context.Background()), "nothing kept")
}

// Counts kept over failed flushes are let go once the window has passed them: the breaker
// would drop them, and a long outage must not grow them without bound.
func TestCounterLetsGoOfCountsTheWindowPassed(t *testing.T) {
	f := &fakeSignaller{}
	c, clock := newClockedCounter(f)
	orders := message.BreakerWorkflowID("orders")
	f.setFail(orders, true)
	s := policy.Breaker{Window: 30 * time.Second}
	c.Republished("orders", s)
	assert.Zero(t, c.Flush(context.Background()))
	clock.add(20 * time.Second)
	c.Failed("orders", s)
	assert.Zero(t, c.Flush(context.Background()))
	clock.add(15 * time.Second) // the first bucket is 35 s old now
	f.setFail(orders, false)
	require.Equal(t, 1, c.Flush(context.Background()))
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		orders: {Failed: 1, Settings: s.WithDefaults(), Buckets: []workflows.BreakerBucket{{At: t0.Add(20 * time.Second), Failed: 1}}},
	}, outcomesByID(t, f.take()))
}
