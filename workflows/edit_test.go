package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// updateWith sends update name with arg (built at d from the workflow clock) and keeps its
// outcome.
func (s *retrySuite) updateWith(d time.Duration, name string, arg func(now time.Time) any) *updateOutcome {
	out := &updateOutcome{}
	s.updates++ // one update id each: the test environment answers a repeated id once
	id := fmt.Sprintf("%s@%s#%d", name, d, s.updates)
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(name, id, out.callback(), arg(s.env.Now()))
	}, d)
	return out
}

func (s *retrySuite) editAt(d time.Duration, e EditRetry) *updateOutcome {
	return s.updateWith(d, UpdateEditRetry, func(time.Time) any { return e })
}

// snoozeAt snoozes at d until the workflow time then plus ahead.
func (s *retrySuite) snoozeAt(d, ahead time.Duration) *updateOutcome {
	return s.updateWith(d, UpdateSnooze, func(now time.Time) any {
		return Snooze{OperatorAction: OperatorAction{Actor: "ops", Reason: "partner down until noon"}, Until: now.Add(ahead)}
	})
}

// requireRejected says that u was refused by the validator with an error of errType whose
// message holds want.
func (s *retrySuite) requireRejected(u *updateOutcome, errType, want string) {
	s.False(u.accepted)
	s.Require().Error(u.rejected)
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(u.rejected, &appErr), "%v", u.rejected)
	s.Equal(errType, appErr.Type())
	s.Contains(appErr.Message(), want)
}

func (s *retrySuite) TestEditRetryFromDeadRepublishesTheEditedMessage() {
	old := report(fixedPolicy(0), 0, transient).Message.Payload
	u := s.editAt(time.Second, EditRetry{
		OperatorAction: OperatorAction{Actor: "ops", Reason: "fix the amount"},
		ReplacePayload: true, Payload: []byte(`{"order":43}`),
		ReplaceHeaders: true, Headers: map[string]any{"x-tenant": "globex", "x-fixed": true},
	})
	s.start(report(fixedPolicy(0), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.rejected)
	s.NoError(u.err)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1)
	s.Equal([]byte(`{"order":43}`), got[0].Msg.Body)
	s.Equal("globex", got[0].Msg.Headers["x-tenant"])
	s.Equal(true, got[0].Msg.Headers["x-fixed"])
	s.Equal(1, u.state.Resets, "an edit from dead resets the count as a retry does")
	s.Require().Len(u.state.Edits, 1)
	e := u.state.Edits[0]
	s.Equal("ops", e.Actor)
	s.Equal("fix the amount", e.Reason)
	s.Equal(message.DigestOf(old), *e.PayloadBefore)
	s.Equal(len(`{"order":43}`), e.PayloadAfter.Size)
	s.Equal([]string{"x-fixed", "x-tenant"}, e.HeadersSet)
	s.Empty(e.HeadersRemoved)
	kinds := map[string]string{}
	for _, ev := range u.state.Events {
		kinds[ev.Kind] = ev.Detail
	}
	s.Contains(kinds["edited"], "payload sha256 "+message.DigestOf(old).SHA256[:16])
	s.Contains(kinds, SignalRetryNow)
}

func (s *retrySuite) TestEditRetryWhileScheduledRemovesHeadersAndRetriesAtOnce() {
	u := s.editAt(2*time.Second, EditRetry{OperatorAction: OperatorAction{Actor: "ops"}, ReplaceHeaders: true})
	st := s.startQueryingAt(3*time.Second, report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.err)
	s.Equal(StatusAwaitingOutcome, st.Status, "republished at 2 s, long before the 10 s delay")
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1)
	s.NotContains(got[0].Msg.Headers, "x-tenant")
	s.Equal([]byte(`{"order":42}`), got[0].Msg.Body, "the payload is kept when not replaced")
	s.Equal([]string{"x-tenant"}, u.state.Edits[0].HeadersRemoved)
}

