package workflows

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// heldRetries stands in for visibility and the held RetryWorkflows: ListHeld lists the held
// ones in order, and a release signal takes one off the list (as its run republishes).
type heldRetries struct {
	mu       sync.Mutex
	ids      []string
	sticky   bool // releases do not take a retry off the list (its probe failed again)
	err      error
	lists    []int
	released []releaseSeen
	now      func() time.Time
}

type releaseSeen struct {
	id  string
	rel Release
	at  time.Time
}

func (h *heldRetries) ListHeld(_ context.Context, _ string, limit int) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lists = append(h.lists, limit)
	if h.err != nil {
		return nil, h.err
	}
	return slices.Clone(h.ids[:min(limit, len(h.ids))]), nil
}

func (h *heldRetries) signal(_, id, _, _ string, arg any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.Index(h.ids, id)
	if i < 0 {
		return errors.New("workflow not found")
	}
	h.released = append(h.released, releaseSeen{id: id, rel: arg.(Release), at: h.now()})
	if !h.sticky {
		h.ids = slices.Delete(h.ids, i, i+1)
	}
	return nil
}

func (h *heldRetries) seen() []releaseSeen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.released)
}

type breakerSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env  *testsuite.TestWorkflowEnvironment
	held *heldRetries
	t0   time.Time
}

func TestBreakerWorkflow(t *testing.T) { suite.Run(t, new(breakerSuite)) }

func (s *breakerSuite) SetupTest() {
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	s.env = s.NewTestWorkflowEnvironment()
	s.t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.env.SetStartTime(s.t0)
	s.held = &heldRetries{now: s.env.Now}
	s.env.RegisterWorkflowWithOptions(BreakerWorkflow, workflow.RegisterOptions{Name: BreakerWorkflowName})
	s.env.RegisterActivity(&activities.Activities{Held: s.held})
	s.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, SignalRelease, mock.Anything).
		Return(s.held.signal)
}

// settings: open at half of 10 republishes in 30 s; probe 2 after 10 s, doubling to 25 s;
// judge them for 5 s; release 2 a second.
func testBreaker() policy.Breaker {
	return policy.Breaker{
		Window: 30 * time.Second, MinRepublishes: 10, FailureRatio: 0.5,
		Cooldown: 10 * time.Second, CooldownMax: 25 * time.Second,
		Probes: 2, ProbeWindow: 5 * time.Second, ReleaseRate: 2,
	}
}

func (s *breakerSuite) outcomesAt(d time.Duration, republished, failed int) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerOutcomes, BreakerOutcomes{Republished: republished, Failed: failed, Settings: testBreaker()})
	}, d)
}

// probeFailedAt reports, at d, that the probe of run id failed (as its run does).
func (s *breakerSuite) probeFailedAt(d time.Duration, id string) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerProbeFailed, ProbeFailure{WorkflowID: id, RetryKey: id + ":1"})
	}, d)
}

func (s *breakerSuite) stateAt(d time.Duration) *BreakerState {
	st := &BreakerState{}
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(QueryBreakerState)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(st))
	}, d)
	return st
}

// run runs the breaker until it is cancelled at end.
func (s *breakerSuite) run(end time.Duration, in BreakerInput) {
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, end)
	if in.Queue == "" {
		in.Queue = testQueue
	}
	s.env.ExecuteWorkflow(BreakerWorkflowName, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	var canceled *temporal.CanceledError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &canceled)
}

func (s *breakerSuite) transitions(st *BreakerState) []BreakerMode {
	var out []BreakerMode
	for _, e := range st.Events {
		out = append(out, e.To)
	}
	return out
}

