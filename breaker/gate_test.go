package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func breakerExec(t *testing.T, queue string, mode workflows.BreakerMode) *workflowpb.WorkflowExecutionInfo {
	return execution(t, message.BreakerWorkflowID(queue), map[string]any{
		workflows.SABreakerState.GetName():  string(mode),
		workflows.SAOriginalQueue.GetName(): queue,
	})
}

func TestGateHoldsByTheListedBreakers(t *testing.T) {
	l := &fakeLister{}
	l.set(nil,
		[]*workflowpb.WorkflowExecutionInfo{
			breakerExec(t, "orders", workflows.BreakerOpen),
			breakerExec(t, "payments", workflows.BreakerHalfOpen),
		},
		[]*workflowpb.WorkflowExecutionInfo{
			breakerExec(t, "it's", workflows.BreakerPaused),
			// Listed while it closes (visibility lags): not held.
			breakerExec(t, "audit", workflows.BreakerClosed),
			// No OriginalQueue yet: the workflow ID names the queue.
			execution(t, message.BreakerWorkflowID("mail"), map[string]any{workflows.SABreakerState.GetName(): string(workflows.BreakerOpen)}),
		})
	g := NewGate(GateConfig{Client: l, TaskQueue: "rs"})
	mode, held := g.Holds("orders")
	assert.False(t, held, "nothing held before the first refresh")
	assert.Equal(t, string(workflows.BreakerClosed), mode)

	require.NoError(t, g.Refresh(context.Background()))
	for q, want := range map[string]workflows.BreakerMode{
		"orders": workflows.BreakerOpen, "payments": workflows.BreakerHalfOpen, "it's": workflows.BreakerPaused, "mail": workflows.BreakerOpen,
	} {
		mode, held := g.Holds(q)
		assert.True(t, held, q)
		assert.Equal(t, string(want), mode, q)
	}
	for _, q := range []string{"audit", "unknown", ""} {
		mode, held := g.Holds(q)
		assert.False(t, held, q)
		assert.Equal(t, string(workflows.BreakerClosed), mode, q)
	}
	assert.Equal(t, []string{
		`WorkflowType = 'BreakerWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs' AND BreakerState IN ('open', 'half-open', 'paused')`,
		`WorkflowType = 'BreakerWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs' AND BreakerState IN ('open', 'half-open', 'paused')`,
	}, l.calls(), "one query, two pages")

	// A breaker that closed is gone from the next list.
	l.set(nil, []*workflowpb.WorkflowExecutionInfo{breakerExec(t, "payments", workflows.BreakerOpen)})
	require.NoError(t, g.Refresh(context.Background()))
	_, held = g.Holds("orders")
	assert.False(t, held)
	mode, held = g.Holds("payments")
	assert.True(t, held)
	assert.Equal(t, string(workflows.BreakerOpen), mode)
}

// A failed refresh keeps the last list: an outage of visibility neither releases nor holds
// anything new.
func TestGateKeepsTheLastListWhenARefreshFails(t *testing.T) {
	l := &fakeLister{}
	l.set(nil, []*workflowpb.WorkflowExecutionInfo{breakerExec(t, "orders", workflows.BreakerOpen)})
	g := NewGate(GateConfig{Client: l})
	require.NoError(t, g.Refresh(context.Background()))
	l.set(errors.New("visibility unavailable"))
	require.ErrorContains(t, g.Refresh(context.Background()), "visibility unavailable")
	_, held := g.Holds("orders")
	assert.True(t, held)
	assert.NotContains(t, l.calls()[0], "TaskQueue", "no task queue: every task queue's breakers")
}

// Run refreshes on its interval: an opening shows without a call to Refresh.
func TestGateRunRefreshes(t *testing.T) {
	l := &fakeLister{}
	g := NewGate(GateConfig{Client: l, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	require.Eventually(t, func() bool { return len(l.calls()) > 0 }, 5*time.Second, time.Millisecond)
	l.set(nil, []*workflowpb.WorkflowExecutionInfo{breakerExec(t, "orders", workflows.BreakerOpen)})
	require.Eventually(t, func() bool { _, held := g.Holds("orders"); return held }, 5*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
