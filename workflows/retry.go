// Package workflows holds RetryWorkflow: the durable owner of one failed message from its
// first failure report to its end (delivered, resolved, discarded or expired).
package workflows

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/policy"
)

// firstReportTimeout bounds how long a run started without a report waits for its first one
// (signal-with-start delivers it in the first task, so this only guards a bad start).
const firstReportTimeout = time.Minute

// Local activity options. Local activities, not regular ones: a regular activity adds an
// activity task and its history events to every retry, which the server pays for in
// throughput (bench/README.md, Levers). A publish that keeps failing (broker down) is retried
// with backoff rather than given up on, so no retry is lost.
var (
	republishOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			NonRetryableErrorTypes: []string{activities.ErrTypeUnroutable, activities.ErrTypeUnpublishable},
		},
	}
	deadLetterOptions = republishOptions
)

// RetryWorkflow owns one failed message: it waits the policy's delay, republishes,
// waits a quiet window for the next failure, and dead-letters the message when retrying
// cannot help, then parks it for an operator until the retention ends.
func RetryWorkflow(ctx workflow.Context, in Input) (Result, error) {
	r := &retryRun{ctx: ctx, retention: in.Retention, delayedStart: in.StartDelay > 0, revision: in.Revision}
	if r.retention <= 0 {
		r.retention = DefaultRetention
	}
	r.state.WorkflowID = workflow.GetInfo(ctx).WorkflowExecution.ID
	if err := r.setup(); err != nil {
		return Result{}, err
	}
	if in.Held && r.takesHeldStart() {
		r.heldStart = true
	}
	first := in.Report
	if first == nil {
		rep, ok := r.awaitFirstReport()
		if !ok {
			return Result{}, errors.New("no failure report arrived after start")
		}
		first = &rep
	}
	r.applyFirstReport(*first)
	r.delayedStart, r.heldStart = false, false
	for !r.state.Status.Terminal() {
		if err := r.step(); err != nil {
			return Result{}, err
		}
	}
	r.refusePendingActions()
	r.setAsidePending()
	workflow.GetLogger(ctx).Debug("retry workflow ended",
		"message_id", r.state.Message.MessageID, "status", r.state.Status, "retry_count", r.state.RetryCount)
	return Result{Status: r.state.Status, RetryCount: r.state.RetryCount, Sequence: r.state.Sequence}, nil
}

// retryRun is one execution's working set: the queryable state plus the signal channels.
type retryRun struct {
	ctx       workflow.Context
	state     State
	retention time.Duration
	// revision is the workflow code's revision the run was started under (revision.go).
	revision int

	reports, retryNow, skip, resolve, discard workflow.ReceiveChannel
	// releases carries a breaker's (or an operator's) Release of a held retry.
	releases workflow.ReceiveChannel
	// actions carries the operator updates (*actionRequest) from their handlers to the loop,
	// which applies them where it applies the signals.
	actions workflow.Channel
	// lastKey is the key of the most recent republish: a report that names another key is stale.
	lastKey string
	// applied are the digests of the reports this run applied as failures, newest last: rebuilt
	// by replay from the same signals, so not part of the state.
	applied []string
	// released is set when the next republish was let go (a breaker's release, an operator's
	// retry-now): it goes out whatever the destination's breaker says.
	released bool
	// delayedStart is set while the first report of a run started with a start delay is taken
	// (Input.StartDelay): it was accepted at the run's start, and the start set the search
	// attributes of the scheduled retry.
	delayedStart bool
	// heldStart is set while the first report the bridge held for its delay is taken
	// (Input.Held): it was accepted at its ReportedAt, and the start set the search attributes.
	heldStart bool
}

func (r *retryRun) setup() error {
	r.reports = workflow.GetSignalChannel(r.ctx, SignalFailureReport)
	r.retryNow = workflow.GetSignalChannel(r.ctx, SignalRetryNow)
	r.skip = workflow.GetSignalChannel(r.ctx, SignalSkip)
	r.resolve = workflow.GetSignalChannel(r.ctx, SignalResolve)
	r.discard = workflow.GetSignalChannel(r.ctx, SignalDiscard)
	r.releases = workflow.GetSignalChannel(r.ctx, SignalRelease)
	if err := workflow.SetQueryHandler(r.ctx, QueryState, func() (State, error) { return r.state, nil }); err != nil {
		return fmt.Errorf("register %s query: %w", QueryState, err)
	}
	// Registering update handlers adds no command: histories without updates replay as before.
	r.actions = workflow.NewChannel(r.ctx)
	for _, la := range LegalActions {
		if err := workflow.SetUpdateHandlerWithOptions(r.ctx, la.Update, r.updateHandler(la.Signal),
			workflow.UpdateHandlerOptions{Validator: r.updateValidator(la.Signal)}); err != nil {
			return fmt.Errorf("register %s update: %w", la.Update, err)
		}
	}
	return nil
}

