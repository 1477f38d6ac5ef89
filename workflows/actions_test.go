package workflows

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retry-scheduler/retry-scheduler/message"
)

func TestActionRefusalIsTheTable(t *testing.T) {
	statuses := []Status{StatusScheduled, StatusRepublishing, StatusAwaitingOutcome, StatusHeld, StatusDead,
		StatusDelivered, StatusResolved, StatusDiscarded, StatusExpired}
	legal := map[string][]Status{
		SignalRetryNow: {StatusScheduled, StatusHeld, StatusDead},
		SignalSkip:     {StatusScheduled, StatusHeld},
		SignalResolve:  {StatusDead},
		SignalDiscard:  {StatusDead},
	}
	for signal, in := range legal {
		for _, st := range statuses {
			why := ActionRefusal(signal, &State{Status: st})
			want := false
			for _, s := range in {
				want = want || s == st
			}
			if want {
				assert.Empty(t, why, "%s while %s", signal, st)
				continue
			}
			assert.Equal(t, "the message is "+string(st)+": "+signal+" is allowed only while "+statusList(in), why)
		}
	}
	assert.Len(t, LegalActions, len(legal), "the table has one row per operator signal")
	assert.NotEmpty(t, ActionRefusal("bogus", &State{Status: StatusDead}))
}

func TestActionRefusalOfATruncatedParkedItem(t *testing.T) {
	dead := State{Status: StatusDead, DeadLetterQueue: testDLQ, Message: message.Message{Payload: []byte("abc")},
		Poison: &message.Poison{Kind: message.PoisonKindOversize, Truncated: true, Size: 10, DLQID: "oversize-1"}}
	why := ActionRefusal(SignalRetryNow, &dead)
	assert.Contains(t, why, SignalRetryNow+" is not allowed: only the first 3 of the 10 bytes")
	assert.Empty(t, ActionRefusal(SignalDiscard, &dead), "a truncated item can still be discarded")
	assert.Empty(t, ActionRefusal(SignalResolve, &dead))
	dead.Poison.Truncated = false
	assert.Empty(t, ActionRefusal(SignalRetryNow, &dead), "a whole parked body can be retried")
}

func statusList(ss []Status) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " or "
		}
		out += string(s)
	}
	return out
}

// update sends an operator update at d and keeps its outcome: rejected by the validator
// (rejected), or completed with a state or an error.
type updateOutcome struct {
	accepted bool
	rejected error
	state    State
	err      error
}

// callback records the update's outcome in out.
func (out *updateOutcome) callback() *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnAccept: func() { out.accepted = true },
		OnReject: func(err error) { out.rejected = err },
		OnComplete: func(v any, err error) {
			out.err = err
			if st, ok := v.(State); ok {
				out.state = st
			}
		},
	}
}

func (s *retrySuite) updateAt(d time.Duration, name string, a OperatorAction) *updateOutcome {
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(name, name+"@"+d.String(), out.callback(), a)
	}, d)
	return out
}

func (s *retrySuite) TestUpdateSkipWhileScheduledAnswersTheDeadState() {
	u := s.updateAt(time.Second, UpdateSkip, OperatorAction{Actor: "ops", Reason: "smtp is gone"})
	s.updateAt(2*time.Second, UpdateDiscard, OperatorAction{Actor: "ops"})
	s.start(report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDiscarded, s.result().Status)
	s.True(u.accepted)
	s.NoError(u.rejected)
	s.NoError(u.err)
	s.Equal(StatusDead, u.state.Status, "the update's result is the state after the skip")
	s.Equal(CauseSkipped, u.state.DeadReason)
	s.Len(s.envelopes(), 1)
}

func (s *retrySuite) TestUpdateRetryNowFromDeadResetsCount() {
	u := s.updateAt(time.Second, UpdateRetryNow, OperatorAction{Actor: "ops"})
	s.start(report(fixedPolicy(0), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.rejected)
	s.NoError(u.err)
	s.Equal(StatusRepublishing, u.state.Status)
	s.Equal(1, u.state.Resets)
	s.Len(s.pub.to(testQueue), 1)
}

func (s *retrySuite) TestUpdateValidatorRefusesIllegalActionWithItsReason() {
	u := s.updateAt(time.Second, UpdateResolve, OperatorAction{Actor: "frank"})
	st := s.startQueryingAt(2*time.Second, report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.False(u.accepted)
	s.Require().Error(u.rejected)
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(u.rejected, &appErr), "%v", u.rejected)
	s.Equal(ErrTypeIllegalAction, appErr.Type())
	s.Contains(appErr.Message(), "the message is scheduled: resolve is allowed only while dead")
	s.Equal(StatusScheduled, st.Status)
	s.Empty(st.Events, "a rejected update leaves no trace in the state (nor in the history)")
}

func (s *retrySuite) TestUpdateValidatorRefusesRetryOfATruncatedParkedItem() {
	body := bytes.Repeat([]byte("x"), message.MaxPoisonPayloadBytes+1)
	u := s.updateAt(time.Second, UpdateRetryNow, OperatorAction{Actor: "ops"})
	d := s.updateAt(2*time.Second, UpdateDiscard, OperatorAction{Actor: "ops"})
	s.start(poisonReport(message.PoisonKindOversize, body))

	s.Equal(StatusDiscarded, s.result().Status)
	s.Empty(s.pub.all, "truncated bytes are never republished")
	s.Require().Error(u.rejected)
	s.Contains(u.rejected.Error(), SignalRetryNow+" is not allowed: only the first")
	s.NoError(d.err)
	s.Equal(StatusDiscarded, d.state.Status)
}
