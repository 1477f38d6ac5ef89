package workflows

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// priorAttemptsRuns counts the PriorAttempts local activities the run starts.
func (s *retrySuite) priorAttemptsRuns() *int {
	var n int
	s.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if info.ActivityType.Name == "PriorAttempts" {
			n++
		}
	})
	return &n
}

// continuedReport is a report that continues a count (two retries went out in an earlier
// run), with what the bridge found of that run; the run retries once more and exhausts.
func (s *retrySuite) continuedReport(earlier *message.EarlierRun) message.FailureReport {
	p := fixedPolicy(3)
	s.failAt(15*time.Second, p, 3, transient)
	r := report(p, 2, transient)
	r.Earlier = earlier
	return r
}

// A report on which the bridge found no earlier run schedules no look-up: the first workflow
// task does not wait on one. Asked at the current revision, the gate records its marker.
func (s *retrySuite) TestReportWithNoEarlierRunLooksNothingUp() {
	asked := s.askedVersions()
	looked := s.priorAttemptsRuns()
	s.hist.attempts = []message.Attempt{{Attempt: 1, Error: "first", Category: "transient"}}
	var st State
	s.queryAt(time.Second, &st)
	s.startAt(CurrentRevision, s.continuedReport(&message.EarlierRun{}))

	s.Equal(StatusExpired, s.result().Status)
	s.Zero(*looked, "no PriorAttempts local activity")
	s.Empty(s.hist.asked)
	s.Equal([]string{changeNoEarlierRun}, *asked)
	s.Require().Len(s.envelopes(), 1)
	s.Len(s.envelopes()[0].RetryAttempts, 2, "only this run's two")
	s.Equal(2, st.RetryCount, "the count continues from the report")
	s.Contains(details(st.Events), "no earlier run to carry attempts from: the count continues from the report")
}

// A worker from before the gate looked through visibility even on such a report (the gate's
// old branch); its history replays so.
func (s *retrySuite) TestReportWithNoEarlierRunOldBranchLooksUp() {
	s.env.OnGetVersion(changeNoEarlierRun, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	looked := s.priorAttemptsRuns()
	s.startAt(CurrentRevision, s.continuedReport(&message.EarlierRun{}))

	s.Equal(StatusExpired, s.result().Status)
	s.Equal(1, *looked)
	s.Equal([]string{""}, s.hist.asked, "the latest closed run, through visibility")
}

// The earlier run the bridge named is the one the look-up reads, once, and it asks no gate.
func (s *retrySuite) TestReportNamingItsEarlierRunPassesItToTheLookUp() {
	asked := s.askedVersions()
	looked := s.priorAttemptsRuns()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.hist.attempts = []message.Attempt{
		{Attempt: 1, Timestamp: t0, Error: "first", Category: "transient"},
		{Attempt: 2, Timestamp: t0.Add(time.Minute), Error: "second", Category: "transient"},
	}
	var st State
	s.queryAt(time.Second, &st)
	s.startAt(CurrentRevision, s.continuedReport(&message.EarlierRun{RunID: "run-1"}))

	s.Equal(StatusExpired, s.result().Status)
	s.Equal(1, *looked)
	s.Equal([]string{"run-1"}, s.hist.asked)
	s.Empty(*asked, "naming the run changes no command")
	s.Require().Len(s.envelopes(), 1)
	s.Len(s.envelopes()[0].RetryAttempts, 4, "the earlier run's two, this run's two")
	s.Contains(details(st.Events), "continues the earlier run run-1: 2 attempts carried over")
}

// A look-up that fails is tried once: it no longer holds the workflow task for retries (a
// report from an older bridge, whose earlier run visibility may not list yet).
func (s *retrySuite) TestFailedLookUpIsTriedOnce() {
	looked := s.priorAttemptsRuns()
	s.hist.err = errors.New("no earlier run: no closed run listed yet")
	var st State
	s.queryAt(time.Second, &st)
	s.startAt(CurrentRevision, s.continuedReport(nil))

	s.Equal(StatusExpired, s.result().Status)
	s.Equal(1, *looked, "one attempt")
	s.Equal([]string{""}, s.hist.asked)
	s.Len(s.pub.to(testQueue), 1, "the retry went out all the same")
	s.Contains(details(st.Events)[0], "attempts of the earlier run not found")
}

// details are the details of events, in order.
func details(events []Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Detail)
	}
	return out
}