// actionRequest is one operator update on its way from its handler to the loop; the loop sets
// refusal (empty when applied) and done.
type actionRequest struct {
	signal  string
	action  OperatorAction
	refusal string
	done    bool
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
		req := &actionRequest{signal: signal, action: a}
		r.actions.Send(ctx, req)
		if err := workflow.Await(ctx, func() bool { return req.done }); err != nil {
			return State{}, err
		}
		if req.refusal != "" {
			return r.state, temporal.NewNonRetryableApplicationError(req.refusal, ErrTypeIllegalAction, nil)
		}
		return r.state, nil
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
		req.refusal = r.act(req.signal, req.action)
		req.done = true
	})
}

// refusePendingActions refuses the operator updates still waiting when the run ends (accepted
// while it could, applied after it could not), so that no handler is left unfinished.
func (r *retryRun) refusePendingActions() {
	var req *actionRequest
	for r.actions.ReceiveAsync(&req) {
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

func (r *retryRun) awaitFirstReport() (message.FailureReport, bool) {
	var rep message.FailureReport
	if (r.delayedStart || r.heldStart) && r.reports.ReceiveAsync(&rep) {
		// Signal-with-start with a start delay, or of a report the bridge held: the report came
		// with the start, so the first task has it, and a timeout timer would only be one more
		// timer task per retry. Not
		// versioned, and no marker can tell the runs that armed the timer here apart: why
		// they need not replay is in replay_test.go (unreplayable).
		return rep, true
	}
	ok, _ := r.reports.ReceiveWithTimeout(r.ctx, firstReportTimeout, &rep)
	return rep, ok
}

// applyFirstReport takes the run's first report: it fixes the message, policy and count.
func (r *retryRun) applyFirstReport(rep message.FailureReport) {
	now := workflow.Now(r.ctx)
	switch {
	case r.delayedStart:
		// The first task runs when the delay is over; the failure was reported at the start.
		now = workflow.GetInfo(r.ctx).WorkflowStartTime
	case r.heldStart:
		// The bridge waited the delay before the start: the retry is due now, in this task.
		now = rep.ReportedAt
	}
	r.state.setFromFirstReport(rep, now)
	if rep.Poison != nil {
		// A parked poison or oversize delivery: a new start path, taken only by new runs.
		r.poisoned(rep, now)
		return
	}
	if rep.RetryCount > 0 {
		r.takePriorAttempts()
	}
	r.failed(rep, now)
}

var priorAttemptsOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	// Four tries over about 7 s: visibility lists the earlier run's close a moment after it.
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 4},
}

// takePriorAttempts starts this run's attempt history with the earlier run's, when the
// report continues a count (it failed again after that run had ended). Best effort: the
// count itself comes from the report, so a failed look-up only shortens the story.
func (r *retryRun) takePriorAttempts() {
	if !r.includes(changePriorAttempts) && workflow.GetVersion(r.ctx, changePriorAttempts, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	info := workflow.GetInfo(r.ctx)
	var acts *activities.Activities
	var prior []message.Attempt
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(r.ctx, priorAttemptsOptions), acts.PriorAttempts,
		activities.PriorAttemptsInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}).Get(r.ctx, &prior)
	if err != nil {
		r.event("note", "", "attempts of the earlier run not found: "+err.Error())
		return
	}
	if len(prior) == 0 {
		return
	}
	r.state.Attempts = append(prior, r.state.Attempts...)
	if first := prior[0].Timestamp; !first.IsZero() && first.Before(r.state.FirstFailureAt) {
		r.state.FirstFailureAt = first
	}
	r.event("note", "", "continues an earlier run: "+strconv.Itoa(len(prior))+" attempts carried over")
}

// step waits for what the current state waits for and applies it.
func (r *retryRun) step() error {
	switch r.state.Status {
	case StatusScheduled:
		r.waitScheduled()
	case StatusRepublishing:
		r.republish()
	case StatusAwaitingOutcome:
		r.waitOutcome()
	case StatusHeld:
		r.waitHeld()
	case StatusDead:
		r.waitDead()
	default:
		return fmt.Errorf("no step for status %q", r.state.Status)
	}
	return nil
}

