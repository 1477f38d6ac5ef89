package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// actionRequest is one operator update on its way from its handler to the loop; the loop sets
// refusal (empty when applied) and done.
type actionRequest struct {
	signal  string
	action  OperatorAction
	refusal string
	done    bool
	// apply, when set, applies the request instead of act (an edit, a snooze): it returns
	// the refusal, "" when applied. name is then the update's, for a refusal at the run's end.
	apply func() string
	name  string
}

// updateValidator refuses an operator update that the table does not allow now, before it
// enters the history.
func (r *retryRun) updateValidator(signal string) func(workflow.Context, OperatorAction) error {
	return func(_ workflow.Context, _ OperatorAction) error {
		if why := ActionRefusal(signal, &r.state); why != "" {
			return temporal.NewNonRetryableApplicationError(why, ErrTypeIllegalAction, nil)
		}
		return nil
	}
}

// updateHandler hands an accepted operator update to the loop, which applies it as it
// applies the signal, and answers with the state after it. The loop refuses it still when
// the state changed between the validator and the loop (a report in the same task).
func (r *retryRun) updateHandler(signal string) func(workflow.Context, OperatorAction) (State, error) {
	return func(ctx workflow.Context, a OperatorAction) (State, error) {
		return r.awaitApplied(ctx, &actionRequest{signal: signal, action: a})
	}
}

// addActionUpdates adds the operator updates' channel: each is applied like its signal.
func (r *retryRun) addActionUpdates(sel workflow.Selector) {
	sel.AddReceive(r.actions, func(c workflow.ReceiveChannel, _ bool) {
		var req *actionRequest
		c.Receive(r.ctx, &req)
		if a := req.action; a.Actor == "" {
			req.action.Actor = "unknown"
		}
		if req.apply != nil {
			req.refusal = req.apply()
		} else {
			req.refusal = r.act(req.signal, req.action)
		}
		req.done = true
	})
}

// refusePendingActions refuses the operator updates still waiting when the run ends (accepted
// while it could, applied after it could not), so that no handler is left unfinished.
func (r *retryRun) refusePendingActions() {
	var req *actionRequest
	for r.actions.ReceiveAsync(&req) {
		if req.apply != nil {
			req.refusal = req.name + " is refused: the run ended (" + string(r.state.Status) + ")"
			req.done = true
			continue
		}
		req.refusal = ActionRefusal(req.signal, &r.state)
		if req.refusal == "" {
			req.refusal = req.signal + " is refused: the run ended"
		}
		req.done = true
	}
}

// addActionSignals adds the operator signal channels, in the order given (the order decides
// which of two signals in one task goes first, so each state keeps its own): each signal is
// applied or refused by act.
func (r *retryRun) addActionSignals(sel workflow.Selector, chans ...workflow.ReceiveChannel) {
	for _, ch := range chans {
		sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
			r.act(c.Name(), receiveAction(r.ctx, c))
		})
	}
}

// act applies operator action signal by a, or records it as refused and says why: the one
// place where an action changes the state, for the signals and the updates alike.
func (r *retryRun) act(signal string, a OperatorAction) string {
	s := &r.state
	if why := ActionRefusal(signal, s); why != "" {
		r.event("refused", a.Actor, why)
		return why
	}
	r.event(signal, a.Actor, a.Reason)
	switch {
	case signal == SignalRetryNow && (s.Status == StatusScheduled || s.Status == StatusHeld):
		s.Status = StatusRepublishing
		r.released = true
	case signal == SignalRetryNow && s.Status == StatusDead:
		r.retryFromDead(a)
		r.released = true
	case signal == SignalSkip:
		r.toDead(CauseSkipped, "skipped by "+a.Actor+": "+a.Reason)
	case signal == SignalResolve:
		s.Status = StatusResolved
		r.logClosed()
		r.upsert()
	case signal == SignalDiscard:
		s.Status = StatusDiscarded
		r.logClosed()
		r.upsert()
	}
	return ""
}

func receiveAction(ctx workflow.Context, c workflow.ReceiveChannel) OperatorAction {
	var a OperatorAction
	c.Receive(ctx, &a)
	if a.Actor == "" {
		a.Actor = "unknown"
	}
	return a
}

// retryFromDead applies an operator's retry of a dead message: the count starts again at 0,
// the republish is now, and so is the start of the policy's window.
func (r *retryRun) retryFromDead(a OperatorAction) {
	s := &r.state
	r.reopen(workflow.Now(r.ctx))
	s.Status = StatusRepublishing
	workflow.GetLogger(r.ctx).Debug("retry scheduled",
		"message_id", s.Message.MessageID, "attempt", 1, "next_retry_at", s.NextRetryAt,
		"actor", a.Actor, "outcome", "scheduled")
	r.upsert()
}

// reopen takes a dead message back for a retry at at: the count starts again at 0, and the
// policy's window opens at at.
func (r *retryRun) reopen(at time.Time) {
	s := &r.state
	s.Resets++
	s.RetryCount = 0
	s.DeadReason, s.DeadDetail, s.DeadAt = "", "", time.Time{}
	s.NextRetryAt = at
	if r.includes(changeRetryOpensWindow) || workflow.GetVersion(r.ctx, changeRetryOpensWindow, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		s.WindowStart = s.NextRetryAt
		s.HeldFor = 0 // held before the new window: not in it
	}
	r.count(MetricRetriesScheduled)
}

// addItemUpdates registers the updates that carry more than an OperatorAction (edit.go):
// each is validated before it enters the history and applied by the loop like the others.
func (r *retryRun) addItemUpdates() error {
	refuse := func(why, errType string) error {
		if why == "" {
			return nil
		}
		return temporal.NewNonRetryableApplicationError(why, errType, nil)
	}
	err := workflow.SetUpdateHandlerWithOptions(r.ctx, UpdateEditRetry,
		func(ctx workflow.Context, e EditRetry) (State, error) {
			return r.awaitApplied(ctx, &actionRequest{name: UpdateEditRetry, signal: SignalRetryNow, action: e.OperatorAction,
				apply: func() string { return r.editRetry(withActor(e)) }})
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, e EditRetry) error {
			return refuse(EditRefusal(&e, &r.state))
		}})
	if err != nil {
		return fmt.Errorf("register %s update: %w", UpdateEditRetry, err)
	}
	err = workflow.SetUpdateHandlerWithOptions(r.ctx, UpdateSnooze,
		func(ctx workflow.Context, n Snooze) (State, error) {
			if n.Actor == "" {
				n.Actor = "unknown"
			}
			return r.awaitApplied(ctx, &actionRequest{name: UpdateSnooze, action: n.OperatorAction,
				apply: func() string { return r.snooze(n) }})
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, n Snooze) error {
			return refuse(SnoozeRefusal(&n, &r.state, workflow.Now(ctx), r.retention))
		}})
	if err != nil {
		return fmt.Errorf("register %s update: %w", UpdateSnooze, err)
	}
	return nil
}

func withActor(e EditRetry) EditRetry {
	if e.Actor == "" {
		e.Actor = "unknown"
	}
	return e
}

// awaitApplied hands req to the loop and answers with the state after it, or its refusal.
func (r *retryRun) awaitApplied(ctx workflow.Context, req *actionRequest) (State, error) {
	r.actions.Send(ctx, req)
	if err := workflow.Await(ctx, func() bool { return req.done }); err != nil {
		return State{}, err
	}
	if req.refusal != "" {
		return r.state, temporal.NewNonRetryableApplicationError(req.refusal, ErrTypeIllegalAction, nil)
	}
	return r.state, nil
}
