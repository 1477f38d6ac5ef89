package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Counting for ordinary errors: unknown errors are capped by the policy, not everywhere, and
// socket codes in the reason text are transient.

var (
	// socketHangUp is what a Node.js consumer reports for a reset connection: only a text.
	socketHangUp = policy.Failure{Reason: "ECONNRESET: socket hang up"}
	unknown500   = policy.Failure{HTTPStatus: 500, Reason: "internal error"}
)

// failEach reports the failure of every republish of fixedPolicy's timeline (a republish
// 10 s after each failure, failing 5 s later) up to retry n.
func (s *retrySuite) failEach(n int, p policy.Policy, f policy.Failure) {
	for i := 1; i <= n; i++ {
		s.failAt(time.Duration(15*i)*time.Second, p, i, f)
	}
}

func (s *retrySuite) TestSocketCodeInReasonIsTransient() {
	p := fixedPolicy(3)
	s.failEach(3, p, socketHangUp)
	dead := s.startQueryingAt(50*time.Second, report(p, 0, socketHangUp))

	s.Equal(StatusExpired, s.result().Status)
	s.Len(s.pub.to(testQueue), 3, "max_retries republishes, not the unknown cap")
	s.assertExhausted(dead, policy.Transient)
}

func (s *retrySuite) TestUnknownErrorUncappedWithoutAPolicyCap() {
	p := fixedPolicy(3) // like the default policy: no unknown_max_retries
	s.failEach(3, p, unknown500)
	dead := s.startQueryingAt(50*time.Second, report(p, 0, unknown500))

	s.result()
	s.Len(s.pub.to(testQueue), 3)
	s.assertExhausted(dead, policy.Unknown)
}

// A run whose history decided under the older rules (replay finds no version
// marker) keeps them: the reason text is unknown, capped at 2 under any policy.
func (s *retrySuite) TestOldRulesKeptByRunsThatStartedUnderThem() {
	s.env.OnGetVersion(changeUnknownCapPerPolicy, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	p := fixedPolicy(3)
	s.failEach(2, p, socketHangUp)
	dead := s.startQueryingAt(35*time.Second, report(p, 0, socketHangUp))

	s.result()
	s.Len(s.pub.to(testQueue), 2)
	s.assertExhausted(dead, policy.Unknown)
	s.Contains(dead.DeadDetail, "unknown errors get at most 2")
}

// The version is only asked for when the two rule sets disagree: a run of transient
// failures records no marker (no extra search-attribute write per message).
func TestDecideAsksForTheRulesOnlyWhenTheyDiffer(t *testing.T) {
	s := &State{WorkflowID: "w", Policy: fixedPolicy(3), FirstFailureAt: time.Unix(0, 0)}
	asked := 0
	pick := func() policy.Rules { asked++; return policy.RulesUnknownCapEverywhere }

	d := decide(s, report(fixedPolicy(3), 0, transient), time.Unix(1, 0), pick)
	require.True(t, d.Retry)
	require.Zero(t, asked, "agreeing rules need no version")

	d = decide(s, report(fixedPolicy(3), 0, socketHangUp), time.Unix(1, 0), pick)
	require.Equal(t, 1, asked)
	require.Equal(t, policy.Unknown, d.Category, "the picked (old) rules apply")

	s.Policy.UnknownMaxRetries = 2
	s.RetryCount = 2
	d = decide(s, report(s.Policy, 2, unknown500), time.Unix(1, 0), pick)
	require.Equal(t, 1, asked, "the tiers decide alike under both")
	require.Equal(t, policy.CauseExhausted, d.Cause)
}

// An operator's retry from dead starts a new max window.

// windowPolicy: retries 10 s after each failure, at most 2, inside a 25 s window.
func windowPolicy() policy.Policy {
	p := fixedPolicy(2)
	p.MaxWindow = 25 * time.Second
	return p
}

// deadThenRetried: republishes at 10 s and 25 s fail 5 s later, so the message is dead
// (exhausted) at 30 s; an operator retries at 100 s, long after the window, and the
// republish fails again at 105 s.
func (s *retrySuite) deadThenRetried(p policy.Policy) {
	s.failAt(15*time.Second, p, 1, transient)
	s.failAt(30*time.Second, p, 2, transient)
	s.at(100*time.Second, SignalRetryNow, OperatorAction{Actor: "carol", Reason: "payments fixed"})
	s.failAt(105*time.Second, p, 1, transient)
}

func (s *retrySuite) TestRetryFromDeadOpensANewWindow() {
	p := windowPolicy()
	s.deadThenRetried(p)
	var dead, again State
	s.queryAt(50*time.Second, &dead)
	s.queryAt(106*time.Second, &again)
	s.start(report(p, 0, transient))

	r := s.result()
	s.assertDead(&dead, policy.CauseExhausted)
	s.Equal(StatusScheduled, again.Status, "the failure after an operator's retry is retried, not dead")
	s.Equal(again.FirstFailureAt.Add(100*time.Second), again.WindowStart)
	s.Equal(again.FirstFailureAt.Add(115*time.Second), again.NextRetryAt)
	s.Equal(StatusDelivered, r.Status)
	s.Equal(2, r.RetryCount)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 4)
	s.EqualValues(2, got[3].Msg.Headers[message.HeaderRetryCount])
}