// failed applies one failure report accepted at now: record it, then retry or go to dead.
// FirstDelay must take the same decision for a run's first report.
func (r *retryRun) failed(rep message.FailureReport, now time.Time) {
	s := &r.state
	r.rememberApplied(rep)
	d := s.record(rep, now, r.rules)
	if !d.Retry {
		r.toDead(d.Cause, d.Reason)
		return
	}
	r.count(MetricRetriesScheduled)
	workflow.GetLogger(r.ctx).Debug("retry scheduled",
		"message_id", s.Message.MessageID, "attempt", d.Attempt, "next_retry_at", s.NextRetryAt,
		"category", d.Category, "outcome", "scheduled")
	if !r.delayedStart && !r.heldStart { // else the start set these search attributes
		r.upsert()
	}
}

// setFromFirstReport fixes the message, policy and count from a run's first report, accepted
// at now.
func (s *State) setFromFirstReport(rep message.FailureReport, now time.Time) {
	s.Message = rep.Message
	s.Policy = rep.Policy
	s.DeadLetterQueue = rep.DeadLetterQueue
	s.MaxRetries = rep.MaxRetries
	s.TenantID = rep.Message.TenantID
	s.Service, s.ServiceVersion = rep.Service, rep.ServiceVersion
	s.FirstFailureAt = now
	// A run for a message whose earlier run ended continues the count it is given, so max
	// attempts cannot be evaded by outliving a run.
	s.RetryCount = rep.RetryCount
	s.Sequence = rep.RetryCount
	for _, n := range rep.Notes {
		s.Events = append(s.Events, Event{At: now, Kind: "note", Detail: n})
	}
}

// record applies failure report rep, accepted at now, to s: the attempt and the policy's
// decision under the rules pick chooses (see decide), which it returns. A decision to retry
// schedules it; the caller applies one to stop.
func (s *State) record(rep message.FailureReport, now time.Time, pick func() policy.Rules) policy.Decision {
	if rep.RetryCount > s.RetryCount {
		s.RetryCount = rep.RetryCount
	}
	if rep.RetryCount > s.Sequence && s.Resets == 0 {
		s.Sequence = rep.RetryCount
	}
	d := decide(s, rep, now, pick)
	s.Category = string(d.Category)
	s.LastFailureAt = now
	s.Attempts = append(s.Attempts, message.Attempt{
		Attempt:    s.RetryCount + 1,
		Timestamp:  now,
		Error:      rep.Failure.Reason,
		ErrorCode:  rep.Failure.ErrorCode,
		HTTPStatus: rep.Failure.HTTPStatus,
		Category:   string(d.Category),
		ErrorType:  rep.ErrorType,
		StackTrace: rep.StackTrace,
	})
	if d.Retry {
		s.NextRetryAt = now.Add(d.Delay)
		s.Status = StatusScheduled
	}
	return d
}

// DelayedState is the state of a run started with its first delay as the start delay
// (Input.StartDelay) before its first workflow task: there is nothing to query yet, but the
// run's start holds all it will know (its input, or the report signalled with the start).
func DelayedState(id string, rep message.FailureReport, startedAt time.Time) State {
	s := State{WorkflowID: id}
	s.setFromFirstReport(rep, startedAt)
	s.record(rep, startedAt, currentRules)
	return s
}

// currentRules picks the rules a new run takes: its first GetVersion is not a replay.
func currentRules() policy.Rules { return policy.CurrentRules }

// decide is the policy's decision on failure report rep of the message in state s, at now.
// Only when the current rules and the rules they replaced disagree does it ask pick which
// apply (the workflow asks workflow.GetVersion): a run records a version marker only when the
// change matters to it, not one marker and search-attribute write per message.
func decide(s *State, rep message.FailureReport, now time.Time, pick func() policy.Rules) policy.Decision {
	u := policy.JitterFraction(s.WorkflowID+"#"+strconv.Itoa(s.Resets), s.RetryCount+1)
	start := s.FirstFailureAt
	if !s.WindowStart.IsZero() {
		start = s.WindowStart
	}
	// Time held by the destination's breaker is not spent retrying: the window moves on by it.
	elapsed := max(now.Sub(start)-s.HeldFor, 0)
	d := policy.CurrentRules.Decide(s.Policy, rep.Failure, s.RetryCount, s.MaxRetries, elapsed, u)
	if old := policy.RulesUnknownCapEverywhere.Decide(s.Policy, rep.Failure, s.RetryCount, s.MaxRetries, elapsed, u); old != d {
		if rules := pick(); rules != policy.CurrentRules {
			d = rules.Decide(s.Policy, rep.Failure, s.RetryCount, s.MaxRetries, elapsed, u)
		}
	}
	if !s.WindowStart.IsZero() && d.Cause == policy.CauseMaxWindow {
		d.Reason = strings.Replace(d.Reason, "after the first failure", "after the operator's retry", 1)
	}
	return d
}

