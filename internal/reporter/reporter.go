// Package reporter hands the bridge's failure reports to Temporal: it starts each message's
// RetryWorkflow or signals the running one, and decides what a Temporal error means to the
// bridge (permanent for the message, an outage of Temporal, or neither). It is the client
// side of the workflows package: it reads the clock, which workflow code must not.
package reporter

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Reporter implements bridge.Reporter on a Temporal client. The workflow ID comes from the
// message, so duplicate deliveries land on one workflow.
type Reporter struct {
	Client    client.Client
	TaskQueue string
	// Retention is passed to new runs. Defaults to workflows.DefaultRetention.
	Retention time.Duration
	// Eager asks for eager workflow start: when a worker runs in the same process, the first
	// workflow task is handed to it in the start response, which cuts the first retry's
	// lateness (cmd/bench/README.md). Without it, signal-with-start is one call.
	Eager bool
	// StartDelayMax is the longest first delay waited as the workflow's start delay (see
	// Report); 0 never delays a start. Signals do not end a start delay, so an operator's
	// retry-now or skip waits for it: keep it short.
	StartDelayMax time.Duration
	// DeferMax is the longest first delay the bridge waits out itself, holding the delivery
	// unacked (DeferFor), before it reports: the run then starts when its retry is due and
	// republishes in its first workflow task, handed over in the start's response in the
	// all process. That is the bare engine's cost per retry: no start-delay timer, no first
	// task through matching. 0 never defers.
	DeferMax time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (p *Reporter) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// DeferFor is how long the bridge should keep r's delivery before reporting it (its
// bridge.Config.Defer): what is left of the first retry's delay, counted from when the bridge
// received the report, when that delay is at most DeferMax; else 0, report at once.
func (p *Reporter) DeferFor(r message.FailureReport) time.Duration {
	_, due, ok := p.deferrable(reportWorkflowID(r), r)
	if !ok {
		return 0
	}
	return max(due.Sub(p.now()), 0)
}

// deferrable is r's first retry when the bridge defers it: its plan counted from when the bridge
// received the report, and when it is due; false when the report is not deferred (DeferMax 0, a
// later report, a longer delay).
func (p *Reporter) deferrable(id string, r message.FailureReport) (workflows.StartPlan, time.Time, bool) {
	if p.DeferMax <= 0 || r.ReportedAt.IsZero() {
		return workflows.StartPlan{}, time.Time{}, false
	}
	plan, ok := workflows.PlanStart(id, r, r.ReportedAt)
	if !ok || plan.Delay > p.DeferMax {
		return workflows.StartPlan{}, time.Time{}, false
	}
	return plan, r.ReportedAt.Add(plan.Delay), true
}

// due says whether r's first retry is already due: the bridge deferred it for its delay. The
// run then starts with the report as deferred, to republish in its first task.
func (p *Reporter) due(id string, r message.FailureReport) (workflows.StartPlan, bool) {
	plan, due, ok := p.deferrable(id, r)
	if !ok || due.After(p.now()) {
		return workflows.StartPlan{}, false
	}
	return plan, true
}

// Report delivers r to its workflow. A nil error means Temporal durably accepted it, so the
// caller may ack the delivery. Errors are marked for the bridge: an invalid argument (a
// payload Temporal rejects, say) will never succeed and is bridge.Permanent; an exhausted
// resource (a rate limit, an overloaded server) is Temporal's, not the message's, and is
// bridge.Unavailable. The bridge asks its Probe about the rest.
func (p *Reporter) Report(ctx context.Context, r message.FailureReport) error {
	err := p.report(ctx, r)
	var (
		invalid   *serviceerror.InvalidArgument
		exhausted *serviceerror.ResourceExhausted
	)
	switch {
	case errors.As(err, &invalid):
		return bridge.Permanent(err)
	case errors.As(err, &exhausted):
		return bridge.Unavailable(err)
	}
	return err
}

func (p *Reporter) report(ctx context.Context, r message.FailureReport) error {
	id, err := p.workflowID(ctx, r)
	if err != nil {
		return err
	}
	if continuesCount(r) {
		sent, err := p.signalRunning(ctx, id, r)
		if err != nil || sent {
			return err
		}
		r.Earlier = p.earlierRun(ctx, id)
	}
	opts := client.StartWorkflowOptions{
		ID:        id,
		TaskQueue: p.TaskQueue,
	}
	in := workflows.Input{Retention: p.Retention, Revision: workflows.CurrentRevision}
	if plan, ok := p.due(id, r); ok {
		// Deferred by the bridge for its delay: due now, republished by the first task. The
		// start sets the search attributes that task would have.
		opts.TypedSearchAttributes = plan.SearchAttributes
		in.Deferred = true
	} else if plan, ok := workflows.PlanStart(id, r, p.now()); ok && plan.Delay <= p.StartDelayMax {
		// A new run's first retry waits as the start delay: its first workflow task is the
		// republish, one task and one timer fewer per retry than a timer in the first task.
		// The start sets the search attributes that task would have.
		opts.StartDelay = plan.Delay
		opts.TypedSearchAttributes = plan.SearchAttributes
		in.StartDelay = plan.Delay
	}
	if !p.Eager {
		if _, err := p.Client.SignalWithStartWorkflow(ctx, id, workflows.SignalFailureReport, r, opts, workflows.RetryWorkflowName, in); err != nil {
			return fmt.Errorf("signal-with-start %s: %w", id, err)
		}
		return nil
	}
	// A delayed start has no first task to hand over.
	opts.EnableEagerStart = opts.StartDelay == 0
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	in.Report = &r
	// Start, or signal the running workflow; a run that ends between the two is started anew.
	for try := 0; try < 3; try++ {
		_, err := p.Client.ExecuteWorkflow(ctx, opts, workflows.RetryWorkflowName, in)
		if err == nil {
			return nil
		}
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if !errors.As(err, &started) {
			return fmt.Errorf("start %s: %w", id, err)
		}
		err = p.Client.SignalWorkflow(ctx, id, "", workflows.SignalFailureReport, r)
		if err == nil {
			return nil
		}
		var notFound *serviceerror.NotFound
		if !errors.As(err, &notFound) {
			return fmt.Errorf("signal %s: %w", id, err)
		}
	}
	return fmt.Errorf("report %s: workflow kept ending between start and signal", id)
}

// continuesCount says whether r continues a message's count (a failure of a retry), so that a
// new run for it needs its earlier run's attempts (FailureReport.Earlier).
func continuesCount(r message.FailureReport) bool {
	return r.RetryCount >= 1 && r.Poison == nil
}

// signalRunning hands r to the running run of workflow id, and says whether there was one: a
// report that continues a count usually fails a retry its run awaits, and that run takes it
// as a signal, one call as a signal-with-start would be. Only when no run is running does
// the report need its earlier run looked up.
func (p *Reporter) signalRunning(ctx context.Context, id string, r message.FailureReport) (bool, error) {
	err := p.Client.SignalWorkflow(ctx, id, "", workflows.SignalFailureReport, r)
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound):
		// No run, or only closed ones (the server answers NotFound for both).
		return false, nil
	}
	return false, fmt.Errorf("signal %s: %w", id, err)
}