func (s *retrySuite) TestEditRetryToAnotherQueue() {
	u := s.editAt(time.Second, EditRetry{OperatorAction: OperatorAction{Actor: "ops"},
		Destination: &Destination{Queue: "orders.v2"}})
	s.start(report(fixedPolicy(0), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.err)
	s.Empty(s.pub.to(testQueue))
	s.Len(s.pub.to("orders.v2"), 1)
	s.Equal("orders.v2", u.state.Message.OriginalQueue)
	e := u.state.Edits[0]
	s.Equal(Destination{Queue: testQueue}, *e.DestinationBefore)
	s.Equal(Destination{Queue: "orders.v2"}, *e.DestinationAfter)
}

func (s *retrySuite) TestEditRetryThroughAnExchange() {
	u := s.editAt(time.Second, EditRetry{OperatorAction: OperatorAction{Actor: "ops"},
		Destination: &Destination{Queue: testQueue, Exchange: "orders.fanout", RoutingKey: "eu"}})
	s.start(report(fixedPolicy(0), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.err)
	got := s.pub.to("eu")
	s.Require().Len(got, 1)
	s.Equal("orders.fanout", got[0].Exchange)
}

func (s *retrySuite) TestEditRetryRefusals() {
	edits := []struct {
		name    string
		at      time.Duration
		e       EditRetry
		errType string
		want    string
	}{
		{"nothing to edit", time.Second, EditRetry{}, ErrTypeInvalidInput, "names none"},
		{"scheduler's header", time.Second, EditRetry{ReplaceHeaders: true, Headers: map[string]any{"X-Retry-Count": 9}},
			ErrTypeInvalidInput, `header "X-Retry-Count" is the scheduler's or the broker's own`},
		{"broker's header", time.Second, EditRetry{ReplaceHeaders: true, Headers: map[string]any{"x-death": "no"}},
			ErrTypeInvalidInput, `header "x-death"`},
		{"no queue", time.Second, EditRetry{Destination: &Destination{}}, ErrTypeInvalidInput, "destination.queue is empty"},
		{"exchange without key", time.Second, EditRetry{Destination: &Destination{Queue: "q", Exchange: "x"}},
			ErrTypeInvalidInput, "routing_key is empty"},
	}
	var us []*updateOutcome
	for _, c := range edits {
		us = append(us, s.editAt(c.at, c.e))
	}
	// After the retry at 10 s the message awaits its outcome: no retry, so no edit.
	late := s.editAt(15*time.Second, EditRetry{ReplacePayload: true, Payload: []byte("x")})
	st := s.startQueryingAt(9*time.Second, report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	for i, c := range edits {
		s.Run(c.name, func() { s.requireRejected(us[i], c.errType, c.want) })
	}
	s.requireRejected(late, ErrTypeIllegalAction, "the message is awaiting-outcome: retry-now is allowed only while scheduled or held or dead")
	s.Empty(st.Events, "a rejected edit leaves no trace")
	s.Empty(st.Edits)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1)
	s.Equal([]byte(`{"order":42}`), got[0].Msg.Body)
}

func (s *retrySuite) TestEditRetryOfAParkedDeliveryKeepsItsDestination() {
	u := s.editAt(time.Second, EditRetry{Destination: &Destination{Queue: "orders"}})
	d := s.updateAt(2*time.Second, UpdateDiscard, OperatorAction{Actor: "ops"})
	s.start(poisonReport(message.PoisonKindPoison, []byte("{not json")))

	s.Equal(StatusDiscarded, s.result().Status)
	s.requireRejected(u, ErrTypeInvalidInput, "ingress queue")
	s.NoError(d.err)
	s.Empty(s.pub.to("orders"))
}

func (s *retrySuite) TestSnoozeMovesTheScheduledRetry() {
	u := s.snoozeAt(2*time.Second, 5*time.Minute) // the retry was due at 10 s
	var before, after State
	var publishedBefore int
	s.env.RegisterDelayedCallback(func() { publishedBefore = len(s.pub.to(testQueue)) }, 5*time.Minute)
	s.queryAt(5*time.Minute, &before)
	s.queryAt(5*time.Minute+3*time.Second, &after)
	s.start(report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.err)
	s.Equal(StatusScheduled, u.state.Status)
	s.Equal(StatusScheduled, before.Status, "not retried before the snooze's time")
	s.Zero(publishedBefore)
	s.Equal(u.state.NextRetryAt, before.NextRetryAt)
	s.Equal(StatusAwaitingOutcome, after.Status, "retried at the snooze's time")
	s.Len(s.pub.to(testQueue), 1)
	last := u.state.Events[len(u.state.Events)-1]
	s.Equal("snoozed", last.Kind)
	s.Contains(last.Detail, "partner down until noon")
	s.Contains(last.Detail, "(was ")
}

func (s *retrySuite) TestSnoozeOfADeadMessageSchedulesItsRetry() {
	u := s.snoozeAt(time.Second, 30*time.Minute)
	before := s.startQueryingAt(30*time.Minute, report(fixedPolicy(0), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.NoError(u.err)
	s.Equal(StatusScheduled, before.Status)
	s.Equal(1, before.Resets)
	s.Empty(before.DeadReason)
	s.Len(s.pub.to(testQueue), 1)
}

func (s *retrySuite) TestSnoozeRefusals() {
	past := s.snoozeAt(time.Second, -time.Second)
	far := s.snoozeAt(time.Second, time.Hour+time.Second) // the retention is an hour
	late := s.snoozeAt(15*time.Second, time.Minute)       // awaiting the outcome of the 10 s retry
	st := s.startQueryingAt(9*time.Second, report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.requireRejected(past, ErrTypeInvalidInput, "is not in the future")
	s.requireRejected(far, ErrTypeInvalidInput, "beyond the dead-letter retention of 1h0m0s")
	s.requireRejected(late, ErrTypeIllegalAction, "the message is awaiting-outcome: snooze is allowed only while scheduled or dead")
	s.Empty(st.Events)
	s.Len(s.pub.to(testQueue), 1)
}