// rules are the decision rules of this run: the older ones for a run whose history decided
// under them (replay finds no marker), else the current ones.
func (r *retryRun) rules() policy.Rules {
	if !r.includes(changeUnknownCapPerPolicy) && workflow.GetVersion(r.ctx, changeUnknownCapPerPolicy, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return policy.RulesUnknownCapEverywhere
	}
	return policy.RulesUnknownCapPerPolicy
}

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
	r.released = false
	r.endHold()
	s.RetryCount = attempt
	r.lastKey = key
	if n := len(s.Attempts); n > 0 {
		s.Attempts[n-1].RepublishedAt = res.PublishedAt
		s.Attempts[n-1].RetryKey = key
	}
	s.NextRetryAt = time.Time{}
	s.Status = StatusAwaitingOutcome
	r.upsert()
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

// toDead publishes the dead-letter envelope and parks the message for an operator.
func (r *retryRun) toDead(cause, detail string) {
	s := &r.state
	now := workflow.Now(r.ctx)
	r.endHold()
	s.Status = StatusDead
	s.DeadReason, s.DeadDetail, s.DeadAt = cause, detail, now
	s.NextRetryAt = time.Time{}
	var dlqID string // the envelope's id on the dead-letter queue
	if s.Poison != nil && cause == s.Poison.Kind {
		dlqID = s.Poison.DLQID
		// The bridge published this delivery's envelope, with the full bytes, before it
		// started or signalled the run.
		if s.Poison.EnvelopeError != "" {
			r.event("dead-letter-failed", "", "the broker refused the bridge's dead-letter envelope "+s.Poison.DLQID+": "+s.Poison.EnvelopeError)
		} else {
			r.event("note", "", "dead-letter envelope "+s.Poison.DLQID+" published by the bridge to "+s.DeadLetterQueue)
		}
	} else {
		env := r.envelope(now)
		dlqID = env.DLQID
		var acts *activities.Activities
		err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(r.ctx, deadLetterOptions), acts.DeadLetter,
			activities.DeadLetterInput{Queue: s.DeadLetterQueue, Envelope: env}).Get(r.ctx, nil)
		if err != nil {
			// The message stays parked and visible (status dead) even when the envelope could not be
			// published, so nothing is silently dropped; the event tells the operator why.
			r.event("dead-letter-failed", "", err.Error())
		}
	}
	if cause == policy.CauseExhausted {
		r.count(MetricRetriesExhausted)
	}
	workflow.GetLogger(r.ctx).Info("dead-lettered",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount, "cause", cause, "outcome", "dead",
		"dead_letter_queue", s.DeadLetterQueue, "dlq_id", dlqID)
	r.upsert()
}

func (r *retryRun) envelope(now time.Time) message.Envelope {
	s := &r.state
	info := workflow.GetInfo(r.ctx)
	return message.Envelope{
		DLQID:              s.WorkflowID + "#" + strconv.Itoa(s.Resets),
		MessageID:          s.Message.MessageID,
		OriginalQueue:      s.Message.OriginalQueue,
		OriginalExchange:   s.Message.OriginalExchange,
		OriginalRoutingKey: s.Message.OriginalRoutingKey,
		ConsumerService:    s.Service,
		FailureCategory:    s.Category,
		DeadReason:         s.DeadReason,
		DeadDetail:         s.DeadDetail,
		Policy:             s.Policy.Name,
		RetryAttempts:      append([]message.Attempt(nil), s.Attempts...),
		TotalRetries:       s.RetryCount,
		FirstFailureAt:     s.FirstFailureAt,
		RoutedToDlqAt:      now,
		CorrelationID:      s.Message.CorrelationID,
		WorkflowID:         s.WorkflowID,
		RunID:              info.WorkflowExecution.RunID,
		OriginalMessage:    s.Message,
		Metadata: message.Metadata{
			TenantID:              s.TenantID,
			Producer:              s.Message.Producer,
			DLQTimestamp:          now,
			Service:               s.Service,
			ServiceVersion:        s.ServiceVersion,
			FirstAttemptTimestamp: s.FirstFailureAt,
			LastAttemptTimestamp:  s.LastFailureAt,
		},
	}
}

