package workflows

import (
	"sync"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// fakeGate stands in for a process's view of the breakers: it holds every destination while
// holding is set.
type fakeGate struct {
	mu      sync.Mutex
	holding bool
	asked   int
}

func (g *fakeGate) Holds(string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked++
	return string(BreakerOpen), g.holding
}

func (g *fakeGate) set(holding bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = holding
}

func (g *fakeGate) times() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.asked
}

// fakeCounter keeps the republishes counted towards the breakers.
type fakeCounter struct {
	mu     sync.Mutex
	counts []policy.Breaker
}

func (c *fakeCounter) Republished(_ string, settings policy.Breaker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = append(c.counts, settings)
}

func (c *fakeCounter) all() []policy.Breaker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]policy.Breaker(nil), c.counts...)
}

// defaultTestWorkflowID is the workflow ID the SDK's test environment gives a run.
const defaultTestWorkflowID = "default-test-workflow-id"

// breakerPolicy is fixedPolicy (a retry 10 s after each failure, 30 s quiet window) under a
// breaker.
func breakerPolicy(maxRetries int) policy.Policy {
	p := fixedPolicy(maxRetries)
	p.Breaker = policy.Breaker{Probes: 1}
	return p
}

func (s *retrySuite) TestHeldRetryWaitsForARelease() {
	s.gate.set(true)
	p := breakerPolicy(3)
	var held, out State
	s.queryAt(11*time.Second, &held)
	s.at(30*time.Second, SignalRelease, Release{Probe: true, By: "breaker"})
	s.queryAt(31*time.Second, &out)
	s.start(report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusHeld, held.Status)
	s.Equal(0, held.Sequence, "a held retry is not an attempt")
	s.Equal(0, held.RetryCount)
	s.Equal(held.FirstFailureAt.Add(10*time.Second), held.NextRetryAt, "it stays due when it was")
	s.Equal(held.NextRetryAt, held.HeldSince)
	s.Equal(string(BreakerOpen), held.HeldBy)
	s.Equal("held", held.Events[len(held.Events)-1].Kind)

	s.Equal(StatusAwaitingOutcome, out.Status)
	s.Equal(1, out.RetryCount)
	s.Equal(20*time.Second, out.HeldFor)
	s.True(out.HeldSince.IsZero())
	last := out.Events[len(out.Events)-1]
	s.Equal("released", last.Kind)
	s.Equal("breaker", last.Actor)
	s.Equal("released as a probe", last.Detail)

	got := s.pub.to(testQueue)
	s.Require().Len(got, 1, "released while the gate still holds")
	s.Equal(testID+":1", got[0].Msg.Headers[message.HeaderRetryKey])
	s.EqualValues(1, got[0].Msg.Headers[message.HeaderRetryCount])
	s.Equal(1, s.gate.times(), "a released retry does not ask the gate")
	s.Equal([]policy.Breaker{p.Breaker}, s.counter.all(), "the republish counts towards the breaker")
}