func (s *breakerSuite) TestOpensWhenTheRatioIsReached() {
	s.outcomesAt(time.Second, 6, 2)
	s.outcomesAt(2*time.Second, 4, 3) // 10 republished, 5 failed: half
	closed := s.stateAt(1500 * time.Millisecond)
	open := s.stateAt(3 * time.Second)
	s.run(5*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerClosed, closed.Mode)
	s.Require().Len(closed.Window, 1)
	s.Equal(6, closed.Window[0].Republished)
	s.Equal(BreakerOpen, open.Mode)
	s.Equal(1, open.Opens)
	s.Equal(s.t0.Add(2*time.Second), open.Since.UTC())
	s.Equal([]BreakerMode{BreakerOpen}, s.transitions(open))
	s.Contains(open.Events[0].Detail, "5 of 10 republishes failed")
	s.Equal(ReleasedBy, open.Events[0].Actor)
	s.Empty(open.Window, "a transition starts the counts afresh")
}

func (s *breakerSuite) TestStaysClosedBelowMinRepublishesOrRatio() {
	s.outcomesAt(time.Second, 9, 9)      // every one failed, but only 9
	s.outcomesAt(40*time.Second, 9, 4)   // the 9 left the window: 4 of 9
	s.outcomesAt(41*time.Second, 1, 0)   // 4 of 10: below half
	s.outcomesAt(80*time.Second, 20, 10) // the window ran out: 10 of 20 opens it
	below := s.stateAt(79 * time.Second)
	after := s.stateAt(81 * time.Second)
	s.run(85*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerClosed, below.Mode)
	s.Empty(below.Events)
	s.Len(below.Window, 2, "buckets older than the window are dropped")
	s.Equal(BreakerOpen, after.Mode)
}

func (s *breakerSuite) TestCooldownDoublesAndIsCapped() {
	s.held.ids = []string{"retry/orders/a", "retry/orders/b", "retry/orders/c"}
	s.held.sticky = true
	s.outcomesAt(time.Second, 10, 10) // open at 1 s: probe at 11 s
	s.probeFailedAt(12*time.Second, "retry/orders/a")
	// reopened at 12 s (one of two probes failed): 20 s, probe at 32 s
	s.probeFailedAt(33*time.Second, "retry/orders/b")
	// reopened at 33 s: 40 s capped at 25 s, probe at 58 s
	s.probeFailedAt(59*time.Second, "retry/orders/a")
	st := s.stateAt(60 * time.Second)
	s.run(61*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerOpen},
		s.transitions(st))
	var halfOpenAt []time.Duration
	for _, e := range st.Events {
		if e.To == BreakerHalfOpen {
			halfOpenAt = append(halfOpenAt, e.At.Sub(s.t0))
		}
	}
	s.Equal([]time.Duration{11 * time.Second, 32 * time.Second, 58 * time.Second}, halfOpenAt)
	s.Equal(4, st.Opens)
	s.Require().NotNil(st.LastProbe)
	s.Equal("failed", st.LastProbe.Result)
	s.Equal(2, st.LastProbe.Released)
	s.Equal(1, st.LastProbe.Failed)
	probes := s.held.seen()
	s.Len(probes, 6, "two probes at each half-open")
	for _, p := range probes {
		s.True(p.rel.Probe)
		s.Equal(ReleasedBy, p.rel.By)
		s.Contains([]string{"retry/orders/a", "retry/orders/b"}, p.id, "the oldest are the probes")
	}
}

func (s *breakerSuite) TestPassedProbeClosesAndReleasesOldestFirstAtTheRate() {
	s.held.ids = []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7"}
	s.outcomesAt(time.Second, 10, 8) // open at 1 s, probes h1 h2 at 11 s, closed at 16 s
	half := s.stateAt(12 * time.Second)
	done := s.stateAt(30 * time.Second)
	s.run(31*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerHalfOpen, half.Mode)
	s.Require().NotNil(half.LastProbe)
	s.Equal(2, half.LastProbe.Released)
	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerClosed}, s.transitions(done))
	s.Equal("passed", done.LastProbe.Result)
	s.Equal(0, done.Opens)
	s.Equal(5, done.Released)
	s.False(done.Releasing, "every held retry was released")

	// The signals of one batch go out together; the test environment delivers them in any order.
	batches := map[time.Duration][]string{}
	for _, r := range s.held.seen() {
		at := r.at.Sub(s.t0)
		batches[at] = append(batches[at], r.id)
		slices.Sort(batches[at])
	}
	s.Equal(map[time.Duration][]string{
		11 * time.Second: {"h1", "h2"}, // the probes
		16 * time.Second: {"h3", "h4"}, // closed: two a second, oldest first
		17 * time.Second: {"h5", "h6"},
		18 * time.Second: {"h7"},
	}, batches)
}

