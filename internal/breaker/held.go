package breaker

import (
	"cmp"
	"context"
	"slices"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// HeldLister lists the held retries of a destination (activities.HeldLister): running
// RetryWorkflows of its task queue with RetryStatus held and OriginalQueue the destination.
type HeldLister struct {
	// Client answers the visibility query. Required.
	Client Lister
	// TaskQueue selects this service's RetryWorkflows.
	TaskQueue string
}

// heldRetry is one listed held retry.
type heldRetry struct {
	id  string
	due time.Time
}

// ListHeld returns the workflow IDs of up to limit held retries of queue, oldest due
// (NextRetryTime) first; one without a due time comes after those with one. SQL visibility
// (the dev server's SQLite, PostgreSQL, MySQL) refuses ORDER BY, so every held retry of the
// destination is listed and sorted here: a page of a thousand per call, which a release at
// its rate (one ListHeld a second) keeps well within a visibility store's means for the
// tens of thousands held by a long outage.
func (h HeldLister) ListHeld(ctx context.Context, queue string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	var all []heldRetry
	q := visibility.HeldRetries(h.TaskQueue, queue).String()
	err := listAll(ctx, h.Client, q, func(e *workflowpb.WorkflowExecutionInfo) error {
		all = append(all, heldRetry{id: e.GetExecution().GetWorkflowId(), due: datetime(e, workflows.SANextRetryTime)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, oldestDueFirst)
	// Pages read while retries change may repeat one.
	ids := make([]string, 0, min(limit, len(all)))
	seen := make(map[string]bool, cap(ids))
	for _, r := range all {
		if len(ids) == limit {
			break
		}
		if !seen[r.id] {
			seen[r.id] = true
			ids = append(ids, r.id)
		}
	}
	return ids, nil
}

// oldestDueFirst orders held retries by due time, unset last, then by workflow ID.
func oldestDueFirst(a, b heldRetry) int {
	switch {
	case a.due.IsZero() != b.due.IsZero():
		if a.due.IsZero() {
			return 1
		}
		return -1
	case !a.due.Equal(b.due):
		return a.due.Compare(b.due)
	}
	return cmp.Compare(a.id, b.id)
}
