package reporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func heldReport(delay time.Duration, reportedAt time.Time) message.FailureReport {
	return message.FailureReport{
		Message:    message.Message{MessageID: "m-1", OriginalQueue: "orders"},
		Failure:    policy.Failure{Category: "transient", Reason: "503", HTTPStatus: 503},
		Policy:     policy.Policy{Name: "p", Backoff: policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{delay}}, Jitter: policy.Jitter{Mode: policy.NoJitter}, MaxRetries: 3},
		ReportedAt: reportedAt,
	}
}

// The bridge holds a first report for what is left of its first delay, when that delay is
// at most DeferMax; never a later report, a longer delay, or with DeferMax 0.
func TestHoldFor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(300 * time.Millisecond)
	p := &Reporter{DeferMax: 2 * time.Second, Now: func() time.Time { return now }}

	assert.Equal(t, 700*time.Millisecond, p.DeferFor(heldReport(time.Second, t0)))
	assert.Zero(t, p.DeferFor(heldReport(3*time.Second, t0)), "longer than DeferMax")
	later := heldReport(time.Second, t0)
	later.RetryCount = 1
	assert.Zero(t, p.DeferFor(later), "a later report may continue an earlier run")
	assert.Zero(t, p.DeferFor(heldReport(time.Second, time.Time{})), "no ReportedAt")
	assert.Zero(t, (&Reporter{Now: p.Now}).DeferFor(heldReport(time.Second, t0)), "DeferMax 0")
	now = t0.Add(5 * time.Second)
	assert.Zero(t, p.DeferFor(heldReport(time.Second, t0)), "already due")

	// Once held to its due time, the report starts the run as held, due at once.
	plan, ok := p.due("retry/orders/m-1", heldReport(time.Second, t0))
	require.True(t, ok)
	assert.Equal(t, time.Second, plan.Delay)
	now = t0.Add(500 * time.Millisecond)
	_, ok = p.due("retry/orders/m-1", heldReport(time.Second, t0))
	assert.False(t, ok, "not due yet: not held, the start-delay path applies")
}

// A report held to its due time starts its run at once, eagerly in the all process, as held:
// no start delay, and the start carries the scheduled retry's search attributes.
func TestReportStartsAHeldReportAtOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, eager := range []bool{true, false} {
		fc := &fakeClient{}
		p := &Reporter{Client: fc, TaskQueue: "tq", Eager: eager, DeferMax: 2 * time.Second, StartDelayMax: 10 * time.Second,
			Now: func() time.Time { return t0.Add(time.Second) }}
		require.NoError(t, p.Report(context.Background(), heldReport(time.Second, t0)))
		require.Len(t, fc.starts, 1)
		assert.Zero(t, fc.starts[0].StartDelay, "eager %v", eager)
		assert.Equal(t, eager, fc.starts[0].EnableEagerStart)
		assert.Positive(t, fc.starts[0].TypedSearchAttributes.Size())
		assert.True(t, fc.inputs[0].Deferred)
		assert.Equal(t, workflows.CurrentRevision, fc.inputs[0].Revision)
	}

	// Not due yet (the bridge could not hold it): the start delay waits what is left.
	fc := &fakeClient{}
	p := &Reporter{Client: fc, TaskQueue: "tq", Eager: true, DeferMax: 2 * time.Second, StartDelayMax: 10 * time.Second,
		Now: func() time.Time { return t0 }}
	require.NoError(t, p.Report(context.Background(), heldReport(time.Second, t0)))
	assert.Equal(t, time.Second, fc.starts[0].StartDelay)
	assert.False(t, fc.inputs[0].Deferred)
}
