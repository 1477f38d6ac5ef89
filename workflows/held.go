package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// heldRecheck is how often a held retry asks its destination's breaker again, in case the
// release signal was missed (the breaker lists held retries through visibility, which lags).
const heldRecheck = time.Minute

// underBreaker says whether this run's republishes go through their destination's breaker.
func (r *retryRun) underBreaker() bool {
	return r.includes(changeBreakerHoldsRetries) ||
		workflow.GetVersion(r.ctx, changeBreakerHoldsRetries, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// breakerSettings are the policy's breaker settings for a republish, nil when the policy
// turns breakers off.
func (r *retryRun) breakerSettings() *policy.Breaker {
	b := r.state.Policy.Breaker
	if b.Disabled {
		return nil
	}
	return &b
}

// hold parks a retry its destination's breaker (in mode) holds: not counted as an attempt,
// still due at NextRetryAt, so the breaker can release the oldest first.
func (r *retryRun) hold(mode string) {
	s := &r.state
	s.Status = StatusHeld
	s.HeldBy = mode
	if !s.HeldSince.IsZero() {
		return // a recheck found it still held
	}
	s.HeldSince = workflow.Now(r.ctx)
	r.dropStaleReleases()
	r.event("held", "", "the destination's breaker is "+mode+": waiting for a release")
	workflow.GetLogger(r.ctx).Debug("retry held",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount+1, "breaker", mode, "outcome", "held")
	r.upsert()
}

// dropStaleReleases discards releases that came while the run was not held: a breaker that
// listed it again before its visibility caught up. Taking one later would skip the gate.
func (r *retryRun) dropStaleReleases() {
	var rel Release
	for r.releases.ReceiveAsync(&rel) {
		rel = Release{}
	}
}

// endHold ends a hold, if there was one: the time held moves the policy's window on.
func (r *retryRun) endHold() {
	s := &r.state
	if s.HeldSince.IsZero() {
		return
	}
	s.HeldFor += workflow.Now(r.ctx).Sub(s.HeldSince)
	s.HeldSince, s.HeldBy = time.Time{}, ""
}

// waitHeld waits for a release, the recheck, or an operator; failure reports are stale here
// (nothing of this message is out).
func (r *retryRun) waitHeld() {
	s := &r.state
	timerCtx, cancel := workflow.WithCancel(r.ctx)
	defer cancel()
	sel := workflow.NewSelector(r.ctx)
	sel.AddFuture(workflow.NewTimer(timerCtx, heldRecheck), func(workflow.Future) {
		if s.Status == StatusHeld {
			s.Status = StatusRepublishing
		}
	})
	sel.AddReceive(r.releases, func(c workflow.ReceiveChannel, _ bool) {
		var rel Release
		c.Receive(r.ctx, &rel)
		r.release(rel)
	})
	r.addReports(sel)
	r.addActionSignals(sel, r.retryNow, r.skip, r.resolve, r.discard)
	r.addActionUpdates(sel)
	sel.Select(r.ctx)
}

// release lets a held retry go: its republish skips the breaker's gate.
func (r *retryRun) release(rel Release) {
	by := rel.By
	if by == "" {
		by = "unknown"
	}
	detail := "released"
	if rel.Probe {
		detail = "released as a probe"
	}
	r.event("released", by, detail)
	r.released = true
	r.probe = rel.Probe
	r.state.Status = StatusRepublishing
}
