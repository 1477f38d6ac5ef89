package workflows

import (
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// addReports adds the failure-report channel: a report is applied when it is the failure of
// the latest republish, and set aside otherwise (RabbitMQ redelivers), counted and shown.
func (r *retryRun) addReports(sel workflow.Selector) {
	sel.AddReceive(r.reports, func(c workflow.ReceiveChannel, _ bool) {
		var rep message.FailureReport
		c.Receive(r.ctx, &rep)
		r.report(rep)
	})
}

// report applies one failure report, or sets it aside.
func (r *retryRun) report(rep message.FailureReport) {
	if rep.Poison != nil {
		r.poisonReport(rep)
		return
	}
	if r.heldRetryWentOut(rep) {
		r.takeLostRepublish(rep.RetryKey)
	}
	if reason, why := r.stale(rep); reason != "" {
		r.setAside(rep, reason, why)
		return
	}
	r.failed(rep, workflow.Now(r.ctx))
}

// stale says why a report is not a new failure (a SetAside* reason and a detail), or "" when
// it is.
func (r *retryRun) stale(rep message.FailureReport) (reason, why string) {
	s := &r.state
	if s.Status != StatusAwaitingOutcome {
		return SetAsideRetryPending, "report while " + string(s.Status) + " (" + describeReport(rep) + ")"
	}
	if rep.RetryKey != "" {
		if rep.RetryKey != r.lastKey {
			return SetAsideOtherKey, "report for " + rep.RetryKey + ", latest republish is " + r.lastKey
		}
		return "", ""
	}
	if rep.RetryCount < s.RetryCount {
		return r.keylessBehind(rep)
	}
	return "", ""
}

// heldRetryWentOut says whether report rep proves that the retry this run holds went out
// after all: it carries the key that retry is to be sent with, and keys are never reused. A
// worker that republished the retry and stopped before its workflow task completed leaves no
// trace of the republish in the history; the task ran again, and this time the breaker held
// the retry. The consumer that got the first republish drops the second by its key, so a
// report set aside here would leave the run to take the silence after its release as
// delivered.
func (r *retryRun) heldRetryWentOut(rep message.FailureReport) bool {
	s := &r.state
	if s.Status != StatusHeld || rep.RetryKey == "" || rep.RetryKey != RetryKey(s.Message.MessageID, s.Sequence+1) {
		return false
	}
	return workflow.GetVersion(r.ctx, changeHeldKeyReportCounts, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// takeLostRepublish records the held retry as gone out with key, as republish would have
// (when, it cannot tell): the hold ends and the run awaits that retry's outcome, which the
// report in hand is.
func (r *retryRun) takeLostRepublish(key string) {
	s := &r.state
	s.Sequence++
	r.sent(key, time.Time{})
	r.event("note", "", "report for "+key+", the key of the held retry: it went out in a workflow task that "+
		"did not complete (its worker stopped); counted as the failure of retry "+strconv.Itoa(s.RetryCount))
	workflow.GetLogger(r.ctx).Info("report for the held retry's key counted as its failure",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount, "retry_key", key, "outcome", "counted")
}

// takePendingReports applies the failure reports already waiting when the quiet window ends,
// and says whether one of them was a new failure. A report the server hands over in the same
// workflow task as the timer (it was late: the bridge was down or cut off from Temporal for
// about the quiet window) is a failure, not silence: taking it as delivered loses the message.
func (r *retryRun) takePendingReports() bool {
	if r.reports.Len() == 0 {
		return false
	}
	if !r.includes(changeReportsWithQuietTimer) && workflow.GetVersion(r.ctx, changeReportsWithQuietTimer, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	var rep message.FailureReport
	for r.state.Status == StatusAwaitingOutcome && r.reports.ReceiveAsync(&rep) {
		r.report(rep)
		rep = message.FailureReport{}
	}
	return r.state.Status != StatusAwaitingOutcome
}

// failed applies one failure report accepted at now: record it, then retry or go to dead.
// FirstDelay must take the same decision for a run's first report.
func (r *retryRun) failed(rep message.FailureReport, now time.Time) {
	s := &r.state
	r.reportProbeFailure()
	r.rememberApplied(rep)
	d := s.record(rep, now, r.rules)
	if !d.Retry {
		r.toDead(d.Cause, d.Reason)
		return
	}
	r.count(MetricRetriesScheduled)
	workflow.GetLogger(r.ctx).Debug("retry scheduled",
		"message_id", s.Message.MessageID, "attempt", d.Attempt, "next_retry_at", s.NextRetryAt,
		"category", d.Category, "outcome", "scheduled")
	if !r.delayedStart && !r.deferredStart { // else the start set these search attributes
		r.upsert()
	}
}

// record applies failure report rep, accepted at now, to s: the attempt and the policy's
// decision under the rules pick chooses (see decide), which it returns. A decision to retry
// schedules it; the caller applies one to stop.
func (s *State) record(rep message.FailureReport, now time.Time, pick func() policy.Rules) policy.Decision {
	if rep.RetryCount > s.RetryCount {
		s.RetryCount = rep.RetryCount
	}
	if rep.RetryCount > s.Sequence && s.Resets == 0 {
		s.Sequence = rep.RetryCount
	}
	d := decide(s, rep, now, pick)
	s.Category = string(d.Category)
	s.LastFailureAt = now
	s.Attempts = append(s.Attempts, message.Attempt{
		Attempt:    s.RetryCount + 1,
		Timestamp:  now,
		Error:      rep.Failure.Reason,
		ErrorCode:  rep.Failure.ErrorCode,
		HTTPStatus: rep.Failure.HTTPStatus,
		Category:   string(d.Category),
		ErrorType:  rep.ErrorType,
		StackTrace: rep.StackTrace,
	})
	if d.Retry {
		s.NextRetryAt = now.Add(d.Delay)
		s.Status = StatusScheduled
	}
	return d
}

// currentRules picks the rules a new run takes: its first GetVersion is not a replay.
func currentRules() policy.Rules { return policy.CurrentRules }

// decide is the policy's decision on failure report rep of the message in state s, at now.
// Only when the current rules and the rules they replaced disagree does it ask pick which
// apply (the workflow asks workflow.GetVersion): a run records a version marker only when the
// change matters to it, not one marker and search-attribute write per message.
func decide(s *State, rep message.FailureReport, now time.Time, pick func() policy.Rules) policy.Decision {
	u := policy.JitterFraction(JitterKey(s.WorkflowID, s.Resets), s.RetryCount+1)
	start := s.FirstFailureAt
	if !s.WindowStart.IsZero() {
		start = s.WindowStart
	}
	// Time held by the destination's breaker is not spent retrying: the window moves on by it.
	elapsed := max(now.Sub(start)-s.HeldFor, 0)
	d := policy.CurrentRules.Decide(s.Policy, rep.Failure, s.RetryCount, s.MaxRetries, elapsed, u)
	if old := policy.RulesUnknownCapEverywhere.Decide(s.Policy, rep.Failure, s.RetryCount, s.MaxRetries, elapsed, u); old != d {
		if rules := pick(); rules != policy.CurrentRules {
			d = rules.Decide(s.Policy, rep.Failure, s.RetryCount, s.MaxRetries, elapsed, u)
		}
	}
	if !s.WindowStart.IsZero() && d.Cause == policy.CauseMaxWindow {
		d.Reason = strings.Replace(d.Reason, "after the first failure", "after the operator's retry", 1)
	}
	return d
}

// rules are the decision rules of this run: the older ones for a run whose history decided
// under them (replay finds no marker), else the current ones.
func (r *retryRun) rules() policy.Rules {
	if !r.includes(changeUnknownCapPerPolicy) && workflow.GetVersion(r.ctx, changeUnknownCapPerPolicy, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return policy.RulesUnknownCapEverywhere
	}
	return policy.RulesUnknownCapPerPolicy
}

// reportProbeFailure tells the destination's breaker that this run's probe failed, when the
// failure being applied is the probe's: a half-open breaker judges its probes by these, not
// by the failures the processes count, which may be older retries'. The signal is not waited
// for: a breaker that ended has nothing to judge.
func (r *retryRun) reportProbeFailure() {
	if r.probeKey == "" || r.probeKey != r.lastKey {
		return
	}
	key := r.probeKey
	r.probeKey = ""
	if workflow.GetVersion(r.ctx, changeProbeFailureReported, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	queue := r.state.Message.OriginalQueue
	sent := workflow.SignalExternalWorkflow(r.ctx, message.BreakerWorkflowID(queue), "", SignalBreakerProbeFailed,
		ProbeFailure{WorkflowID: workflow.GetInfo(r.ctx).WorkflowExecution.ID, RetryKey: key})
	workflow.Go(r.ctx, func(ctx workflow.Context) {
		if err := sent.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("probe failure not delivered to the breaker", "queue", queue, "retry_key", key, "error", err)
		}
	})
}