func (s *retrySuite) TestHeldRetryRechecksTheGate() {
	s.gate.set(true)
	s.env.RegisterDelayedCallback(func() { s.gate.set(false) }, 40*time.Second) // a release was missed
	var before, after State
	s.queryAt(69*time.Second, &before)
	s.queryAt(71*time.Second, &after)
	s.start(report(breakerPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusHeld, before.Status)
	s.Equal(StatusAwaitingOutcome, after.Status, "the recheck a minute after the hold found the breaker closed")
	s.Equal(2, s.gate.times())
	s.Len(s.pub.to(testQueue), 1)
}

func (s *retrySuite) TestReportsWhileHeldNeitherCountNorExhaust() {
	s.gate.set(true)
	p := breakerPolicy(1)
	s.failAt(20*time.Second, p, 0, transient) // a redelivered report
	var held State
	s.queryAt(9*time.Minute, &held)
	s.at(10*time.Minute, SignalRelease, Release{By: "breaker"})
	s.start(report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusHeld, held.Status, "still held after many rechecks")
	s.Equal(1, held.DuplicateReports)
	s.Equal(map[string]int{SetAsideRetryPending: 1}, held.SetAside)
	s.Len(held.Attempts, 1)
	s.Empty(s.envelopes())
	s.Len(s.pub.to(testQueue), 1)
}

func (s *retrySuite) TestRetryNowWhileHeldRepublishesAtOnce() {
	s.gate.set(true)
	u := s.updateAt(20*time.Second, UpdateRetryNow, OperatorAction{Actor: "carol"})
	s.start(report(breakerPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.rejected)
	s.NoError(u.err)
	s.Equal(StatusRepublishing, u.state.Status)
	s.Len(s.pub.to(testQueue), 1)
	s.Equal(1, s.gate.times(), "an operator's retry does not ask the gate")
}

func (s *retrySuite) TestSkipWhileHeldGoesToDead() {
	s.gate.set(true)
	s.at(20*time.Second, SignalSkip, OperatorAction{Actor: "dave", Reason: "payments is gone for good"})
	dead := s.startQueryingAt(21*time.Second, report(breakerPolicy(3), 0, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.assertDead(dead, CauseSkipped)
	s.Equal(10*time.Second, dead.HeldFor)
	s.Empty(s.pub.to(testQueue))
	s.Len(s.envelopes(), 1)
}

func (s *retrySuite) TestMaxWindowDoesNotRunWhileHeld() {
	s.gate.set(true)
	p := breakerPolicy(5)
	p.MaxWindow = 30 * time.Second
	s.env.RegisterDelayedCallback(func() { s.gate.set(false) }, 10*time.Minute)
	s.at(10*time.Minute, SignalRelease, Release{By: "breaker"})
	// 10 min 5 s after the first failure, but 9 min 50 s of it held: 15 s into the window.
	s.failAt(10*time.Minute+5*time.Second, p, 1, transient)
	st := s.startQueryingAt(10*time.Minute+6*time.Second, report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusScheduled, st.Status, "the window moved on by the time held")
	s.Equal(9*time.Minute+50*time.Second, st.HeldFor)
	s.Len(s.pub.to(testQueue), 2)
}

func (s *retrySuite) TestMaxWindowStillEndsWithoutAHold() {
	p := breakerPolicy(5)
	p.MaxWindow = 30 * time.Second
	s.failAt(25*time.Second, p, 1, transient) // retry at 35 s: past the window
	st := s.startQueryingAt(26*time.Second, report(p, 0, transient))

	s.result()
	s.assertDead(st, policy.CauseMaxWindow)
}

func (s *retrySuite) TestDisabledBreakerNeverHolds() {
	s.gate.set(true)
	p := breakerPolicy(3)
	p.Breaker.Disabled = true
	s.start(report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 1)
	s.Zero(s.gate.times())
	s.Empty(s.counter.all())
}

func (s *retrySuite) TestReleaseBeforeTheHoldIsDropped() {
	s.gate.set(true)
	s.at(5*time.Second, SignalRelease, Release{By: "breaker"}) // listed again while visibility lagged
	var held State
	s.queryAt(30*time.Second, &held)
	s.at(40*time.Second, SignalRelease, Release{By: "breaker"})
	s.start(report(breakerPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusHeld, held.Status, "a release from before the hold does not skip the gate")
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1)
}

func (s *retrySuite) TestHeldAgainAfterAFailedProbe() {
	s.gate.set(true)
	p := breakerPolicy(3)
	s.at(20*time.Second, SignalRelease, Release{Probe: true, By: "breaker"})
	s.failAt(25*time.Second, p, 1, transient) // the probe failed: retry due at 35 s, held again
	var again State
	s.queryAt(36*time.Second, &again)
	s.at(50*time.Second, SignalRelease, Release{By: "breaker"})
	s.start(report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusHeld, again.Status)
	s.Equal(1, again.RetryCount)
	s.Equal(1, again.Sequence)
	s.Equal(10*time.Second, again.HeldFor, "the first hold")
	got := s.pub.to(testQueue)
	s.Require().Len(got, 2)
	s.Equal(testID+":2", got[1].Msg.Headers[message.HeaderRetryKey], "the held attempt keeps its key")
	s.Equal(map[string][]ProbeFailure{message.BreakerWorkflowID(testQueue): {{WorkflowID: defaultTestWorkflowID, RetryKey: testID + ":1"}}},
		s.probeFailures, "the probe's failure, told its breaker once")
}

// A retry released by the breaker's close (not as a probe) that fails again tells the
// breaker nothing: the processes count it.
func (s *retrySuite) TestAReleasedRetryThatFailsIsNoProbeFailure() {
	s.gate.set(true)
	p := breakerPolicy(3)
	s.at(20*time.Second, SignalRelease, Release{By: "breaker"})
	s.failAt(25*time.Second, p, 1, transient)
	s.at(50*time.Second, SignalRelease, Release{By: "breaker"})
	s.start(report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 2)
	s.Empty(s.probeFailures)
}

// reportKeyedWhileHeld runs a message whose retry 1 is held: at 20 s comes a report of retry
// 1's failure with key, at 40 s the breaker's release. It asserts the message was delivered
// and returns the state at 21 s, just after the report.
func (s *retrySuite) reportKeyedWhileHeld(key string) *State {
	s.gate.set(true)
	p := breakerPolicy(3)
	r := report(p, 1, transient)
	r.RetryKey = key
	s.at(20*time.Second, SignalFailureReport, r)
	s.at(40*time.Second, SignalRelease, Release{By: "breaker"})
	after := s.startQueryingAt(21*time.Second, report(p, 0, transient))
	s.Equal(StatusDelivered, s.result().Status)
	return after
}

// A report that carries the key of the retry the run holds proves that retry went out (in a
// workflow task its worker never completed): it is that retry's failure, not a report to set
// aside, and the run goes on to the next retry rather than taking silence as delivered.
func (s *retrySuite) TestReportWithTheHeldRetrysKeyIsItsFailure() {
	after := s.reportKeyedWhileHeld(testID + ":1")

	s.Equal(StatusScheduled, after.Status, "the report ended the hold and scheduled retry 2")
	s.Equal(1, after.RetryCount)
	s.Equal(1, after.Sequence)
	s.Zero(after.DuplicateReports)
	s.Empty(after.SetAside)
	s.Require().Len(after.Attempts, 2)
	s.Equal(testID+":1", after.Attempts[0].RetryKey)
	s.Equal(10*time.Second, after.HeldFor)
	s.Contains(after.Events[len(after.Events)-1].Detail, "the key of the held retry")

	got := s.pub.to(testQueue)
	s.Require().Len(got, 1, "only retry 2 goes out: retry 1 went out before")
	s.Equal(testID+":2", got[0].Msg.Headers[message.HeaderRetryKey])
	s.EqualValues(2, got[0].Msg.Headers[message.HeaderRetryCount])
}

// A report that names another key than the held retry's is still set aside while held.
func (s *retrySuite) TestReportWithAnotherKeyWhileHeldIsSetAside() {
	after := s.reportKeyedWhileHeld(testID + ":7")

	s.Equal(StatusHeld, after.Status)
	s.Equal(map[string]int{SetAsideRetryPending: 1}, after.SetAside)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1)
	s.Equal(testID+":1", got[0].Msg.Headers[message.HeaderRetryKey])
}
