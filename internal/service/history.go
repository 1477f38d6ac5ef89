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

// historyRunsPage is how many closed runs of one message latestClosedRun reads: one page, as
// visibility lists the most recently closed runs first.
const historyRunsPage = 100

// history reads a message's earlier runs through Temporal: the run the bridge named, else
// the latest closed run visibility lists; the state query (answered by replaying that run on
// a worker) gives its attempts.
type history struct {
	client    client.Client
	namespace string
}

func (h history) PriorAttempts(ctx context.Context, workflowID, runID, earlierRunID string) ([]message.Attempt, error) {
	if earlierRunID == "" {
		latest, err := h.latestClosedRun(ctx, workflowID, runID)
		if err != nil {
			return nil, err
		}
		earlierRunID = latest
	}
	v, err := h.client.QueryWorkflow(ctx, workflowID, earlierRunID, workflows.QueryState)
	if err != nil {
		return nil, fmt.Errorf("query run %s: %w", earlierRunID, err)
	}
	var st workflows.State
	if err := v.Get(&st); err != nil {
		return nil, fmt.Errorf("decode state of run %s: %w", earlierRunID, err)
	}
	return st.Attempts, nil
}

// latestClosedRun is the ID of the most recently closed run of workflowID other than runID,
// as visibility lists them: the look-up of a report whose bridge did not name the earlier run
// (one from before message.FailureReport.Earlier).
func (h history) latestClosedRun(ctx context.Context, workflowID, runID string) (string, error) {
	resp, err := h.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: h.namespace,
		Query:     visibility.RunsOf(workflowID).NotEqual(visibility.ExecutionStatus, visibility.Running).String(),
		PageSize:  historyRunsPage,
	})
	if err != nil {
		return "", fmt.Errorf("list runs: %w", err)
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
		// exists, but visibility records its close a moment after it ends (later on a loaded
		// SQL store). The error is final, not a cue to retry: the look-up runs once, in the
		// new run's first workflow task, which waiting out the lag would hold while the retry
		// it is due to send waits; the run only carries fewer attempts.
		return "", fmt.Errorf("%w: no closed run of %s listed yet", errNoEarlierRun, workflowID)
	}
	return latest.GetExecution().GetRunId(), nil
}