// waitDead parks a dead message until an operator decides or the retention ends.
func (r *retryRun) waitDead() {
	s := &r.state
	timerCtx, cancel := workflow.WithCancel(r.ctx)
	defer cancel()
	sel := workflow.NewSelector(r.ctx)
	remaining := s.DeadAt.Add(r.retention).Sub(workflow.Now(r.ctx))
	sel.AddFuture(workflow.NewTimer(timerCtx, remaining), func(workflow.Future) {
		s.Status = StatusExpired
		r.event("expired", "", "retention of "+r.retention.String()+" ended")
		r.logClosed()
		r.upsert()
	})
	sel.AddReceive(r.reports, func(c workflow.ReceiveChannel, _ bool) {
		var rep message.FailureReport
		c.Receive(r.ctx, &rep)
		r.setAside(rep, SetAsideDead, "the message is dead; report kept as a note ("+describeReport(rep)+")")
	})
	r.addActionSignals(sel, r.retryNow, r.resolve, r.discard, r.skip)
	r.addActionUpdates(sel)
	sel.Select(r.ctx)
}

// retryFromDead applies an operator's retry of a dead message: the count starts again at 0,
// the republish is now, and so is the start of the policy's window.
func (r *retryRun) retryFromDead(a OperatorAction) {
	s := &r.state
	s.Resets++
	s.RetryCount = 0
	s.DeadReason, s.DeadDetail, s.DeadAt = "", "", time.Time{}
	s.NextRetryAt = workflow.Now(r.ctx)
	if r.includes(changeRetryOpensWindow) || workflow.GetVersion(r.ctx, changeRetryOpensWindow, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		s.WindowStart = s.NextRetryAt
		s.HeldFor = 0 // held before the new window: not in it
	}
	s.Status = StatusRepublishing
	r.count(MetricRetriesScheduled)
	workflow.GetLogger(r.ctx).Debug("retry scheduled",
		"message_id", s.Message.MessageID, "attempt", 1, "next_retry_at", s.NextRetryAt,
		"actor", a.Actor, "outcome", "scheduled")
	r.upsert()
}

// addReports adds the failure-report channel: a report is applied when it is the failure of
// the latest republish, and set aside otherwise (RabbitMQ redelivers), counted and shown.
func (r *retryRun) addReports(sel workflow.Selector) {
	sel.AddReceive(r.reports, func(c workflow.ReceiveChannel, _ bool) {
		var rep message.FailureReport
		c.Receive(r.ctx, &rep)
		r.report(rep)
	})
}

// report applies one failure report, or sets it aside.
func (r *retryRun) report(rep message.FailureReport) {
	if rep.Poison != nil {
		r.poisonReport(rep)
		return
	}
	if reason, why := r.stale(rep); reason != "" {
		r.setAside(rep, reason, why)
		return
	}
	r.failed(rep, workflow.Now(r.ctx))
}

// poisonReport applies a report of a poison delivery that arrived while the run is live: a
// parked poison message that an operator retried came back from the ingress queue as poison
// again, so it is dead again. On any other run (PoisonWorkflowID keeps parked runs apart from
// reported ones, so only by an unlucky id) it is only noted: the bridge has dead-lettered the
// delivery itself. Runs from before parked poison never received such a report, so this
// needs no version.
func (r *retryRun) poisonReport(rep message.FailureReport) {
	s := &r.state
	if s.Poison != nil && s.Status == StatusAwaitingOutcome {
		r.poisoned(rep, workflow.Now(r.ctx))
		return
	}
	r.setAside(rep, SetAsidePoison, "a "+rep.Poison.Kind+" delivery for this message was dead-lettered by the bridge ("+
		rep.Poison.DLQID+") while "+string(s.Status)+": "+rep.Poison.Reason)
}

// poisoned parks a poison or oversize delivery as dead: one attempt with the decode error,
// dead reason poison or oversize. The bridge has published its envelope already.
func (r *retryRun) poisoned(rep message.FailureReport, now time.Time) {
	s := &r.state
	p := rep.Poison
	s.Poison = p
	if s.Resets > 0 {
		// The bytes that came back are the retried ones; the rest of the message stays.
		s.Message.Payload = rep.Message.Payload
	}
	s.Category = string(policy.Unknown)
	s.LastFailureAt = now
	s.Attempts = append(s.Attempts, message.Attempt{
		Attempt:   s.RetryCount + 1,
		Timestamp: now,
		Error:     p.Reason,
		Category:  s.Category,
	})
	r.toDead(p.Kind, p.Reason)
}