// The new window still closes: a failure whose retry would fall past it, counted from the
// operator's retry, is dead as max-window, and says so.
func (s *retrySuite) TestNewWindowStillCloses() {
	p := windowPolicy()
	p.MaxRetries = 5
	s.failAt(15*time.Second, p, 1, policy.Failure{Category: "permanent", Reason: "bad schema"})
	s.at(100*time.Second, SignalRetryNow, OperatorAction{Actor: "carol"})
	s.failAt(105*time.Second, p, 1, transient) // retry 2 at 115 s: inside
	s.failAt(120*time.Second, p, 2, transient) // retry 3 at 130 s: past 100 s + 25 s
	st := s.startQueryingAt(121*time.Second, report(p, 0, transient))

	s.result()
	s.assertDead(st, policy.CauseMaxWindow)
	s.Contains(st.DeadDetail, "after the operator's retry")
}

// A run whose history took the operator's retry before the change (no version marker)
// keeps counting the window from the first failure: dead again as max-window.
func (s *retrySuite) TestRetryFromDeadBeforeTheChangeKeepsTheFirstWindow() {
	s.env.OnGetVersion(changeRetryOpensWindow, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	p := windowPolicy()
	s.deadThenRetried(p)
	again := s.startQueryingAt(106*time.Second, report(p, 0, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.assertDead(again, policy.CauseMaxWindow)
	s.True(again.WindowStart.IsZero())
	s.Len(s.pub.to(testQueue), 3)
}

// The producer's event type is a search attribute when it has one, like the tenant.
func TestSearchAttributesCarryTheEventType(t *testing.T) {
	s := &State{Status: StatusScheduled}
	_, ok := temporal.NewSearchAttributes(searchAttributeUpdates(s)...).GetKeyword(SAEventType)
	require.False(t, ok, "no event type, no attribute")
	s.Message.EventType = "order.created"
	v, ok := temporal.NewSearchAttributes(searchAttributeUpdates(s)...).GetKeyword(SAEventType)
	require.True(t, ok)
	require.Equal(t, "order.created", v)
}

func (s *retrySuite) TestEventTypeIsUpserted() {
	first := report(fixedPolicy(1), 0, transient)
	first.Message.EventType = "order.created"
	var got []string
	s.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		v, _ := args.Get(0).(temporal.SearchAttributes).GetKeyword(SAEventType)
		got = append(got, v)
	}).Return(nil)
	s.start(first)

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal([]string{"order.created", "order.created", "order.created"}, got, "scheduled, awaiting-outcome, delivered")
}
