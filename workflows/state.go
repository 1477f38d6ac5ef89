package workflows

import (
	"strconv"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Status is where a message is in its lifecycle (docs/architecture.md).
type Status string

// The lifecycle states. The first four (and StatusHeld) are live; the last four are terminal.
const (
	StatusScheduled       Status = "scheduled"
	StatusRepublishing    Status = "republishing"
	StatusAwaitingOutcome Status = "awaiting-outcome"
	StatusDead            Status = "dead"
	StatusDelivered       Status = "delivered"
	StatusResolved        Status = "resolved"
	StatusDiscarded       Status = "discarded"
	StatusExpired         Status = "expired"
)

// Terminal reports whether the workflow has ended in this state.
func (s Status) Terminal() bool {
	switch s {
	case StatusDelivered, StatusResolved, StatusDiscarded, StatusExpired:
		return true
	}
	return false
}

// Dead-letter causes besides the policy's (policy.Cause*); message.DeadReasons lists them all.
const (
	CauseSkipped        = message.DeadReasonSkipped
	CauseUnroutable     = message.DeadReasonUnroutable
	CauseUnpublishable  = message.DeadReasonUnpublishable
	CauseRepublishError = message.DeadReasonRepublishFailed
)

// DefaultRetention is how long a dead message stays parked for an operator unless configured
// (DEAD_LETTER_RETENTION).
const DefaultRetention = 30 * 24 * time.Hour

// Input starts a RetryWorkflow.
type Input struct {
	// Report is the first failure report; nil when it arrives by signal (signal-with-start).
	Report *message.FailureReport `json:"report,omitempty"`
	// Retention is how long a dead message waits for an operator before it closes as expired.
	// Defaults to DefaultRetention.
	Retention time.Duration `json:"retention,omitempty"`
	// StartDelay is the first retry's delay when the reporter started the run with it as the
	// workflow's start delay (so the first workflow task is the republish): the report was
	// accepted at the run's start time, and the search attributes were set by the start.
	StartDelay time.Duration `json:"start_delay,omitempty"`
	// Revision is the workflow code's revision the run was started under (CurrentRevision at
	// the start; 0 for runs started before revisions): the gated changes it includes take
	// their new branch without a version marker (revision.go).
	Revision int `json:"revision,omitempty"`
	// Deferred says the bridge deferred the first report for its first retry's delay before
	// it started the run (see reporter.Reporter.DeferMax): the report was accepted at its
	// ReportedAt, the retry is due by the first task, and the start set the search
	// attributes. Its JSON name stays "held", as recorded histories carry it.
	Deferred bool `json:"held,omitempty"`
}

// Result is how a RetryWorkflow ended.
type Result struct {
	Status     Status `json:"status"`
	RetryCount int    `json:"retry_count"`
	Sequence   int    `json:"sequence"`
}

// OperatorAction is the payload of every operator signal: who acted and why. The workflow
// history keeps it, so the history is the audit trail.
type OperatorAction struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
}

// Event is one entry of the workflow's own log, shown by the state query: operator actions
// (applied or refused), duplicate reports, notes.
type Event struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Actor  string    `json:"actor,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// State is the whole state of one message, returned by the state query.
type State struct {
	WorkflowID      string          `json:"workflow_id"`
	Status          Status          `json:"status"`
	Message         message.Message `json:"message"`
	Policy          policy.Policy   `json:"policy"`
	DeadLetterQueue string          `json:"dead_letter_queue"`
	// MaxRetries is the per-message override; 0 means the policy's.
	MaxRetries int `json:"max_retries,omitempty"`
	// RetryCount is how many retries the message has had since its first failure or the
	// operator's last reset: it starts at the first report's retry_count, each republish adds
	// 1, and a report with a higher retry_count raises it. Max retries n allows n republishes.
	RetryCount int `json:"retry_count"`
	// Sequence numbers every republish of this message; the idempotency key is
	// "<message_id>:<Sequence>", so a reset never reuses a key.
	Sequence int `json:"sequence"`
	// Resets counts operator retries from dead.
	Resets         int               `json:"resets,omitempty"`
	Category       string            `json:"category,omitempty"`
	FirstFailureAt time.Time         `json:"first_failure_at"`
	LastFailureAt  time.Time         `json:"last_failure_at"`
	NextRetryAt    time.Time         `json:"next_retry_at,omitzero"`
	Attempts       []message.Attempt `json:"attempts"`
	Events         []Event           `json:"events,omitempty"`
	DeadReason     string            `json:"dead_reason,omitempty"`
	DeadDetail     string            `json:"dead_detail,omitempty"`
	DeadAt         time.Time         `json:"dead_at,omitzero"`
	// DuplicateReports counts every report set aside, not applied as a new failure (see
	// SetAside for the reasons; runs from before the breakdown have this total only).
	DuplicateReports int    `json:"duplicate_reports"`
	Service          string `json:"service,omitempty"`
	ServiceVersion   string `json:"service_version,omitempty"`
	TenantID         string `json:"tenant_id,omitempty"`

	// Poison is set on a run that parks a delivery the bridge could not decode or carry
	// (message.Poison): it starts dead, and a retry republishes the raw bytes to the ingress
	// queue.
	Poison *message.Poison `json:"poison,omitempty"`

	// WindowStart is when the policy's max window opened, when not at FirstFailureAt: an
	// operator's retry from dead starts a new window.
	WindowStart time.Time `json:"window_start,omitzero"`

	// HeldSince is when the current hold by the destination's breaker began (status held);
	// HeldBy is the breaker's mode then (open, half-open, paused).
	HeldSince time.Time `json:"held_since,omitzero"`
	HeldBy    string    `json:"held_by,omitempty"`
	// HeldFor is the time held since the window opened: the policy's max window does not run
	// while a destination is known to be down, so it is added to the window.
	HeldFor time.Duration `json:"held_for,omitempty"`

	// SetAside counts the reports set aside by reason (the SetAside* constants); LastSetAside
	// is the latest of them.
	SetAside     map[string]int  `json:"set_aside,omitempty"`
	LastSetAside *SetAsideReport `json:"last_set_aside,omitempty"`

	// Edits are the operators' edits of the message (EditRetry), oldest first.
	Edits []Edit `json:"edits,omitempty"`
}

// RetryKey is the idempotency key of republish number seq of a message.
func RetryKey(messageID string, seq int) string {
	return messageID + ":" + strconv.Itoa(seq)
}