// earlierRun is what a new run of workflow id starts from: its latest run, closed, or none.
// DescribeWorkflow reads the server's record of the workflow, which a run's close updates
// at once, where visibility (the run's own fallback, when the report names nothing) lists
// the close a moment later, longer on a loaded store. A run running again (started since
// signalRunning) takes r as a signal, so there is nothing to hand it. An error leaves it
// unnamed: the run then looks through visibility, once, as from an older bridge; the
// report itself does not fail for a look-up that only lengthens its story.
func (p *Reporter) earlierRun(ctx context.Context, id string) *message.EarlierRun {
	d, err := p.Client.DescribeWorkflow(ctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return &message.EarlierRun{}
	case err != nil, d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return nil
	}
	return &message.EarlierRun{RunID: d.WorkflowExecution.RunID}
}

// probeWorkflowID names a workflow that never exists: describing it goes through the frontend
// and the history service to the persistence store, so a NotFound says all three answer.
const probeWorkflowID = "retry-scheduler-probe/never-started"

// Probe is the bridge's Probe: nil when Temporal serves a call that reads its store. The
// frontend's own health check is not enough: with its database down it still answers, and
// every failed report would then count against its message.
func Probe(c client.Client) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.DescribeWorkflow(ctx, probeWorkflowID, "")
		var notFound *serviceerror.NotFound
		if err == nil || errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("temporal probe: %w", err)
	}
}
