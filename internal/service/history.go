package service

import (
	"context"
	"errors"
	"fmt"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// errNoEarlierRun: visibility lists no closed run of the message (yet).
var errNoEarlierRun = errors.New("no earlier run")

// historyRunsPage is how many closed runs of one message PriorAttempts reads: one page, as
// visibility lists the most recently closed runs first.
const historyRunsPage = 100

// history reads a message's earlier runs through Temporal: visibility finds the latest
// closed run, the state query (answered by replaying it on a worker) gives its attempts.
type history struct {
	client    client.Client
	namespace string
}

func (h history) PriorAttempts(ctx context.Context, workflowID, runID string) ([]message.Attempt, error) {
	resp, err := h.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: h.namespace,
		Query:     visibility.RunsOf(workflowID).NotEqual(visibility.ExecutionStatus, visibility.Running).String(),
		PageSize:  historyRunsPage,
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	var latest *workflowpb.WorkflowExecutionInfo
	for _, e := range resp.GetExecutions() {
		if e.GetExecution().GetRunId() == runID {
			continue
		}
		if latest == nil || e.GetCloseTime().AsTime().After(latest.GetCloseTime().AsTime()) {
			latest = e
		}
	}
	if latest == nil {
		// A report continues a count only after an earlier run republished it, so that run
		// exists; visibility records its close a moment after it ends (later on a loaded
		// SQL store). An error lets the local activity's retries wait for it.
		return nil, fmt.Errorf("%w: no closed run of %s listed yet", errNoEarlierRun, workflowID)
	}
	v, err := h.client.QueryWorkflow(ctx, workflowID, latest.GetExecution().GetRunId(), workflows.QueryState)
	if err != nil {
		return nil, fmt.Errorf("query run %s: %w", latest.GetExecution().GetRunId(), err)
	}
	var st workflows.State
	if err := v.Get(&st); err != nil {
		return nil, fmt.Errorf("decode state of run %s: %w", latest.GetExecution().GetRunId(), err)
	}
	return st.Attempts, nil
}
