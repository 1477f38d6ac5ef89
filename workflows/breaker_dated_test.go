package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// datedAt signals, at d, outcomes in dated buckets (offsets from the start), with their
// totals, as a counter reports them.
func (s *breakerSuite) datedAt(d time.Duration, buckets ...BreakerBucket) {
	o := BreakerOutcomes{Buckets: buckets, Settings: testBreaker()}
	for _, b := range buckets {
		o.Republished += b.Republished
		o.Failed += b.Failed
	}
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(SignalBreakerOutcomes, o) }, d)
}

// bucket is a report's bucket dated at offset from the start.
func (s *breakerSuite) bucket(offset time.Duration, republished, failed int) BreakerBucket {
	return BreakerBucket{At: s.t0.Add(offset), Republished: republished, Failed: failed}
}

// Failures of retries republished in an earlier window, arriving late (an ingress backlog, a
// Temporal that lags), are judged with their own window, which has passed: they do not open
// the breaker against the republishes of the window they arrive in. Counted at arrival, as
// before dated outcomes, the same failures open it.
func (s *breakerSuite) TestLateFailuresOfAnEarlierWindowDoNotOpen() {
	s.datedAt(time.Second, s.bucket(500*time.Millisecond, 20, 0))
	s.datedAt(33*time.Second, s.bucket(32*time.Second, 20, 0))
	s.datedAt(35*time.Second, s.bucket(34*time.Second, 0, 2), s.bucket(500*time.Millisecond, 0, 15)) // 15 of them 34 s late
	st := s.stateAt(36 * time.Second)
	s.run(40*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerClosed, st.Mode, "2 of 20 failed in the window: the 15 late ones answer the first window's")
	s.Empty(st.Events)
	s.Equal([]BreakerBucket{s.bucket(32*time.Second, 20, 0), s.bucket(34*time.Second, 0, 2)}, utc(st.Window))
}

// The old branch (a run from before changeDatedOutcomes) counts even a dated signal at its
// arrival: the late failures open it, as they did.
func (s *breakerSuite) TestARunFromBeforeDatedOutcomesCountsAtArrival() {
	s.env.OnGetVersion(changeDatedOutcomes, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	s.datedAt(time.Second, s.bucket(500*time.Millisecond, 20, 0))
	s.datedAt(33*time.Second, s.bucket(32*time.Second, 20, 0))
	s.datedAt(35*time.Second, s.bucket(34*time.Second, 0, 2), s.bucket(500*time.Millisecond, 0, 15))
	st := s.stateAt(36 * time.Second)
	s.run(40*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen}, s.transitions(st))
	s.Equal("17 of 20 republishes failed within 30s", st.Events[0].Detail)
}

// Failures that answer republishes of the current window still open the breaker, however
// late within the window they arrive, and are placed with those republishes.
func (s *breakerSuite) TestLateFailuresOfTheCurrentWindowStillOpen() {
	s.datedAt(time.Second, s.bucket(200*time.Millisecond, 8, 0), s.bucket(800*time.Millisecond, 4, 0))
	s.datedAt(10*time.Second, s.bucket(9*time.Second, 0, 1))
	before := s.stateAt(20 * time.Second)
	s.datedAt(25*time.Second, s.bucket(500*time.Millisecond, 0, 5)) // 24.5 s late, within the window
	st := s.stateAt(26 * time.Second)
	s.run(30*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerClosed, before.Mode)
	s.Equal([]BreakerBucket{s.bucket(0, 12, 0), s.bucket(9*time.Second, 0, 1)}, utc(before.Window),
		"one bucket a second, by date")
	s.Equal([]BreakerMode{BreakerOpen}, s.transitions(st))
	s.Equal("6 of 12 republishes failed within 30s", st.Events[0].Detail)
	s.Equal(s.t0.Add(25*time.Second), st.Since.UTC())
}

// A signal without dates, from a process from before them, is counted at its arrival: the
// late failures open the breaker, as they always did.
func (s *breakerSuite) TestAnUndatedSignalIsCountedAtArrival() {
	s.outcomesAt(time.Second, 20, 0)
	s.outcomesAt(33*time.Second, 20, 0)
	s.outcomesAt(35*time.Second, 0, 17)
	st := s.stateAt(36 * time.Second)
	s.run(40*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen}, s.transitions(st))
	s.Equal("17 of 20 republishes failed within 30s", st.Events[0].Detail)
}

// A bucket dated ahead of the breaker's clock (a process's clock ahead) counts in the current
// second; one older than the window is dropped on arrival.
func (s *breakerSuite) TestDatesOutsideTheWindowAreBounded() {
	s.datedAt(40*time.Second, s.bucket(time.Hour, 4, 1), s.bucket(5*time.Second, 9, 9), s.bucket(10*time.Second, 0, 0))
	st := s.stateAt(41 * time.Second)
	s.run(45*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerClosed, st.Mode)
	s.Equal([]BreakerBucket{s.bucket(40*time.Second, 4, 1)}, utc(st.Window))
}

// Failures dated before the breaker last changed state answer republishes its window no
// longer holds (it starts afresh at each transition): after a close, a burst of them does not
// reopen it against the releases' republishes.
func (s *breakerSuite) TestFailuresFromBeforeTheLastTransitionAreDropped() {
	s.held.ids = []string{"h1", "h2"}
	s.datedAt(time.Second, s.bucket(500*time.Millisecond, 10, 8)) // open at 1 s, probes at 11 s, closed at 16 s
	s.datedAt(18*time.Second, s.bucket(16500*time.Millisecond, 10, 0), s.bucket(8*time.Second, 0, 10))
	st := s.stateAt(19 * time.Second)
	s.run(20*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerClosed}, s.transitions(st))
	s.Equal([]BreakerBucket{s.bucket(16*time.Second, 10, 0)}, utc(st.Window))
}

// A breaker that never changed state counts what went out before its first report started
// it: the counter's first flush comes up to an interval after the republishes.
func (s *breakerSuite) TestANewBreakerCountsWhatCameBeforeItsStart() {
	s.env.SetStartTime(s.t0.Add(2 * time.Second))
	s.datedAt(0, s.bucket(500*time.Millisecond, 10, 0), s.bucket(1500*time.Millisecond, 0, 5))
	st := s.stateAt(time.Second)
	s.run(5*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen}, s.transitions(st))
	s.Equal("5 of 10 republishes failed within 30s", st.Events[0].Detail)
}

// A refused operator action is an event, not a transition: the breaker still counts what
// went out before its start.
func (s *breakerSuite) TestARefusalIsNoTransitionForTheDates() {
	s.env.SetStartTime(s.t0.Add(2 * time.Second))
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerResume, OperatorAction{Actor: "op", Reason: "early"})
	}, 0)
	s.datedAt(time.Second, s.bucket(500*time.Millisecond, 10, 0), s.bucket(1500*time.Millisecond, 0, 5))
	st := s.stateAt(2 * time.Second)
	s.run(5*time.Second, BreakerInput{Settings: testBreaker()})

	s.Require().Len(st.Events, 2)
	s.Contains(st.Events[0].Detail, "refused: ")
	s.Equal("5 of 10 republishes failed within 30s", st.Events[1].Detail)
}

// utc is w with its dates in UTC, to compare with the tests' buckets.
func utc(w []BreakerBucket) []BreakerBucket {
	out := make([]BreakerBucket, len(w))
	for i, b := range w {
		b.At = b.At.UTC()
		out[i] = b
	}
	return out
}
