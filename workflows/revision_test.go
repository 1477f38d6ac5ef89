package workflows

import (
	"slices"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// askedVersions records the change ids the run asks GetVersion about (answering each with its
// new branch).
func (s *retrySuite) askedVersions() *[]string {
	var asked []string
	s.env.OnGetVersion(mock.Anything, workflow.DefaultVersion, 1).Run(func(args mock.Arguments) {
		asked = append(asked, args.String(0))
	}).Return(workflow.Version(1)).Maybe()
	return &asked
}

func (s *retrySuite) startAt(rev int, first message.FailureReport) {
	s.env.ExecuteWorkflow(RetryWorkflowName, Input{Report: &first, Retention: time.Hour, Revision: rev})
}

// A run started at the current revision takes every gated change of its revision without
// asking (no Version marker, no TemporalChangeVersion write for them), through a retry, an
// exhaustion, an operator's retry from dead and a report that continues an earlier run's
// count.
func (s *retrySuite) TestCurrentRevisionAsksNoVersion() {
	asked := s.askedVersions()
	p := windowPolicy()
	s.deadThenRetried(p)
	var again State
	s.queryAt(106*time.Second, &again)
	s.startAt(CurrentRevision, report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status, "retried in the window the operator's retry opened")
	s.Empty(*asked, "a run at the current revision asks no gate")
	// The new branches: the operator's retry opened a new window; the breaker was asked.
	s.False(again.WindowStart.IsZero())
	s.Len(s.pub.to(testQueue), 4)
	s.NotZero(s.gate.times(), "republishes went through the destination's breaker")
}

func (s *retrySuite) TestCurrentRevisionContinuesAnEarlierRunWithoutAsking() {
	asked := s.askedVersions()
	s.hist.attempts = []message.Attempt{{Attempt: 1, Error: "first", Category: "transient"}}
	p := fixedPolicy(3)
	s.failAt(15*time.Second, p, 3, transient)
	s.startAt(CurrentRevision, report(p, 2, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.Empty(*asked, "a run at the current revision asks no gate, the archive at expiry included")
	s.Require().Len(s.envelopes(), 1)
	s.Len(s.envelopes()[0].RetryAttempts, 3, "the earlier run's attempts were looked up")
}

// A run from before revisions (revision 0) still asks, so that its history replays.
func (s *retrySuite) TestRevisionZeroAsksAsBefore() {
	asked := s.askedVersions()
	s.start(report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Contains(*asked, changeBreakerHoldsRetries)
}

// Every change a revision includes is a gate of the source, once.
func (s *retrySuite) TestRevisionChangesAreGates() {
	gates := []string{changePriorAttempts, changeUnknownCapPerPolicy, changeRetryOpensWindow, changeReportsWithQuietTimer, changeBreakerHoldsRetries,
		changeKeylessReportCounts, changeDeferredStart, changeArchiveOnExpiry, changeFindingAttributes}
	var all []string
	for rev, ids := range revisionChanges {
		if rev == 0 {
			s.Empty(ids, "revision 0 takes no change without asking")
		}
		all = append(all, ids...)
	}
	s.Len(revisionChanges, CurrentRevision+1)
	for _, id := range all {
		s.Contains(gates, id)
	}
	slices.Sort(all)
	s.Len(slices.Compact(all), len(gates), "each gate in one revision")
}

// A first report the bridge held for its delay: the run takes it as reported at ReportedAt,
// so the retry is due at once and goes out in the first task, with no timer; the quiet
// window follows as usual. By signal-with-start too.
func (s *retrySuite) TestDeferredFirstReportRepublishesAtOnce() {
	for _, bySignal := range []bool{false, true} {
		s.SetupTest()
		first := report(fixedPolicy(3), 0, transient)
		first.ReportedAt = s.env.Now().Add(-10 * time.Second) // the policy's delay, waited by the bridge
		var after State
		// One second: far inside the policy's 10 s delay, and far beyond what the local
		// publish takes in real time (the test clock also moves with the wall clock).
		s.queryAt(time.Second, &after)
		in := Input{Retention: time.Hour, Revision: CurrentRevision, Deferred: true}
		if bySignal {
			s.at(0, SignalFailureReport, first)
		} else {
			in.Report = &first
		}
		s.env.ExecuteWorkflow(RetryWorkflowName, in)

		s.Equal(StatusDelivered, s.result().Status)
		s.Equal(StatusAwaitingOutcome, after.Status, "republished in the first task (signal: %v)", bySignal)
		s.Require().Len(after.Attempts, 1)
		s.Equal(first.ReportedAt.UTC(), after.Attempts[0].Timestamp.UTC(), "the failure counts from when the bridge received it")
		s.Len(s.pub.to(testQueue), 1)
	}
}

// A worker from before the change runs a held report as a fresh one (the version gate's old
// branch): the delay is waited again, as a timer.
func (s *retrySuite) TestDeferredFirstReportOldBranchWaitsTheDelay() {
	s.env.OnGetVersion(changeDeferredStart, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	first := report(fixedPolicy(3), 0, transient)
	first.ReportedAt = s.env.Now().Add(-10 * time.Second)
	var scheduled State
	s.queryAt(5*time.Second, &scheduled)
	s.env.ExecuteWorkflow(RetryWorkflowName, Input{Report: &first, Retention: time.Hour, Deferred: true})

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusScheduled, scheduled.Status)
	s.Len(s.pub.to(testQueue), 1)
}
