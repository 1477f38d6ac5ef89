package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
)

// breakerMaxHistory is the history length at which a breaker continues as new: it runs for as
// long as its destination exists, and a history that grows without end slows every replay.
const breakerMaxHistory = 5000

// breakerReleaseEvery is the pace of releases on close and resume: Settings.ReleaseRate
// retries each time.
const breakerReleaseEvery = time.Second

// ReleasedBy is the Release.By of the breaker's own releases.
const ReleasedBy = "breaker"

var listHeldOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
}

// BreakerWorkflow is one destination's circuit breaker. Closed, it counts the republishes of
// retries to the destination and their failures (reported in batches by the processes) over
// a sliding window, and opens when too many fail. Open, the processes hold the destination's
// retries (they list the breakers that hold by SABreakerState); after a cooldown it releases
// a few held retries as probes (half-open), and their outcome closes or reopens it. On close
// (and on an operator's resume) it releases the held retries, oldest first, at the release
// rate. It continues as new when its history grows long, and ends once it has been closed
// with nothing reported for Settings.IdleEnd (the next report starts it again, closed).
func BreakerWorkflow(ctx workflow.Context, in BreakerInput) error {
	b := newBreakerRun(ctx, in)
	if err := b.setup(); err != nil {
		return err
	}
	b.upsert()
	return b.run()
}

// run is the breaker's loop, until it is cancelled, continues as new or ends.
func (b *breakerRun) run() error {
	for {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		if b.longHistory() {
			return b.continueAsNew()
		}
		if b.step() {
			return b.end()
		}
	}
}

// breakerRun is one execution of a breaker: its state and channels.
type breakerRun struct {
	ctx workflow.Context
	st  BreakerState

	outcomes, probeFailures, pauses, resumes workflow.ReceiveChannel
	// actions carries the operator updates (*breakerActionRequest) to the loop.
	actions workflow.Channel

	// timer is the pending timer of the current wait, kept across waits with the same
	// deadline so that each batch of outcomes does not restart it.
	timer *deadlineTimer
	// nextRelease is when the next batch of releases may go.
	nextRelease time.Time
	// recent are the last batches released: visibility may still list them as held.
	recent [][]string
}

type deadlineTimer struct {
	at     time.Time
	fired  workflow.Future
	cancel workflow.CancelFunc
}

func newBreakerRun(ctx workflow.Context, in BreakerInput) *breakerRun {
	b := &breakerRun{ctx: ctx}
	if in.State != nil {
		b.st = *in.State
	} else {
		b.st = BreakerState{Mode: BreakerClosed, Since: workflow.Now(ctx)}
	}
	b.st.Queue = in.Queue
	b.st.Settings = in.Settings.WithDefaults()
	return b
}

func (b *breakerRun) setup() error {
	b.outcomes = workflow.GetSignalChannel(b.ctx, SignalBreakerOutcomes)
	b.probeFailures = workflow.GetSignalChannel(b.ctx, SignalBreakerProbeFailed)
	b.pauses = workflow.GetSignalChannel(b.ctx, SignalBreakerPause)
	b.resumes = workflow.GetSignalChannel(b.ctx, SignalBreakerResume)
	b.actions = workflow.NewChannel(b.ctx)
	if err := workflow.SetQueryHandler(b.ctx, QueryBreakerState, func() (BreakerState, error) { return b.st, nil }); err != nil {
		return fmt.Errorf("register %s query: %w", QueryBreakerState, err)
	}
	for _, u := range []struct{ update, signal string }{
		{UpdateBreakerPause, SignalBreakerPause},
		{UpdateBreakerResume, SignalBreakerResume},
	} {
		if err := workflow.SetUpdateHandlerWithOptions(b.ctx, u.update, b.updateHandler(u.signal),
			workflow.UpdateHandlerOptions{Validator: b.updateValidator(u.signal)}); err != nil {
			return fmt.Errorf("register %s update: %w", u.update, err)
		}
	}
	return nil
}

