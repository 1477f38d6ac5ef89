package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// runUntilEnd runs the breaker with a cancellation at limit as a backstop, and says whether
// it ended by itself (completed without error) and when.
func (s *breakerSuite) runUntilEnd(limit time.Duration, in BreakerInput) (ended bool, at time.Duration) {
	var endedAt time.Time
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, limit)
	if in.Queue == "" {
		in.Queue = testQueue
	}
	s.env.ExecuteWorkflow(BreakerWorkflowName, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	endedAt = s.env.Now()
	err := s.env.GetWorkflowError()
	if err == nil {
		return true, endedAt.Sub(s.t0)
	}
	var canceled *temporal.CanceledError
	s.Require().ErrorAs(err, &canceled)
	return false, endedAt.Sub(s.t0)
}

func (s *breakerSuite) TestIdleBreakerEnds() {
	s.outcomesAt(time.Second, 3, 1)
	st := s.stateAt(2 * time.Second)

	ended, at := s.runUntilEnd(5*time.Hour, BreakerInput{Settings: testBreaker()})

	s.True(ended, "a closed breaker with nothing reported ends")
	s.Equal(time.Second+policy.DefaultBreakerIdleEnd, at, "an idle end after the last report")
	s.Equal(s.t0.Add(time.Second), st.LastReport.UTC())
}

func (s *breakerSuite) TestIdleEndFromTheSettings() {
	b := testBreaker()
	b.IdleEnd = 10 * time.Minute
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerOutcomes, BreakerOutcomes{Republished: 1, Settings: b})
	}, time.Minute)

	ended, at := s.runUntilEnd(5*time.Hour, BreakerInput{Settings: b})

	s.True(ended)
	s.Equal(11*time.Minute, at)
}

func (s *breakerSuite) TestBreakerWithActivityDoesNotEnd() {
	for d := time.Second; d < 3*time.Hour; d += 50 * time.Minute {
		s.outcomesAt(d, 2, 0)
	}

	ended, at := s.runUntilEnd(3*time.Hour, BreakerInput{Settings: testBreaker()})

	s.False(ended, "reports every 50 min keep it running")
	s.Equal(3*time.Hour, at)
}

func (s *breakerSuite) TestHoldingBreakerDoesNotEnd() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerPause, OperatorAction{Actor: "ops", Reason: "maintenance"})
	}, time.Second)

	ended, _ := s.runUntilEnd(5*time.Hour, BreakerInput{Settings: testBreaker()})

	s.False(ended, "a paused breaker holds its destination: it never ends by itself")
}

func (s *breakerSuite) TestBreakerEndsIdleAfterItCloses() {
	s.outcomesAt(time.Second, 10, 10) // opens; with nothing held its probe at 11 s closes it

	ended, at := s.runUntilEnd(5*time.Hour, BreakerInput{Settings: testBreaker()})

	s.True(ended)
	s.Equal(11*time.Second+policy.DefaultBreakerIdleEnd, at, "idle from its close, not its last report")
}