// Failures the processes count while half-open do not judge the probes: they may be retries
// republished before the breaker opened.
func (s *breakerSuite) TestCountedFailuresDoNotJudgeTheProbes() {
	s.held.ids = []string{"h1", "h2", "h3"}
	s.outcomesAt(time.Second, 10, 8) // open at 1 s, probes h1 h2 at 11 s
	s.outcomesAt(12*time.Second, 0, 5)
	st := s.stateAt(20 * time.Second)
	s.run(21*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerClosed}, s.transitions(st))
	s.Equal("no probe failed within 5s", st.Events[2].Detail)
	s.Equal(s.t0.Add(16*time.Second), st.Events[2].At.UTC())
	s.Equal("passed", st.LastProbe.Result)
	s.Equal(0, st.LastProbe.Failed)
}

// The probes' runs report their failures: the half-open reopens once they reach the failure
// ratio, counting each probe once and no other run.
func (s *breakerSuite) TestProbeFailuresReopenAtTheRatio() {
	settings := testBreaker()
	settings.Probes = 3
	s.held.ids = []string{"h1", "h2", "h3", "h4"}
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerOutcomes, BreakerOutcomes{Republished: 10, Failed: 10, Settings: settings})
	}, time.Second) // open at 1 s, probes h1 h2 h3 at 11 s
	s.probeFailedAt(12*time.Second, "h1")
	s.probeFailedAt(12500*time.Millisecond, "h4") // not a probe
	s.probeFailedAt(13*time.Second, "h1")         // told twice
	one := s.stateAt(13500 * time.Millisecond)
	s.probeFailedAt(14*time.Second, "h2")
	st := s.stateAt(15 * time.Second)
	s.run(16*time.Second, BreakerInput{Settings: settings})

	s.Equal(BreakerHalfOpen, one.Mode, "one of three probes failed: below the ratio")
	s.Equal([]string{"h1"}, one.LastProbe.Failures)
	s.Equal([]string{"h1", "h2", "h3"}, one.LastProbe.Probes)
	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerOpen}, s.transitions(st))
	s.Equal("2 of 3 probes failed within the probe window", st.Events[2].Detail)
	s.Equal(s.t0.Add(14*time.Second), st.Since.UTC())
	s.Equal("failed", st.LastProbe.Result)
	s.Equal(2, st.LastProbe.Failed)
	s.Equal(2, st.Opens)
}

// A probe failure that comes after its half-open ended is not judged again.
func (s *breakerSuite) TestALateProbeFailureIsIgnored() {
	s.held.ids = []string{"h1", "h2", "h3"}
	s.outcomesAt(time.Second, 10, 8) // open at 1 s, probes h1 h2 at 11 s, closed at 16 s
	s.probeFailedAt(17*time.Second, "h1")
	st := s.stateAt(20 * time.Second)
	s.run(21*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerClosed}, s.transitions(st))
	s.Empty(st.LastProbe.Failures)
}

func (s *breakerSuite) TestNothingHeldToProbeCloses() {
	s.outcomesAt(time.Second, 10, 10)
	st := s.stateAt(20 * time.Second)
	s.run(21*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerClosed}, s.transitions(st))
	s.Equal("no held retry to probe", st.Events[1].Detail)
	s.Equal(s.t0.Add(11*time.Second), st.Since.UTC())
}