// step waits for what the current mode waits for and applies it; ended says the breaker has
// been idle long enough to end.
func (b *breakerRun) step() (ended bool) {
	now := workflow.Now(b.ctx)
	switch b.st.Mode {
	case BreakerOpen:
		if at := b.st.Since.Add(b.cooldown()); now.Before(at) {
			b.wait(at)
			return
		}
		b.probe()
	case BreakerHalfOpen:
		if b.st.LastProbe == nil { // no probe to judge (a state carried over by hand)
			b.close(ReleasedBy, "no probe to judge")
			return
		}
		if at := b.st.LastProbe.At.Add(b.st.Settings.ProbeWindow); now.Before(at) {
			b.wait(at)
			return
		}
		b.st.LastProbe.Result = "passed"
		detail := "no probe failed within " + b.st.Settings.ProbeWindow.String()
		if p := b.st.LastProbe; p.Failed > 0 {
			detail = fmt.Sprintf("%d of %d probes failed within %s, below the failure ratio", p.Failed, p.Released, b.st.Settings.ProbeWindow)
		}
		b.close(ReleasedBy, detail)
	case BreakerClosed:
		if !b.st.Releasing {
			return b.waitIdle()
		}
		if now.Before(b.nextRelease) {
			b.wait(b.nextRelease)
			return
		}
		b.releaseBatch()
	default: // paused
		b.wait(time.Time{})
	}
	return false
}

// waitIdle waits, closed and releasing nothing, for an input or until the breaker has been
// idle for Settings.IdleEnd, and says whether it has.
func (b *breakerRun) waitIdle() (ended bool) {
	if workflow.GetVersion(b.ctx, changeIdleEnd, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		b.wait(time.Time{})
		return false
	}
	at := b.idleSince().Add(b.st.Settings.IdleEnd)
	if workflow.Now(b.ctx).Before(at) {
		b.wait(at)
		return false
	}
	return true
}

// idleSince is when the breaker last changed state or was reported to.
func (b *breakerRun) idleSince() time.Time {
	if b.st.LastReport.After(b.st.Since) {
		return b.st.LastReport
	}
	return b.st.Since
}

// end completes an idle breaker, unless an input is already waiting (a report, an operator's
// action): that is applied instead and the breaker runs on. Once it has ended, the processes'
// next report for the destination starts a new run (signal-with-start), closed.
func (b *breakerRun) end() error {
	before := b.idleSince()
	b.takePending()
	if err := workflow.Await(b.ctx, func() bool { return workflow.AllHandlersFinished(b.ctx) }); err != nil {
		return err
	}
	if b.st.Mode != BreakerClosed || b.st.Releasing || !b.idleSince().Equal(before) {
		return b.run()
	}
	if b.timer != nil {
		b.timer.cancel()
	}
	workflow.GetLogger(b.ctx).Info("breaker ends: idle", "queue", b.st.Queue, "idle_since", before, "idle_end", b.st.Settings.IdleEnd)
	return nil
}

// cooldown is the wait from open to half-open: Cooldown, doubled with each reopening since
// the breaker last closed, capped at CooldownMax (policy.Breaker.CooldownAt).
func (b *breakerRun) cooldown() time.Duration {
	return b.st.Settings.CooldownAt(b.st.Opens)
}

