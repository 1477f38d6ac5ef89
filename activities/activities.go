// Package activities holds the workflow's side effects on the broker: the republish of a
// message to its original queue and the dead-letter publish of its envelope. Register an
// Activities on the worker that runs the workflows (package worker says how, for a worker of
// your own); the workflows run them as local activities.
package activities

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Activity names, as registered on the worker.
const (
	RepublishName  = "Republish"
	DeadLetterName = "DeadLetter"
)

// RepublishInput is one retry: the message and the attempt it is.
type RepublishInput struct {
	Message message.Message `json:"message"`
	// Attempt is the x-retry-count to stamp: 1 for the first retry.
	Attempt int `json:"attempt"`
	// Key is the idempotency key x-retry-key, "<message_id>:<n>".
	Key string `json:"key"`
	// ScheduledAt is when the retry was due; the lateness metric is measured from it.
	ScheduledAt time.Time `json:"scheduled_at"`
	// Breaker, when set, puts the republish under its destination's breaker: it is held
	// while the breaker holds (unless Released), and counted towards the breaker when it
	// goes out. Nil for runs from before breakers, and for policies that disable them.
	Breaker *policy.Breaker `json:"breaker,omitempty"`
	// Released says the breaker (a probe, or a release on close) or an operator let this
	// retry go: it is republished whatever the breaker's state.
	Released bool `json:"released,omitempty"`
}

// RepublishResult says when the broker confirmed the republish, or that it was held.
type RepublishResult struct {
	PublishedAt time.Time `json:"published_at"`
	// Held says the destination's breaker holds its retries: nothing was published;
	// HeldBy is the breaker's mode (open, half-open, paused).
	Held   bool   `json:"held,omitempty"`
	HeldBy string `json:"held_by,omitempty"`
}

// DeadLetterInput is one dead-letter publish.
type DeadLetterInput struct {
	Queue    string           `json:"queue"`
	Envelope message.Envelope `json:"envelope"`
}

// ArchiveExpiredInput is the envelope of a dead message whose retention ended.
type ArchiveExpiredInput struct {
	Envelope message.Envelope `json:"envelope"`
}

// ArchiveExpiredResult names the queue the envelope was archived to; empty when archiving is
// off.
type ArchiveExpiredResult struct {
	Queue string `json:"queue,omitempty"`
}

// ErrTypeUnroutable is the Temporal error type of a publish no queue took: non-retryable,
// since the destination (or the dead-letter queue) is missing until an operator acts.
const ErrTypeUnroutable = "Unroutable"

// ErrTypeUnpublishable is the Temporal error type of a publish refused for the message's own
// content: a short string over 255 bytes, a header AMQP cannot encode (checked before the
// client library sees it), or a broker refusal of the message (its channel closed with 406 or
// 403). Non-retryable: every try would be refused the same way. The error names the field.
const ErrTypeUnpublishable = "Unpublishable"

// ErrTypeInvalidMessage is the Temporal error type of a message that cannot be put on the wire
// (headers no AMQP table can hold): retrying would fail the same way.
const ErrTypeInvalidMessage = "InvalidMessage"

// BreakerGate says whether a destination's breaker holds its retries now, and its mode.
type BreakerGate interface {
	Holds(queue string) (mode string, held bool)
}

// BreakerCounter counts what a destination's breaker judges by: republishes here, failed
// republishes at the bridge.
type BreakerCounter interface {
	Republished(queue string, settings policy.Breaker)
}

// HeldLister lists the held retries of a destination, oldest due first: their workflow IDs.
type HeldLister interface {
	ListHeld(ctx context.Context, queue string, limit int) ([]string, error)
}

// Publisher is what the activities need from broker.Publisher: a confirmed publish that
// reports broker.ErrUnroutable for a mandatory message no queue took.
type Publisher = deadletter.Publisher

// Activities are the workflow's side effects on the broker. Register the struct on a worker;
// its methods are the activities RepublishName, DeadLetterName and ListHeldName.
type Activities struct {
	Publisher Publisher
	// History finds the attempts of a message's earlier runs; nil: none are looked up.
	History History
	Logger  *slog.Logger
	Metrics *Metrics         // may be nil
	Now     func() time.Time // injectable clock. Defaults to time.Now.
	// DeadLetterTTL is the AMQP expiration of each dead-letter envelope: the dead-letter queue
	// is a notification stream, and an envelope outlives its parked workflow by no more than
	// this (DEAD_LETTER_RETENTION). Capped at deadletter.MaxExpiration. Defaults to 0: no
	// expiration.
	DeadLetterTTL time.Duration
	// DeadLetterMaxBytes is the largest envelope published (DEAD_LETTER_MAX_BYTES); a larger
	// one leaves its payload to a message of its own (deadletter.Split). Defaults to
	// deadletter.DefaultMaxBytes.
	DeadLetterMaxBytes int
	// ServiceName is the AMQP app_id of the envelopes (SERVICE_NAME). Defaults to none.
	ServiceName string
	// ExpiredArchiveQueue, when set, is where ArchiveExpired publishes the envelope of a dead
	// message whose retention ended (EXPIRED_ARCHIVE_QUEUE). Defaults to none: not archived.
	ExpiredArchiveQueue string
	// Gate, Counter and Held connect republishes to their destinations' breakers; nil: no
	// retry is held, none is counted, and ListHeld lists none.
	Gate    BreakerGate
	Counter BreakerCounter
	Held    HeldLister
}

// messageLogger is l with the keys every line about message m carries.
func messageLogger(l *slog.Logger, m message.Message) *slog.Logger {
	l = l.With("message_id", m.MessageID)
	if m.CorrelationID != "" {
		l = l.With("correlation_id", m.CorrelationID)
	}
	return l
}

// History reads what earlier runs of a workflow recorded.
type History interface {
	// PriorAttempts returns the attempts recorded by run earlierRunID of workflowID, or,
	// when earlierRunID is empty, by the most recent closed run of workflowID other than
	// runID; oldest first, none when there is no such run.
	PriorAttempts(ctx context.Context, workflowID, runID, earlierRunID string) ([]message.Attempt, error)
}

// PriorAttemptsInput names the run asking and, when the bridge named it
// (message.FailureReport.Earlier), its earlier run.
type PriorAttemptsInput struct {
	WorkflowID   string `json:"workflow_id"`
	RunID        string `json:"run_id"`
	EarlierRunID string `json:"earlier_run_id,omitempty"`
}

// PriorAttempts gives a run that continues an earlier run's count (a failure reported after
// that run had ended) the earlier attempts, so its dead-letter envelope tells the whole story.
func (a *Activities) PriorAttempts(ctx context.Context, in PriorAttemptsInput) ([]message.Attempt, error) {
	if a.History == nil {
		return nil, nil
	}
	attempts, err := a.History.PriorAttempts(ctx, in.WorkflowID, in.RunID, in.EarlierRunID)
	if err != nil {
		return nil, fmt.Errorf("prior attempts of %s: %w", in.WorkflowID, err)
	}
	return attempts, nil
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Activities) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return discard
}

// discard is the logger of Activities built without one (as the workflow tests build them).
var discard = slog.New(slog.DiscardHandler)
