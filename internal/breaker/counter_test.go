package breaker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func newTestCounter(f *fakeSignaller) *Counter {
	return NewCounter(CounterConfig{Client: f, TaskQueue: "rs", Interval: time.Hour})
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
		message.BreakerWorkflowID("orders"):   {Republished: 5, Failed: 1, Settings: custom.WithDefaults()},
		message.BreakerWorkflowID("payments"): {Failed: 1, Settings: policy.Breaker{}.WithDefaults()},
	}, outcomesByID(t, calls), "a disabled breaker counts nothing; the latest settings win")

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
		message.BreakerWorkflowID("payments"): {Republished: 1, Settings: policy.Breaker{}.WithDefaults()},
	}, outcomesByID(t, f.take()))

	newer := policy.Breaker{Probes: 7}
	c.Failed("orders", newer)
	assert.Zero(t, c.Flush(context.Background()), "still failing")
	f.setFail(orders, false)
	assert.Equal(t, 1, c.Flush(context.Background()))
	assert.Equal(t, map[string]workflows.BreakerOutcomes{
		orders: {Republished: 1, Failed: 2, Settings: newer.WithDefaults()},
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
