package workflows

import (
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// firstReportTimeout bounds how long a run started without a report waits for its first one
// (signal-with-start delivers it in the first task, so this only guards a bad start).
const firstReportTimeout = time.Minute

func (r *retryRun) awaitFirstReport() (message.FailureReport, bool) {
	var rep message.FailureReport
	if (r.delayedStart || r.deferredStart) && r.reports.ReceiveAsync(&rep) {
		// Signal-with-start with a start delay, or of a report the bridge deferred: the report came
		// with the start, so the first task has it, and a timeout timer would only be one more
		// timer task per retry. Not
		// versioned, and no marker can tell the runs that armed the timer here apart: why
		// they need not replay is in replay_test.go (unreplayable).
		return rep, true
	}
	ok, _ := r.reports.ReceiveWithTimeout(r.ctx, firstReportTimeout, &rep)
	return rep, ok
}

// applyFirstReport takes the run's first report: it fixes the message, policy and count.
func (r *retryRun) applyFirstReport(rep message.FailureReport) {
	now := workflow.Now(r.ctx)
	switch {
	case r.delayedStart:
		// The first task runs when the delay is over; the failure was reported at the start.
		now = workflow.GetInfo(r.ctx).WorkflowStartTime
	case r.deferredStart:
		// The bridge waited the delay before the start: the retry is due now, in this task.
		now = rep.ReportedAt
	}
	r.state.setFromFirstReport(rep, now)
	if rep.Poison != nil {
		// A parked poison or oversize delivery: a new start path, taken only by new runs.
		r.poisoned(rep, now)
		return
	}
	if rep.RetryCount > 0 {
		r.takePriorAttempts(rep.Earlier)
	}
	r.failed(rep, now)
}

// priorAttemptsOptions: one try, within a few seconds. The look-up runs in the run's first
// workflow task, which holds its slot until it ends, and the retry due in that task waits
// for it: where the bridge names the earlier run (or that there is none) the answer does
// not come sooner for asking again, and a report from an older bridge (Earlier nil) gets one
// visibility listing rather than waiting out its lag (four tries over about 7 s before). The
// options are not part of the history: a recorded run whose look-up took retries replays
// from its marker as before.
var priorAttemptsOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 5 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
}

// takePriorAttempts starts this run's attempt history with the earlier run's, when the
// report continues a count (it failed again after that run had ended). earlier is what the
// bridge found of that run (message.FailureReport.Earlier). Best effort: the count itself
// comes from the report, so a failed look-up only shortens the story.
func (r *retryRun) takePriorAttempts(earlier *message.EarlierRun) {
	if !r.includes(changePriorAttempts) && workflow.GetVersion(r.ctx, changePriorAttempts, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	info := workflow.GetInfo(r.ctx)
	in := activities.PriorAttemptsInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}
	if earlier != nil {
		if earlier.RunID == "" && r.trustsNoEarlierRun() {
			r.event("note", "", "no earlier run to carry attempts from: the count continues from the report")
			return
		}
		in.EarlierRunID = earlier.RunID
	}
	var acts *activities.Activities
	var prior []message.Attempt
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(r.ctx, priorAttemptsOptions), acts.PriorAttempts, in).Get(r.ctx, &prior)
	if err != nil {
		r.event("note", "", "attempts of the earlier run not found: "+err.Error())
		return
	}
	if len(prior) == 0 {
		return
	}
	r.state.Attempts = append(prior, r.state.Attempts...)
	if first := prior[0].Timestamp; !first.IsZero() && first.Before(r.state.FirstFailureAt) {
		r.state.FirstFailureAt = first
	}
	from := "an earlier run"
	if in.EarlierRunID != "" {
		from = "the earlier run " + in.EarlierRunID
	}
	r.event("note", "", "continues "+from+": "+strconv.Itoa(len(prior))+" attempts carried over")
}

// trustsNoEarlierRun says whether this run takes the bridge's word that the message has no
// earlier run (a report handing Earlier with no run ID) and schedules no look-up. Asked only
// on that report. Without the gate a run could not be replayed by both sides of an upgrade:
// a bridge that names no earlier run can report to a worker from before the field, which
// ignores it and records the look-up's marker, and this code, replaying that history
// (a worker restart, a query of the closed run), would schedule nothing in its place. Old
// histories without the field never reach it: an Earlier naming a run, or none at all,
// schedules the same local activity as before, its input aside, which replay does not
// compare.
func (r *retryRun) trustsNoEarlierRun() bool {
	return r.includes(changeNoEarlierRun) ||
		workflow.GetVersion(r.ctx, changeNoEarlierRun, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// setFromFirstReport fixes the message, policy and count from a run's first report, accepted
// at now.
func (s *State) setFromFirstReport(rep message.FailureReport, now time.Time) {
	s.Message = rep.Message
	s.Policy = rep.Policy
	s.DeadLetterQueue = rep.DeadLetterQueue
	s.MaxRetries = rep.MaxRetries
	s.TenantID = rep.Message.TenantID
	s.Service, s.ServiceVersion = rep.Service, rep.ServiceVersion
	s.FirstFailureAt = now
	// A run for a message whose earlier run ended continues the count it is given, so max
	// attempts cannot be evaded by outliving a run.
	s.RetryCount = rep.RetryCount
	s.Sequence = rep.RetryCount
	for _, n := range rep.Notes {
		s.Events = append(s.Events, Event{At: now, Kind: "note", Detail: n})
	}
}

// DelayedState is the state of a run started with its first delay as the start delay
// (Input.StartDelay) before its first workflow task: there is nothing to query yet, but the
// run's start holds all it will know (its input, or the report signalled with the start).
func DelayedState(id string, rep message.FailureReport, startedAt time.Time) State {
	s := State{WorkflowID: id}
	s.setFromFirstReport(rep, startedAt)
	s.record(rep, startedAt, currentRules)
	return s
}

// takesDeferredStart says whether this run takes the first report the bridge deferred as due. Asked once, at
// the start of the run's first task, before anything else is decided.
func (r *retryRun) takesDeferredStart() bool {
	return r.includes(changeDeferredStart) ||
		workflow.GetVersion(r.ctx, changeDeferredStart, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}
