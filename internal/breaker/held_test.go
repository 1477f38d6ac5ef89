package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func heldExec(t *testing.T, id string, due time.Time) *workflowpb.WorkflowExecutionInfo {
	sa := map[string]any{workflows.SAStatus.GetName(): string(workflows.StatusHeld)}
	if !due.IsZero() {
		sa[workflows.SANextRetryTime.GetName()] = due
	}
	return execution(t, id, sa)
}

// Oldest due first across pages, those without a due time last, ties by ID, each once, at
// most limit.
func TestListHeldOldestDueFirst(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := &fakeLister{}
	l.set(nil,
		[]*workflowpb.WorkflowExecutionInfo{
			heldExec(t, "retry/orders/c", t0.Add(2*time.Second)),
			heldExec(t, "retry/orders/none", time.Time{}),
			heldExec(t, "retry/orders/b", t0),
		},
		[]*workflowpb.WorkflowExecutionInfo{
			heldExec(t, "retry/orders/a", t0),
			heldExec(t, "retry/orders/old", t0.Add(-time.Hour)),
			heldExec(t, "retry/orders/c", t0.Add(2*time.Second)), // repeated by paging
		})
	h := HeldLister{Client: l, TaskQueue: "rs"}
	ids, err := h.ListHeld(context.Background(), "orders", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"retry/orders/old", "retry/orders/a", "retry/orders/b", "retry/orders/c", "retry/orders/none"}, ids)
	assert.Equal(t,
		`WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs' AND RetryStatus = 'held' AND OriginalQueue = 'orders'`,
		l.calls()[0])

	ids, err = h.ListHeld(context.Background(), "orders", 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"retry/orders/old", "retry/orders/a"}, ids, "the oldest within the limit")
}

func TestListHeldEdges(t *testing.T) {
	l := &fakeLister{}
	h := HeldLister{Client: l}
	ids, err := h.ListHeld(context.Background(), "orders", 0)
	require.NoError(t, err)
	assert.Empty(t, ids)
	assert.Empty(t, l.calls(), "a zero limit asks nothing")

	ids, err = h.ListHeld(context.Background(), "orders", 5)
	require.NoError(t, err)
	assert.Empty(t, ids, "none held")

	l.set(errors.New("visibility unavailable"))
	_, err = h.ListHeld(context.Background(), "orders", 5)
	require.ErrorContains(t, err, "visibility unavailable")
	assert.ErrorContains(t, err, "OriginalQueue = 'orders'", "the error names the query")
}
