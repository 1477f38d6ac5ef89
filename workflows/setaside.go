package workflows

import (
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// Why a failure report was set aside: the keys of State.SetAside and the values of the reason
// label of MetricReportsSetAside, a small fixed set.
const (
	// SetAsideOtherKey: its retry_key names a republish other than the latest.
	SetAsideOtherKey = "other-key"
	// SetAsideBehindCount: no retry_key and a retry_count behind the attempt, on a run from
	// before such a report counted as the latest attempt's failure.
	SetAsideBehindCount = "behind-count"
	// SetAsideBeforeRepublish: no retry_key and a retry_count behind the attempt, received by
	// the bridge before the latest republish went out, so not that republish's failure.
	SetAsideBeforeRepublish = "before-republish"
	// SetAsideRedelivered: no retry_key and a retry_count behind the attempt, redelivered by
	// the broker with the bytes of a report the run already applied: that report again.
	SetAsideRedelivered = "redelivered"
	// SetAsideRetryPending: the latest failure is recorded and its retry is scheduled, being
	// republished or held (a report with the held retry's own key counts instead:
	// heldRetryWentOut).
	SetAsideRetryPending = "retry-pending"
	// SetAsideDead: the message is dead; the report is kept as a note.
	SetAsideDead = "dead"
	// SetAsidePoison: the bridge dead-lettered a poison delivery for this message while its
	// run is live; the run goes on.
	SetAsidePoison = "poison"
	// SetAsideRunEnded: the report was waiting when the run ended (resolved, discarded,
	// expired): a failure reported after that starts a new run.
	SetAsideRunEnded = "run-ended"
)

// SetAsideReport is one report set aside: when, why (a SetAside* reason), and what it said.
type SetAsideReport struct {
	At         time.Time `json:"at"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail,omitempty"`
	RetryCount int       `json:"retry_count"`
	RetryKey   string    `json:"retry_key,omitempty"`
}

// setAside records a report that is not applied as a new failure, so that none goes
// unnoticed: the state's counts and latest, an event, the metric by queue and reason, a log.
func (r *retryRun) setAside(rep message.FailureReport, reason, detail string) {
	s := &r.state
	now := workflow.Now(r.ctx)
	s.DuplicateReports++
	if s.SetAside == nil {
		s.SetAside = map[string]int{}
	}
	s.SetAside[reason]++
	s.LastSetAside = &SetAsideReport{At: now, Reason: reason, Detail: detail, RetryCount: rep.RetryCount, RetryKey: rep.RetryKey}
	r.event("report-set-aside", "", reason+": "+detail)
	workflow.GetMetricsHandler(r.ctx).WithTags(map[string]string{"queue": s.Message.OriginalQueue, "reason": reason}).
		Counter(MetricReportsSetAside).Inc(1)
	// A redelivery or a late duplicate is routine; a report without retry_key behind the
	// attempt points to a producer that does not copy x-retry-key: the operator's business.
	logAt := workflow.GetLogger(r.ctx).Debug
	if reason == SetAsideBehindCount || reason == SetAsideBeforeRepublish {
		logAt = workflow.GetLogger(r.ctx).Info
	}
	logAt("failure report set aside",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount, "reason", reason, "outcome", "set-aside",
		"retry_count", rep.RetryCount, "retry_key", rep.RetryKey, "status", string(s.Status), "detail", detail)
}

// setAsidePending sets aside the reports still waiting when the run ends: a report read by
// no one would vanish with the run.
func (r *retryRun) setAsidePending() {
	var rep message.FailureReport
	for r.reports.ReceiveAsync(&rep) {
		r.setAside(rep, SetAsideRunEnded, "run ended "+string(r.state.Status)+" before the report was read ("+describeReport(rep)+")")
		rep = message.FailureReport{}
	}
}

// republishClockMargin is how much earlier than the latest republish the bridge must have
// received a report for it to be set aside as not that republish's failure: it covers the
// bridge's and the worker's clocks disagreeing, and a consumer failing the republish before
// its confirm came back. Wider, more producer duplicates count as failures; narrower, a
// skewed clock could set a real failure aside.
const republishClockMargin = 100 * time.Millisecond

// keylessBehind judges a report without retry_key whose retry_count is behind the current
// attempt, received while the latest republish awaits its outcome. Such a report cannot be
// told from a redelivery of an earlier report; a lost failure is worse than one retry too
// many, so it counts as the latest attempt's failure, unless the bridge received it before
// that republish went out. It returns a set-aside reason and why, or "" to apply it.
func (r *retryRun) keylessBehind(rep message.FailureReport) (reason, why string) {
	s := &r.state
	behind := "report without retry_key, retry_count " + strconv.Itoa(rep.RetryCount) + " behind attempt " + strconv.Itoa(s.RetryCount)
	if !r.includes(changeKeylessReportCounts) && workflow.GetVersion(r.ctx, changeKeylessReportCounts, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return SetAsideBehindCount, behind
	}
	if at := r.latestRepublishAt(); !rep.ReportedAt.IsZero() && !at.IsZero() && rep.ReportedAt.Add(republishClockMargin).Before(at) {
		return SetAsideBeforeRepublish, behind + ", received at " + rep.ReportedAt.UTC().Format(time.RFC3339Nano) +
			", before retry " + strconv.Itoa(s.RetryCount) + " went out at " + at.UTC().Format(time.RFC3339Nano)
	}
	if rep.Redelivered && rep.Digest != "" && slices.Contains(r.applied, rep.Digest) {
		return SetAsideRedelivered, behind + ", redelivered by the broker with the bytes of a report this run applied"
	}
	r.event("note", "", behind+": counted as the failure of retry "+strconv.Itoa(s.RetryCount)+
		" (it cannot be told from a redelivery; copy x-retry-key into reports to tell them apart)")
	workflow.GetLogger(r.ctx).Info("report without retry_key counted as the latest retry's failure",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount, "retry_count", rep.RetryCount, "outcome", "counted")
	return "", ""
}

// maxApplied bounds the digests of applied reports a run keeps: a redelivery follows its
// report closely.
const maxApplied = 16

// rememberApplied keeps the digest of a report the run applied as a failure, so that the
// broker's redelivery of it is known for what it is (keylessBehind).
func (r *retryRun) rememberApplied(rep message.FailureReport) {
	if rep.Digest == "" {
		return
	}
	r.applied = append(r.applied, rep.Digest)
	if len(r.applied) > maxApplied {
		r.applied = r.applied[len(r.applied)-maxApplied:]
	}
}

// latestRepublishAt is when the latest republish was confirmed, zero when unknown.
func (r *retryRun) latestRepublishAt() time.Time {
	if n := len(r.state.Attempts); n > 0 {
		return r.state.Attempts[n-1].RepublishedAt
	}
	return time.Time{}
}

// describeReport is a short account of a report for an event's detail.
func describeReport(rep message.FailureReport) string {
	d := "retry_count " + strconv.Itoa(rep.RetryCount)
	if rep.RetryKey != "" {
		d += ", retry_key " + rep.RetryKey
	}
	if rep.Failure.Reason != "" {
		d += ": " + rep.Failure.Reason
	}
	return d
}