// wait blocks until an outcome, an operator action or a cancellation arrives, or until at
// (none when zero), and applies what arrived.
func (b *breakerRun) wait(at time.Time) {
	sel := workflow.NewSelector(b.ctx)
	if f := b.timerUntil(at); f != nil {
		sel.AddFuture(f, func(workflow.Future) {})
	}
	b.addInputs(sel)
	sel.AddReceive(b.ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	sel.Select(b.ctx)
}

// timerUntil is a timer that fires at at: the pending one when it has that deadline, else a
// new one (cancelling the pending one). Nil when at is zero.
func (b *breakerRun) timerUntil(at time.Time) workflow.Future {
	if t := b.timer; t != nil {
		if t.at.Equal(at) && !t.fired.IsReady() {
			return t.fired
		}
		t.cancel()
		b.timer = nil
	}
	if at.IsZero() {
		return nil
	}
	ctx, cancel := workflow.WithCancel(b.ctx)
	b.timer = &deadlineTimer{at: at, fired: workflow.NewTimer(ctx, at.Sub(workflow.Now(b.ctx))), cancel: cancel}
	return b.timer.fired
}

// addInputs adds the outcome and operator channels to sel.
func (b *breakerRun) addInputs(sel workflow.Selector) {
	sel.AddReceive(b.outcomes, func(c workflow.ReceiveChannel, _ bool) {
		var o BreakerOutcomes
		c.Receive(b.ctx, &o)
		b.outcome(o)
	})
	sel.AddReceive(b.probeFailures, func(c workflow.ReceiveChannel, _ bool) {
		var f ProbeFailure
		c.Receive(b.ctx, &f)
		b.probeFailed(f)
	})
	for _, ch := range []workflow.ReceiveChannel{b.pauses, b.resumes} {
		sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
			b.act(c.Name(), receiveAction(b.ctx, c))
		})
	}
	sel.AddReceive(b.actions, func(c workflow.ReceiveChannel, _ bool) {
		var req *breakerActionRequest
		c.Receive(b.ctx, &req)
		b.answer(req)
	})
}

// outcome applies one process's counts: the latest settings, and in closed the window (which
// may open it). In half-open the probes' runs report their failures (probeFailed): a failure
// counted now may be a retry's republished before the breaker opened, which says nothing of
// the destination now; runs from before that change judged the probes by these counts (a
// failure reopened it).
func (b *breakerRun) outcome(o BreakerOutcomes) {
	b.st.Settings = o.Settings.WithDefaults()
	b.st.LastReport = workflow.Now(b.ctx)
	switch b.st.Mode {
	case BreakerClosed:
		b.count(o)
		if rep, failed, trips := b.trips(); trips {
			b.st.Opens = 1
			b.open(fmt.Sprintf("%d of %d republishes failed within %s", failed, rep, b.st.Settings.Window))
		}
	case BreakerHalfOpen:
		if o.Failed == 0 || b.judgesProbesByTheirRuns() {
			return
		}
		b.st.LastProbe.Failed += o.Failed
		b.st.LastProbe.Result = "failed"
		b.st.Opens++
		b.open(fmt.Sprintf("%d failed within the probe window", b.st.LastProbe.Failed))
	}
}

