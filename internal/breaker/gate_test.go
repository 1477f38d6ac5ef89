package breaker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
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

// running is a described breaker workflow of task queue tq in mode.
func running(t *testing.T, tq, queue string, mode workflows.BreakerMode) *workflowpb.WorkflowExecutionInfo {
	e := breakerExec(t, queue, mode)
	e.TaskQueue = tq
	e.Status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	return e
}

// A destination a retry asked about has its breaker described on the next refresh: an
// opening visibility has not listed yet holds, a closing it still lists lets go, and a
// destination without a breaker is not held.
func TestGateDescribesTheBreakersRetriesAskAbout(t *testing.T) {
	l := &fakeLister{}
	l.set(nil, []*workflowpb.WorkflowExecutionInfo{breakerExec(t, "payments", workflows.BreakerOpen), breakerExec(t, "audit", workflows.BreakerOpen)})
	l.describe(running(t, "rs", "orders", workflows.BreakerOpen), running(t, "rs", "payments", workflows.BreakerClosed))
	g := NewGate(GateConfig{Client: l, TaskQueue: "rs"})
	for _, q := range []string{"orders", "payments", "mail"} {
		_, held := g.Holds(q)
		assert.False(t, held, "%s: nothing held before the first refresh", q)
	}
	require.NoError(t, g.Refresh(context.Background()))
	assert.ElementsMatch(t, []string{message.BreakerWorkflowID("orders"), message.BreakerWorkflowID("payments"), message.BreakerWorkflowID("mail")},
		l.describedIDs(), "the destinations asked about, and only those")

	mode, held := g.Holds("orders")
	assert.True(t, held, "opened, not listed yet")
	assert.Equal(t, string(workflows.BreakerOpen), mode)
	_, held = g.Holds("payments")
	assert.False(t, held, "closed, still listed")
	_, held = g.Holds("mail")
	assert.False(t, held, "no breaker")
	_, held = g.Holds("audit")
	assert.True(t, held, "listed and not described: the list answers")
}

// A describe that fails, or finds another task queue's breaker, leaves the list's answer; a
// breaker that ended holds nothing.
func TestGateDescribeFallsBackToTheList(t *testing.T) {
	l := &fakeLister{}
	l.set(nil, []*workflowpb.WorkflowExecutionInfo{breakerExec(t, "orders", workflows.BreakerOpen)})
	g := NewGate(GateConfig{Client: l, TaskQueue: "rs"})
	g.Holds("orders")
	require.NoError(t, g.Refresh(context.Background()))
	_, held := g.Holds("orders")
	assert.True(t, held, "the describe failed: the list answers")

	l.describe(running(t, "another", "orders", workflows.BreakerClosed))
	require.NoError(t, g.Refresh(context.Background()))
	_, held = g.Holds("orders")
	assert.True(t, held, "another deployment's breaker: the list answers")

	ended := running(t, "rs", "orders", workflows.BreakerOpen)
	ended.Status = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
	l.describe(ended)
	require.NoError(t, g.Refresh(context.Background()))
	_, held = g.Holds("orders")
	assert.False(t, held, "a breaker that ended holds nothing")
}

// When the list fails the last answers stand, updated by the describes.
func TestGateDescribesWhileTheListFails(t *testing.T) {
	l := &fakeLister{}
	l.set(nil, []*workflowpb.WorkflowExecutionInfo{breakerExec(t, "payments", workflows.BreakerOpen)})
	g := NewGate(GateConfig{Client: l, TaskQueue: "rs"})
	require.NoError(t, g.Refresh(context.Background()))
	l.set(errors.New("visibility unavailable"))
	l.describe(running(t, "rs", "orders", workflows.BreakerHalfOpen))
	g.Holds("orders")
	require.Error(t, g.Refresh(context.Background()))
	mode, held := g.Holds("orders")
	assert.True(t, held)
	assert.Equal(t, string(workflows.BreakerHalfOpen), mode)
	_, held = g.Holds("payments")
	assert.True(t, held, "the last list stands")
}

// At most maxDescribed destinations are described in one refresh: the latest asked.
func TestGateDescribesAtMostTheLatestAsked(t *testing.T) {
	l := &fakeLister{}
	l.describe(running(t, "rs", "none", workflows.BreakerClosed))
	g := NewGate(GateConfig{Client: l, TaskQueue: "rs"})
	for i := range maxDescribed + 5 {
		g.Holds(fmt.Sprintf("q%02d", i))
	}
	require.NoError(t, g.Refresh(context.Background()))
	ids := l.describedIDs()
	assert.Len(t, ids, maxDescribed)
	assert.Contains(t, ids, message.BreakerWorkflowID(fmt.Sprintf("q%02d", maxDescribed+4)), "the latest asked")
}