func (s *breakerSuite) TestAProbeThatCannotListStaysOpen() {
	s.held.err = errors.New("visibility unavailable")
	s.outcomesAt(time.Second, 10, 10)
	st := s.stateAt(20 * time.Second)
	s.run(21*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerOpen}, s.transitions(st), "no close on a guess")
	s.Contains(st.Events[1].Detail, "probe not started: list held retries")
	s.Equal(1, st.Opens, "the same cooldown again")
}

// breakerUpdate is one update's outcome.
type breakerUpdate struct {
	rejected error
	state    BreakerState
	err      error
}

func (s *breakerSuite) updateAt(d time.Duration, name string, a OperatorAction) *breakerUpdate {
	out := &breakerUpdate{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(name, name+"@"+d.String(), &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { out.rejected = err },
			OnComplete: func(v any, err error) {
				out.err = err
				if st, ok := v.(BreakerState); ok {
					out.state = st
				}
			},
		}, a)
	}, d)
	return out
}

func (s *breakerSuite) TestPauseAndResumeByUpdateAndSignalAreAudited() {
	s.held.ids = []string{"h1", "h2", "h3"}
	early := s.updateAt(time.Second, UpdateBreakerResume, OperatorAction{Actor: "mallory"})
	pause := s.updateAt(2*time.Second, UpdateBreakerPause, OperatorAction{Actor: "alice", Reason: "payments deploy"})
	again := s.updateAt(3*time.Second, UpdateBreakerPause, OperatorAction{Actor: "alice"})
	s.outcomesAt(4*time.Second, 10, 10) // counts do not move a paused breaker
	paused := s.stateAt(60 * time.Second)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerResume, OperatorAction{Actor: "bob", Reason: "deploy done"})
	}, 61*time.Second)
	resumed := s.stateAt(70 * time.Second)
	s.run(71*time.Second, BreakerInput{Settings: testBreaker()})

	var appErr *temporal.ApplicationError
	s.Require().ErrorAs(early.rejected, &appErr)
	s.Equal(ErrTypeIllegalAction, appErr.Type())
	s.Contains(appErr.Message(), "resume is allowed only while paused")
	s.Require().NoError(pause.rejected)
	s.Require().NoError(pause.err)
	s.Equal(BreakerPaused, pause.state.Mode, "the update answers the state after the pause")
	s.Require().NotNil(pause.state.PausedBy)
	s.Equal("alice", pause.state.PausedBy.Actor)
	s.Require().Error(again.rejected)

	s.Equal(BreakerPaused, paused.Mode)
	s.Equal([]BreakerMode{BreakerPaused}, s.transitions(paused))
	s.Equal("alice", paused.Events[0].Actor)
	s.Equal("payments deploy", paused.Events[0].Detail)

	s.Equal(BreakerClosed, resumed.Mode)
	s.Nil(resumed.PausedBy)
	last := resumed.Events[len(resumed.Events)-1]
	s.Equal("bob", last.Actor)
	s.Equal(BreakerClosed, last.To)
	s.Equal(3, resumed.Released)
	seen := s.held.seen()
	s.Len(seen, 3, "a resume releases the held retries")
	for _, r := range seen {
		s.False(r.rel.Probe)
		s.GreaterOrEqual(r.at.Sub(s.t0), 61*time.Second, "nothing is probed or released while paused")
	}
}

func (s *breakerSuite) TestRefusedSignalIsKeptAsAnEvent() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerResume, OperatorAction{})
	}, time.Second)
	st := s.stateAt(2 * time.Second)
	s.run(3*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal(BreakerClosed, st.Mode)
	s.Require().Len(st.Events, 1)
	s.Equal("unknown", st.Events[0].Actor)
	s.Contains(st.Events[0].Detail, "refused: ")
}

