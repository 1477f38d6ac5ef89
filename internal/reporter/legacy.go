package reporter

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// reportWorkflowID is the workflow r belongs to: its message's, or for a poison delivery the
// parked one under the ingress queue (never a reported message's workflow).
func reportWorkflowID(r message.FailureReport) string {
	if r.Poison != nil {
		return message.PoisonWorkflowID(r.Poison.IngressQueue, r.Message.OriginalQueue, r.Message.MessageID)
	}
	return message.WorkflowID(r.Message.OriginalQueue, r.Message.MessageID)
}

// legacyReportWorkflowID is the ID an earlier release gave r's workflow: the queue unescaped,
// and a poison delivery under its original queue like a reported message.
func legacyReportWorkflowID(r message.FailureReport) string {
	return message.LegacyWorkflowID(r.Message.OriginalQueue, r.Message.MessageID)
}

// workflowID is the workflow to report r to. A run started under the legacy ID while that was
// current, and still running, keeps its reports, so a message live across an upgrade is not
// retried twice. Only the reports whose ID changed pay for the look-up: a queue holding '/',
// '%' or NUL, or a poison delivery whose original queue is known.
func (p *Reporter) workflowID(ctx context.Context, r message.FailureReport) (string, error) {
	id, legacy := reportWorkflowID(r), legacyReportWorkflowID(r)
	if legacy == id {
		return id, nil
	}
	ok, err := p.legacyRunFor(ctx, legacy, r)
	if err != nil {
		return "", err
	}
	if ok {
		return legacy, nil
	}
	return id, nil
}

// legacyRunFor says whether the workflow under the legacy ID is a running run of r's message:
// its OriginalQueue search attribute is r's queue (the legacy ID of ("a/b", "c") is the ID of
// ("a", "b/c"), which may be the run there). A poison report goes there only when that run is
// a parked delivery an operator retried, waiting for what comes back (awaiting-outcome,
// category unknown); a reported message's run would only note it.
func (p *Reporter) legacyRunFor(ctx context.Context, legacy string, r message.FailureReport) (bool, error) {
	d, err := p.Client.DescribeWorkflow(ctx, legacy, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("describe legacy workflow %s: %w", legacy, err)
	}
	if d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return false, nil
	}
	sa := d.TypedSearchAttributes
	if q, ok := sa.GetKeyword(workflows.SAOriginalQueue); !ok || q != r.Message.OriginalQueue {
		return false, nil
	}
	if r.Poison == nil {
		return true, nil
	}
	st, _ := sa.GetKeyword(workflows.SAStatus)
	cat, _ := sa.GetKeyword(workflows.SAErrorCategory)
	return st == string(workflows.StatusAwaitingOutcome) && cat == string(policy.Unknown), nil
}