// judgesProbesByTheirRuns says whether this run judges a half-open's probes by the failures
// their runs report rather than by the failures the processes count.
func (b *breakerRun) judgesProbesByTheirRuns() bool {
	return workflow.GetVersion(b.ctx, changeHalfOpenJudgesProbes, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// probeFailed applies a probe's failure, reported by its run: the half-open reopens once its
// probes fail at the breaker's failure ratio (one of one, two of three, …). A failure that is
// not of the current probes' (late, or a run released by hand) is ignored.
func (b *breakerRun) probeFailed(f ProbeFailure) {
	p := b.st.LastProbe
	if b.st.Mode != BreakerHalfOpen || p == nil || !slices.Contains(p.Probes, f.WorkflowID) || slices.Contains(p.Failures, f.WorkflowID) {
		return
	}
	if !b.judgesProbesByTheirRuns() {
		return
	}
	p.Failures = append(p.Failures, f.WorkflowID)
	p.Failed = len(p.Failures)
	if float64(p.Failed) < b.st.Settings.FailureRatio*float64(p.Released) {
		return
	}
	p.Result = "failed"
	b.st.Opens++
	b.open(fmt.Sprintf("%d of %d probes failed within the probe window", p.Failed, p.Released))
}

// count adds o to the window and drops the buckets the window has passed. Undated counts (a
// process from before dated buckets, or a run from before changeDatedOutcomes, which counts
// even dated signals so) go in the current second's bucket; dated ones in the bucket of their
// date (a date ahead of the breaker's clock in the current one), so that a failure arriving
// late is judged against the republishes of its own window. A dated bucket the window has
// passed, or from before the last transition (which emptied the window: its failures answer
// republishes no longer counted), is dropped.
func (b *breakerRun) count(o BreakerOutcomes) {
	now := workflow.Now(b.ctx)
	since := now.Add(-b.st.Settings.Window)
	kept := b.st.Window[:0]
	for _, bk := range b.st.Window {
		if bk.At.After(since) {
			kept = append(kept, bk)
		}
	}
	b.st.Window = kept
	if !b.countsByDate() || len(o.Buckets) == 0 {
		b.countAt(now, o.Republished, o.Failed)
		return
	}
	for _, bk := range o.Buckets {
		at := bk.At
		if at.After(now) {
			at = now
		}
		if !at.Truncate(time.Second).After(since) || b.beforeLastTransition(at) {
			continue
		}
		b.countAt(at, bk.Republished, bk.Failed)
	}
}

// countsByDate says whether this run places dated outcomes by their dates.
func (b *breakerRun) countsByDate() bool {
	return workflow.GetVersion(b.ctx, changeDatedOutcomes, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// refusedDetail starts the detail of a refused action's event, which is no transition.
const refusedDetail = "refused: "

// beforeLastTransition says whether at is before the breaker last changed state, which
// emptied its window. A transition dates Since and its event alike; a breaker with no such
// event never changed state (a refused action is an event too, dated when refused) and counts
// from a window back: its first report counts what went out before the report started it.
func (b *breakerRun) beforeLastTransition(at time.Time) bool {
	return at.Before(b.st.Since) && slices.ContainsFunc(b.st.Events, func(e BreakerEvent) bool {
		return e.To == b.st.Mode && e.At.Equal(b.st.Since) && !strings.HasPrefix(e.Detail, refusedDetail)
	})
}

// countAt adds counts to the bucket of at's second, keeping the window in order.
func (b *breakerRun) countAt(at time.Time, republished, failed int) {
	if republished == 0 && failed == 0 {
		return
	}
	at = at.Truncate(time.Second)
	i, found := slices.BinarySearchFunc(b.st.Window, at, func(bk BreakerBucket, t time.Time) int { return bk.At.Compare(t) })
	if !found {
		b.st.Window = slices.Insert(b.st.Window, i, BreakerBucket{At: at})
	}
	b.st.Window[i].Republished += republished
	b.st.Window[i].Failed += failed
}

// trips says whether the window's counts open the breaker, with the counts.
func (b *breakerRun) trips() (republished, failed int, open bool) {
	for _, bk := range b.st.Window {
		republished += bk.Republished
		failed += bk.Failed
	}
	s := b.st.Settings
	open = republished > 0 && republished >= s.MinRepublishes &&
		float64(failed)/float64(republished) >= s.FailureRatio
	return republished, failed, open
}

// open holds the destination's retries until the cooldown ends.
func (b *breakerRun) open(detail string) {
	b.st.Releasing = false
	b.transition(BreakerOpen, ReleasedBy, detail)
}

// probe ends a cooldown: it releases up to Probes held retries and goes half-open to judge
// them. With none held there is nothing to judge: it closes.
func (b *breakerRun) probe() {
	ids, err := b.listHeld(b.st.Settings.Probes)
	if err != nil {
		// Try again after another cooldown rather than close on a guess.
		b.transition(BreakerOpen, ReleasedBy, "probe not started: "+err.Error())
		return
	}
	probes := b.signalReleases(ids, Release{Probe: true, By: ReleasedBy})
	n := len(probes)
	if n == 0 {
		b.close(ReleasedBy, "no held retry to probe")
		return
	}
	b.st.LastProbe = &BreakerProbe{At: workflow.Now(b.ctx), Released: n, Probes: probes}
	b.transition(BreakerHalfOpen, ReleasedBy, fmt.Sprintf("%d held retries released as probes", n))
}

// close lets the destination's retries go again, and starts releasing the held ones.
func (b *breakerRun) close(actor, detail string) {
	b.st.Opens = 0
	b.st.Released = 0
	b.st.Releasing = true
	b.nextRelease = time.Time{}
	b.recent = nil
	b.transition(BreakerClosed, actor, detail)
}

// releaseBatch releases the next ReleaseRate held retries, oldest first, and stops releasing
// when none is left.
func (b *breakerRun) releaseBatch() {
	rate := b.st.Settings.ReleaseRate
	skip := map[string]bool{}
	for _, batch := range b.recent {
		for _, id := range batch {
			skip[id] = true
		}
	}
	b.nextRelease = workflow.Now(b.ctx).Add(breakerReleaseEvery)
	listed, err := b.listHeld(rate + len(skip))
	if err != nil {
		workflow.GetLogger(b.ctx).Warn("breaker release: list held retries", "queue", b.st.Queue, "error", err)
		return // again at nextRelease
	}
	var ids []string
	for _, id := range listed {
		if !skip[id] && len(ids) < rate {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		b.st.Releasing = false
		b.recent = nil
		workflow.GetLogger(b.ctx).Info("breaker released every held retry", "queue", b.st.Queue, "released", b.st.Released)
		return
	}
	b.st.Released += len(b.signalReleases(ids, Release{By: ReleasedBy}))
	b.recent = append(b.recent, ids)
	if len(b.recent) > 2 {
		b.recent = b.recent[1:]
	}
}

// listHeld lists up to limit held retries of the destination, oldest due first.
func (b *breakerRun) listHeld(limit int) ([]string, error) {
	var acts *activities.Activities
	var ids []string
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(b.ctx, listHeldOptions), acts.ListHeld,
		activities.ListHeldInput{Queue: b.st.Queue, Limit: limit}).Get(b.ctx, &ids)
	if err != nil {
		return nil, fmt.Errorf("list held retries: %w", err)
	}
	return ids, nil
}

// signalReleases signals rel to each held retry in ids and returns those that took it (one
// may have ended since it was listed).
func (b *breakerRun) signalReleases(ids []string, rel Release) []string {
	sent := make([]workflow.Future, len(ids))
	for i, id := range ids {
		sent[i] = workflow.SignalExternalWorkflow(b.ctx, id, "", SignalRelease, rel)
	}
	var took []string
	for i, f := range sent {
		if err := f.Get(b.ctx, nil); err != nil {
			workflow.GetLogger(b.ctx).Warn("breaker release not delivered", "queue", b.st.Queue, "workflow_id", ids[i], "error", err)
			continue
		}
		took = append(took, ids[i])
	}
	return took
}

// transition enters mode to: the state, the audit event, the search attribute, the metric.
func (b *breakerRun) transition(to BreakerMode, actor, detail string) {
	now := workflow.Now(b.ctx)
	from := b.st.Mode
	if from == BreakerHalfOpen && b.st.LastProbe != nil && b.st.LastProbe.Result == "" {
		b.st.LastProbe.Result = "abandoned"
	}
	b.st.Mode, b.st.Since, b.st.Window = to, now, nil
	b.st.Events = append(b.st.Events, BreakerEvent{At: now, To: to, Actor: actor, Detail: detail})
	if n := len(b.st.Events); n > MaxBreakerEvents {
		b.st.Events = append([]BreakerEvent(nil), b.st.Events[n-MaxBreakerEvents:]...)
	}
	workflow.GetMetricsHandler(b.ctx).WithTags(map[string]string{"queue": b.st.Queue, "to": string(to)}).
		Counter(MetricBreakerTransitions).Inc(1)
	workflow.GetLogger(b.ctx).Info("breaker transition",
		"queue", b.st.Queue, "from", from, "to", to, "actor", actor, "detail", detail, "opens", b.st.Opens)
	b.upsert()
}

// upsert keeps the search attributes current: the processes list the breakers that hold by
// them.
func (b *breakerRun) upsert() {
	if err := workflow.UpsertTypedSearchAttributes(b.ctx,
		SABreakerState.ValueSet(string(b.st.Mode)), SAOriginalQueue.ValueSet(b.st.Queue)); err != nil {
		workflow.GetLogger(b.ctx).Warn("upsert search attributes", "error", err)
	}
}

// breakerActionRequest is one operator update on its way from its handler to the loop.
type breakerActionRequest struct {
	signal  string
	action  OperatorAction
	refusal string
	done    bool
}

// BreakerActionRefusal says why operator action signal (SignalBreakerPause,
// SignalBreakerResume) is not legal for a breaker in mode m, or "" when it is.
func BreakerActionRefusal(signal string, m BreakerMode) string {
	switch {
	case signal == SignalBreakerPause && m == BreakerPaused:
		return "the destination is paused already"
	case signal == SignalBreakerResume && m != BreakerPaused:
		return "the destination is " + string(m) + ": resume is allowed only while paused"
	case signal != SignalBreakerPause && signal != SignalBreakerResume:
		return signal + " is not a breaker action"
	}
	return ""
}

func (b *breakerRun) updateValidator(signal string) func(workflow.Context, OperatorAction) error {
	return func(_ workflow.Context, _ OperatorAction) error {
		if why := BreakerActionRefusal(signal, b.st.Mode); why != "" {
			return temporal.NewNonRetryableApplicationError(why, ErrTypeIllegalAction, nil)
		}
		return nil
	}
}

// updateHandler hands an accepted update to the loop and answers the state after it.
func (b *breakerRun) updateHandler(signal string) func(workflow.Context, OperatorAction) (BreakerState, error) {
	return func(ctx workflow.Context, a OperatorAction) (BreakerState, error) {
		req := &breakerActionRequest{signal: signal, action: a}
		b.actions.Send(ctx, req)
		if err := workflow.Await(ctx, func() bool { return req.done }); err != nil {
			return BreakerState{}, err
		}
		if req.refusal != "" {
			return b.st, temporal.NewNonRetryableApplicationError(req.refusal, ErrTypeIllegalAction, nil)
		}
		return b.st, nil
	}
}

// answer applies an update's action and lets its handler answer.
func (b *breakerRun) answer(req *breakerActionRequest) {
	if req.action.Actor == "" {
		req.action.Actor = "unknown"
	}
	req.refusal = b.act(req.signal, req.action)
	req.done = true
}

// act applies an operator's pause or resume, or says why it is refused (and keeps the refusal
// in the events): the one place where either changes the state, for signals and updates.
func (b *breakerRun) act(signal string, a OperatorAction) string {
	if why := BreakerActionRefusal(signal, b.st.Mode); why != "" {
		workflow.GetLogger(b.ctx).Info("breaker action refused", "queue", b.st.Queue, "action", signal, "actor", a.Actor, "why", why)
		b.st.Events = append(b.st.Events, BreakerEvent{At: workflow.Now(b.ctx), To: b.st.Mode, Actor: a.Actor, Detail: refusedDetail + why})
		return why
	}
	if signal == SignalBreakerPause {
		b.st.PausedBy = &a
		b.st.Releasing = false
		b.transition(BreakerPaused, a.Actor, a.Reason)
		return ""
	}
	b.st.PausedBy = nil
	b.close(a.Actor, a.Reason)
	return ""
}

// longHistory says whether the run should continue as new.
func (b *breakerRun) longHistory() bool {
	info := workflow.GetInfo(b.ctx)
	return info.GetCurrentHistoryLength() >= breakerMaxHistory || info.GetContinueAsNewSuggested()
}

// continueAsNew carries the state to a new run, once the inputs already received are applied
// and no update handler is left unfinished.
func (b *breakerRun) continueAsNew() error {
	b.takePending()
	if err := workflow.Await(b.ctx, func() bool { return workflow.AllHandlersFinished(b.ctx) }); err != nil {
		return err
	}
	if b.timer != nil {
		b.timer.cancel()
	}
	st := b.st
	workflow.GetLogger(b.ctx).Debug("breaker continues as new", "queue", st.Queue, "mode", st.Mode)
	return workflow.NewContinueAsNewError(b.ctx, BreakerWorkflowName, BreakerInput{Queue: st.Queue, Settings: st.Settings, State: &st})
}

// takePending applies the inputs already waiting, without waiting for more.
func (b *breakerRun) takePending() {
	for idle := false; !idle; {
		sel := workflow.NewSelector(b.ctx)
		b.addInputs(sel)
		sel.AddDefault(func() { idle = true })
		sel.Select(b.ctx)
	}
}
