package workflows

import "slices"

// Revisions of the workflow code. A run carries the revision it was started under in its
// Input, which is part of its history. A change gated with workflow.GetVersion records a
// Version marker, and through the SDK a TemporalChangeVersion search-attribute write, in
// every run that reaches the gate: one more history event and one more visibility write per
// message for as long as the gate stays. A run started at a revision that includes the change
// takes its new branch without asking: its input says so as durably as a marker would, so
// its replay is as deterministic. Runs started before (revision 0) still ask GetVersion, and
// histories with markers replay as before (the SDK does not match Version markers and their
// search-attribute writes against the replay's commands).
//
// A change joins a revision only once every worker that can pick up new runs has its gate:
// a run started at a revision must not be run by code that lacks the change. One kind of
// change may join in the release that brings it: one that changes only the values of a
// search-attribute upsert the old code also makes (the SDK does not match an upsert's values
// against the replay's commands). A run an older worker picks up then lacks those values,
// as a run from before the change does, and replays either way.
const CurrentRevision = 2

// The change ids of every workflow.GetVersion gate in the package, one place to see what
// runs in flight may still do the old way. Each says what the old branch did. A change id is
// recorded in histories: never rename or reuse one. TestEveryVersionBranchHasARecordedHistory
// finds each gate by its constant here.
const (
	// RetryWorkflow looks up an earlier run's attempts (a local activity); runs that took
	// their first report before it never scheduled the look-up.
	changePriorAttempts = "continue-attempts-of-earlier-run"
	// RetryWorkflow decides under policy.RulesUnknownCapPerPolicy; runs that decided under
	// policy.RulesUnknownCapEverywhere keep deciding under them.
	changeUnknownCapPerPolicy = "unknown-cap-per-policy-and-socket-codes-in-reason"
	// An operator's retry from dead opens a new max window; runs retried before it count
	// the window from the first failure.
	changeRetryOpensWindow = "operator-retry-opens-a-new-window"
	// Reports pending when the quiet window ends are applied (takePendingReports); before
	// it, such a run closed as delivered and left the report unread.
	changeReportsWithQuietTimer = "apply-reports-pending-when-quiet-window-ends"
	// A keyless report behind the attempt, after the latest republish, counts as that
	// republish's failure; before it, it was set aside as stale and a consumer that never
	// copies the scheduler's headers lost its message.
	changeKeylessReportCounts = "keyless-report-behind-counts-as-latest-failure"
	// Republishes ask their destination's breaker and may be held; runs from before it
	// republish without asking and are never held.
	changeBreakerHoldsRetries = "breaker-holds-retries"
	// A first report the bridge deferred for its delay (Input.Deferred) is taken as due; a
	// worker from before it ran such a run as a fresh report, with the delay as a timer.
	changeDeferredStart = "first-report-held-by-bridge"
	// BreakerWorkflow ends after Settings.IdleEnd idle; runs from before it wait closed
	// without a timer for as long as they run.
	changeIdleEnd = "breaker-idle-end"
	// A dead message whose retention ends has its envelope archived (the ArchiveExpired
	// local activity, a no-op without EXPIRED_ARCHIVE_QUEUE); runs from before it closed as
	// expired without it.
	changeArchiveOnExpiry = "archive-envelope-on-expiry"
	// Search attributes write the consuming service, the last error type and a dead
	// message's dlqId and dlqUuid (findingAttributeUpdates); runs from before wrote none of
	// them.
	changeFindingAttributes = "finding-attributes"
	// A RetryWorkflow released as a probe tells its breaker when the probe fails
	// (SignalBreakerProbeFailed); runs from before it told nothing.
	changeProbeFailureReported = "probe-failure-reported-to-breaker"
	// BreakerWorkflow judges a half-open's probes by the failures their runs report,
	// reopening at the failure ratio; runs from before it reopened at any failure the
	// processes counted in the probe window, an older retry's included.
	changeHalfOpenJudgesProbes = "half-open-judges-probes-by-their-runs"
	// A report that carries the key of the retry a run holds counts as that retry's failure
	// (heldRetryWentOut); runs from before it set the report aside, and took the silence after
	// the release, which the consumer deduplicated, as delivered.
	changeHeldKeyReportCounts = "report-with-held-retrys-key-counts"
	// A report on which the bridge found no earlier run (message.FailureReport.Earlier with
	// no run ID) schedules no look-up of one (trustsNoEarlierRun); runs from before it
	// looked through visibility, as for any report that continues a count.
	changeNoEarlierRun = "no-look-up-when-bridge-found-no-earlier-run"
	// BreakerWorkflow places the dated buckets of an outcomes signal in its window by their
	// dates (BreakerOutcomes.Buckets), dropping those older than the window or than its last
	// transition; runs from before it counted every signal's totals in the second it
	// arrived, so a failure that arrived late was judged against another window's republishes.
	changeDatedOutcomes = "breaker-counts-outcomes-by-date"
)

// The release plan of the gates outside every revision, so that none costs runs longer than
// it must: changeProbeFailureReported and changeHeldKeyReportCounts join revision 3 in the
// release after the one that brought them, once every worker runs their gates. Neither is on
// the default path (a retry no breaker holds): until then a held retry records a marker per
// gate it reaches, a default retry none, which is the revision a new install runs and the
// bench measures. BreakerWorkflow's gates (changeIdleEnd, changeHalfOpenJudgesProbes,
// changeDatedOutcomes) stay outside revisions: a breaker is a long run per destination and
// records each marker once a run.
//
// changeNoEarlierRun joins revision 3 on the same terms: it too is off the default path,
// asked only of a report that continues a count and on which the bridge found no earlier
// run, which records its marker until then.

// revisionChanges lists, for each revision, the gated changes it takes without GetVersion.
var revisionChanges = [][]string{
	1: {changePriorAttempts, changeUnknownCapPerPolicy, changeRetryOpensWindow, changeReportsWithQuietTimer, changeBreakerHoldsRetries},
	// changeFindingAttributes joins in its own release (upsert values only, see
	// CurrentRevision): without it every new run recorded a marker and a visibility write.
	2: {changeKeylessReportCounts, changeDeferredStart, changeArchiveOnExpiry, changeFindingAttributes},
}

// includes reports whether this run's revision includes the gated change: its new branch is
// taken without a version marker.
func (r *retryRun) includes(changeID string) bool {
	for rev := 1; rev <= min(r.revision, len(revisionChanges)-1); rev++ {
		if slices.Contains(revisionChanges[rev], changeID) {
			return true
		}
	}
	return false
}
