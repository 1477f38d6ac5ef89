package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Local activity options. Local activities, not regular ones: a regular activity adds an
// activity task and its history events to every retry, which the server pays for in
// throughput (cmd/bench/README.md, Levers). A publish that keeps failing (broker down) is retried
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
	if in.Deferred && r.takesDeferredStart() {
		r.deferredStart = true
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
	r.delayedStart, r.deferredStart = false, false
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
	// probe is set with released when a breaker let the next republish go as its probe;
	// probeKey is the key of the republish that went out so, until the next one: its failure
	// is reported to the breaker (reportProbeFailure).
	probe    bool
	probeKey string
	// delayedStart is set while the first report of a run started with a start delay is taken
	// (Input.StartDelay): it was accepted at the run's start, and the start set the search
	// attributes of the scheduled retry.
	delayedStart bool
	// deferredStart is set while the first report the bridge deferred for its delay is taken
	// (Input.Deferred): it was accepted at its ReportedAt, and the start set the search attributes.
	deferredStart bool
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
	return r.addItemUpdates()
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
	updates := searchAttributeUpdates(&r.state)
	if r.writesFindingAttributes() {
		updates = append(updates, findingAttributeUpdates(&r.state)...)
	}
	if err := workflow.UpsertTypedSearchAttributes(r.ctx, updates...); err != nil {
		workflow.GetLogger(r.ctx).Warn("upsert search attributes", "error", err)
	}
}

// writesFindingAttributes reports whether this run writes the finding attributes: a worker
// from before them never did, and a namespace that has not registered them refuses them.
func (r *retryRun) writesFindingAttributes() bool {
	return r.includes(changeFindingAttributes) ||
		workflow.GetVersion(r.ctx, changeFindingAttributes, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// findingAttributeUpdates are the search attributes operators find a message by: its
// consuming service, its last error type and, while it is dead, its envelope's ids.
func findingAttributeUpdates(s *State) []temporal.SearchAttributeUpdate {
	var updates []temporal.SearchAttributeUpdate
	if s.Service != "" {
		updates = append(updates, SAConsumerService.ValueSet(s.Service))
	}
	if t := lastErrorType(s); t != "" {
		updates = append(updates, SAErrorType.ValueSet(t))
	} else {
		updates = append(updates, SAErrorType.ValueUnset())
	}
	if s.Status == StatusDead {
		id := s.DeadLetterID()
		updates = append(updates, SADeadLetterIDs.ValueSet([]string{id, message.DLQUUID(id)}))
	} else {
		updates = append(updates, SADeadLetterIDs.ValueUnset())
	}
	return updates
}

// lastErrorType is the error type of the last failure, "" when it named none.
func lastErrorType(s *State) string {
	if n := len(s.Attempts); n > 0 {
		return s.Attempts[n-1].ErrorType
	}
	return ""
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
