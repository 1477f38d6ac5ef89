package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
)

func (r *retryRun) waitScheduled() {
	s := &r.state
	timerCtx, cancel := workflow.WithCancel(r.ctx)
	defer cancel()
	fired := false
	timer := workflow.NewTimer(timerCtx, s.NextRetryAt.Sub(workflow.Now(r.ctx)))
	sel := workflow.NewSelector(r.ctx)
	sel.AddFuture(timer, func(workflow.Future) { fired = true })
	r.addReports(sel)
	r.addActionSignals(sel, r.retryNow, r.skip, r.resolve, r.discard)
	r.addActionUpdates(sel)
	sel.Select(r.ctx)
	if fired && s.Status == StatusScheduled {
		s.Status = StatusRepublishing
	}
}

// republish puts the message back on its queue as the next attempt, unless its destination's
// breaker holds it.
func (r *retryRun) republish() {
	s := &r.state
	s.Sequence++
	attempt := s.RetryCount + 1
	key := RetryKey(s.Message.MessageID, s.Sequence)
	in := activities.RepublishInput{Message: s.Message, Attempt: attempt, Key: key, ScheduledAt: s.NextRetryAt}
	if r.underBreaker() {
		in.Breaker, in.Released = r.breakerSettings(), r.released
		if !s.HeldSince.IsZero() {
			// A held retry is late on purpose: its lateness counts from when it was let go.
			in.ScheduledAt = workflow.Now(r.ctx)
		}
	}
	var acts *activities.Activities
	var res activities.RepublishResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(r.ctx, republishOptions), acts.Republish, in).Get(r.ctx, &res)
	if err != nil {
		cause, detail := CauseRepublishError, err.Error()
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			// The activity's own message; err.Error() repeats the whole wrapped chain.
			detail = appErr.Message()
			switch appErr.Type() {
			case activities.ErrTypeUnroutable:
				cause = CauseUnroutable
			case activities.ErrTypeUnpublishable:
				cause = CauseUnpublishable
			}
		}
		r.toDead(cause, detail)
		return
	}
	if res.Held {
		s.Sequence-- // nothing went out: the attempt and its key are still to come
		r.hold(res.HeldBy)
		return
	}
	r.probeKey = ""
	if r.probe {
		r.probeKey = key
	}
	r.sent(key, res.PublishedAt)
	r.upsert()
}

// sent records the next retry as gone out with key at publishedAt (zero when not known): any
// hold ends, and the run awaits that retry's outcome.
func (r *retryRun) sent(key string, publishedAt time.Time) {
	s := &r.state
	r.released, r.probe = false, false
	r.endHold()
	s.RetryCount++
	r.lastKey = key
	if n := len(s.Attempts); n > 0 {
		s.Attempts[n-1].RepublishedAt = publishedAt
		s.Attempts[n-1].RetryKey = key
	}
	s.NextRetryAt = time.Time{}
	s.Status = StatusAwaitingOutcome
}

// waitOutcome waits the quiet window: a new failure report continues the loop, silence
// means the consumer took the message.
func (r *retryRun) waitOutcome() {
	s := &r.state
	timerCtx, cancel := workflow.WithCancel(r.ctx)
	defer cancel()
	quiet := false
	sel := workflow.NewSelector(r.ctx)
	sel.AddFuture(workflow.NewTimer(timerCtx, s.Policy.QuietWindow), func(workflow.Future) { quiet = true })
	r.addReports(sel)
	r.addActionSignals(sel, r.retryNow, r.skip, r.resolve, r.discard)
	r.addActionUpdates(sel)
	sel.Select(r.ctx)
	if quiet && s.Status == StatusAwaitingOutcome && !r.takePendingReports() {
		s.Status = StatusDelivered
		workflow.GetLogger(r.ctx).Debug("retry delivered",
			"message_id", s.Message.MessageID, "attempt", s.RetryCount, "outcome", "delivered")
		r.upsert()
	}
}