// takePendingReports applies the failure reports already waiting when the quiet window ends,
// and says whether one of them was a new failure. A report the server hands over in the same
// workflow task as the timer (it was late: the bridge was down or cut off from Temporal for
// about the quiet window) is a failure, not silence: taking it as delivered loses the message.
func (r *retryRun) takePendingReports() bool {
	if r.reports.Len() == 0 {
		return false
	}
	if !r.includes(changeReportsWithQuietTimer) && workflow.GetVersion(r.ctx, changeReportsWithQuietTimer, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	var rep message.FailureReport
	for r.state.Status == StatusAwaitingOutcome && r.reports.ReceiveAsync(&rep) {
		r.report(rep)
		rep = message.FailureReport{}
	}
	return r.state.Status != StatusAwaitingOutcome
}

// stale says why a report is not a new failure (a SetAside* reason and a detail), or "" when
// it is.
func (r *retryRun) stale(rep message.FailureReport) (reason, why string) {
	s := &r.state
	if s.Status != StatusAwaitingOutcome {
		return SetAsideRetryPending, "report while " + string(s.Status) + " (" + describeReport(rep) + ")"
	}
	if rep.RetryKey != "" {
		if rep.RetryKey != r.lastKey {
			return SetAsideOtherKey, "report for " + rep.RetryKey + ", latest republish is " + r.lastKey
		}
		return "", ""
	}
	if rep.RetryCount < s.RetryCount {
		return r.keylessBehind(rep)
	}
	return "", ""
}

func receiveAction(ctx workflow.Context, c workflow.ReceiveChannel) OperatorAction {
	var a OperatorAction
	c.Receive(ctx, &a)
	if a.Actor == "" {
		a.Actor = "unknown"
	}
	return a
}

// count increments one of the workflow's counters for the message's original queue.
// Replay-safe: the SDK's metrics handler records nothing while replaying.
func (r *retryRun) count(name string) {
	workflow.GetMetricsHandler(r.ctx).WithTags(map[string]string{"queue": r.state.Message.OriginalQueue}).
		Counter(name).Inc(1)
}

// logClosed logs the end of a dead letter: resolved, discarded or expired.
func (r *retryRun) logClosed() {
	s := &r.state
	workflow.GetLogger(r.ctx).Info("dead letter closed",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount, "outcome", string(s.Status))
}

func (r *retryRun) event(kind, actor, detail string) {
	r.state.Events = append(r.state.Events, Event{At: workflow.Now(r.ctx), Kind: kind, Actor: actor, Detail: detail})
}

// upsert keeps the search attributes current; the Web UI and `temporal workflow list
// --query` read them.
func (r *retryRun) upsert() {
	if err := workflow.UpsertTypedSearchAttributes(r.ctx, searchAttributeUpdates(&r.state)...); err != nil {
		workflow.GetLogger(r.ctx).Warn("upsert search attributes", "error", err)
	}
}

// searchAttributeUpdates are the search attributes of state s.
func searchAttributeUpdates(s *State) []temporal.SearchAttributeUpdate {
	updates := []temporal.SearchAttributeUpdate{
		SAStatus.ValueSet(string(s.Status)),
		SAOriginalQueue.ValueSet(s.Message.OriginalQueue),
		SARetryCount.ValueSet(int64(s.RetryCount)),
		SAErrorCategory.ValueSet(s.Category),
		SAPolicy.ValueSet(s.Policy.Name),
	}
	if s.TenantID != "" {
		updates = append(updates, SATenant.ValueSet(s.TenantID))
	}
	if s.Message.EventType != "" {
		updates = append(updates, SAEventType.ValueSet(s.Message.EventType))
	}
	if s.Message.Producer != "" {
		updates = append(updates, SAProducer.ValueSet(s.Message.Producer))
	}
	if s.NextRetryAt.IsZero() {
		updates = append(updates, SANextRetryTime.ValueUnset())
	} else {
		updates = append(updates, SANextRetryTime.ValueSet(s.NextRetryAt))
	}
	if s.DeadAt.IsZero() {
		updates = append(updates, SADeadAt.ValueUnset())
	} else {
		updates = append(updates, SADeadAt.ValueSet(s.DeadAt))
	}
	return updates
}