func (s *breakerSuite) TestPauseAbandonsAProbe() {
	s.held.ids = []string{"h1"}
	s.held.sticky = true
	s.outcomesAt(time.Second, 10, 10)
	s.updateAt(12*time.Second, UpdateBreakerPause, OperatorAction{Actor: "alice"})
	st := s.stateAt(40 * time.Second)
	s.run(41*time.Second, BreakerInput{Settings: testBreaker()})

	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerPaused}, s.transitions(st))
	s.Equal("abandoned", st.LastProbe.Result)
}

func (s *breakerSuite) TestContinuesAsNewWithItsState() {
	s.outcomesAt(time.Second, 3, 1)
	s.env.RegisterDelayedCallback(func() { s.env.SetCurrentHistoryLength(breakerMaxHistory) }, 2*time.Second)
	s.outcomesAt(3*time.Second, 2, 1)
	since := s.t0.Add(-5 * time.Second)
	s.env.ExecuteWorkflow(BreakerWorkflowName, BreakerInput{Queue: testQueue, Settings: testBreaker(),
		State: &BreakerState{Mode: BreakerClosed, Since: since, Events: []BreakerEvent{{At: since, To: BreakerClosed, Actor: "bob"}}}})

	s.Require().True(s.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &can)
	s.Equal(BreakerWorkflowName, can.WorkflowType.Name)
	var next BreakerInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Require().NotNil(next.State)
	s.Equal(testQueue, next.Queue)
	s.Equal(BreakerClosed, next.State.Mode)
	s.Equal(since, next.State.Since.UTC())
	s.Len(next.State.Events, 1)
	s.Require().Len(next.State.Window, 2, "the outcomes taken before continuing are carried")
	s.Equal(2, next.State.Window[1].Republished)
	s.Equal(testBreaker().WithDefaults(), next.Settings)
}

func (s *breakerSuite) TestACarriedOverOpenStateKeepsItsCooldown() {
	s.held.ids = []string{"h1"}
	// Opened twice, the second time 5 s before this run: 20 s of cooldown, 15 s left.
	in := BreakerInput{Settings: testBreaker(), State: &BreakerState{Mode: BreakerOpen, Since: s.t0.Add(-5 * time.Second), Opens: 2}}
	st := s.stateAt(16 * time.Second)
	s.run(17*time.Second, in)

	s.Equal(BreakerHalfOpen, st.Mode)
	s.Equal(s.t0.Add(15*time.Second), st.Since.UTC())
}

func TestBreakerActionRefusal(t *testing.T) {
	s := suite.Suite{}
	s.SetT(t)
	s.Empty(BreakerActionRefusal(SignalBreakerPause, BreakerOpen))
	s.Empty(BreakerActionRefusal(SignalBreakerResume, BreakerPaused))
	s.NotEmpty(BreakerActionRefusal(SignalBreakerPause, BreakerPaused))
	s.NotEmpty(BreakerActionRefusal(SignalBreakerResume, BreakerHalfOpen))
	s.Equal("bogus is not a breaker action", BreakerActionRefusal("bogus", BreakerClosed))
}

// A probe window that ends with failed probes below the ratio closes, saying how many failed.
func (s *breakerSuite) TestProbeFailuresBelowTheRatioClose() {
	settings := testBreaker()
	settings.Probes = 3
	s.held.ids = []string{"h1", "h2", "h3"}
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalBreakerOutcomes, BreakerOutcomes{Republished: 10, Failed: 10, Settings: settings})
	}, time.Second) // open at 1 s, probes at 11 s, judged until 16 s
	s.probeFailedAt(12*time.Second, "h2")
	st := s.stateAt(17 * time.Second)
	s.run(18*time.Second, BreakerInput{Settings: settings})

	s.Equal([]BreakerMode{BreakerOpen, BreakerHalfOpen, BreakerClosed}, s.transitions(st))
	s.Equal("1 of 3 probes failed within 5s, below the failure ratio", st.Events[2].Detail)
	s.Equal("passed", st.LastProbe.Result)
}
