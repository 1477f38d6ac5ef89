package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// Names of the breaker: one BreakerWorkflow per destination (message.BreakerWorkflowID),
// which RetryWorkflows' republishes and failures are reported to (in batches, by the
// processes) and which releases their held retries.
const (
	// BreakerWorkflowName is the registered workflow type of a destination's breaker.
	BreakerWorkflowName = "BreakerWorkflow"
	// SignalBreakerOutcomes carries BreakerOutcomes: republishes and failed republishes seen
	// by one process since its last report.
	SignalBreakerOutcomes = "breaker-outcomes"
	// SignalBreakerPause and SignalBreakerResume carry an OperatorAction: hold the
	// destination's retries by hand, and let them go (at the release rate).
	SignalBreakerPause  = "breaker-pause"
	SignalBreakerResume = "breaker-resume"
	// UpdateBreakerPause and UpdateBreakerResume are the same as Updates answering the
	// BreakerState after the action: what the ops API calls.
	UpdateBreakerPause  = "breaker-pause"
	UpdateBreakerResume = "breaker-resume"
	// QueryBreakerState returns BreakerState.
	QueryBreakerState = "breaker-state"
	// SignalRelease carries a Release to a held RetryWorkflow: republish now.
	SignalRelease = "breaker-release"
	// SignalBreakerProbeFailed carries a ProbeFailure from a RetryWorkflow released as a
	// probe to its destination's breaker: the probe's republish failed.
	SignalBreakerProbeFailed = "breaker-probe-failed"
)

// StatusHeld is a retry that was due while its destination's breaker was open or paused: it
// waits for a release, not counted as an attempt.
const StatusHeld Status = "held"

// BreakerMode is a breaker's state.
type BreakerMode string

// Breaker states.
const (
	BreakerClosed   BreakerMode = "closed"
	BreakerOpen     BreakerMode = "open"
	BreakerHalfOpen BreakerMode = "half-open"
	BreakerPaused   BreakerMode = "paused"
)

// Holds reports whether retries due for the destination are held in this state (half-open
// holds all but the probes, which are released by signal).
func (m BreakerMode) Holds() bool {
	return m == BreakerOpen || m == BreakerHalfOpen || m == BreakerPaused
}

// SABreakerState is a BreakerWorkflow's BreakerMode, upserted on every transition; the
// processes list the breakers that hold by it.
var SABreakerState = temporal.NewSearchAttributeKeyKeyword("BreakerState")

// BreakerInput starts (or continues as new) a destination's breaker.
type BreakerInput struct {
	Queue    string         `json:"queue"`
	Settings policy.Breaker `json:"settings"`
	// State is carried over by continue-as-new; nil for a new breaker (closed).
	State *BreakerState `json:"state,omitempty"`
}

// BreakerOutcomes is one process's count for one destination since its last report.
type BreakerOutcomes struct {
	// Republished and Failed are the totals: of Buckets when there are any. A breaker counts
	// them at the signal's arrival when the signal has no Buckets (a process from before
	// them) or the run predates them (changeDatedOutcomes).
	Republished int `json:"republished"`
	Failed      int `json:"failed"`
	// Buckets are the same counts by date, oldest first: each bucket's At is the latest
	// outcome it counts, a republish dated by its confirm and a failure by the republish it
	// answers. The breaker places each in its window by that date, and drops those older
	// than the window.
	Buckets []BreakerBucket `json:"buckets,omitempty"`
	// Settings are the reporting message's policy's breaker settings; the breaker takes the
	// latest.
	Settings policy.Breaker `json:"settings"`
}

// ProbeFailure is the payload of SignalBreakerProbeFailed: which run's probe failed, and the
// key of the probe's republish.
type ProbeFailure struct {
	WorkflowID string `json:"workflow_id"`
	RetryKey   string `json:"retry_key"`
}

// Release is the payload of SignalRelease.
type Release struct {
	// Probe marks a half-open breaker's probe.
	Probe bool `json:"probe,omitempty"`
	// By names who released it: "breaker" or an operator.
	By string `json:"by"`
}

// BreakerState is what QueryBreakerState answers and the ops API shows.
type BreakerState struct {
	Queue    string         `json:"queue"`
	Mode     BreakerMode    `json:"mode"`
	Since    time.Time      `json:"since"`
	Settings policy.Breaker `json:"settings"`
	// Opens counts openings since the breaker last closed: the cooldown doubles with each.
	Opens int `json:"opens"`
	// Window holds the counts of the last Settings.Window, one bucket a second, oldest
	// first: dated by when the outcomes happened (BreakerOutcomes.Buckets), or by their
	// report's arrival for a report without dates.
	Window []BreakerBucket `json:"window,omitempty"`
	// LastProbe is the latest half-open probe, when there was one.
	LastProbe *BreakerProbe `json:"last_probe,omitempty"`
	// LastReport is when the processes last reported to it; with Since, it says how long
	// the breaker has been idle (Settings.IdleEnd ends it).
	LastReport time.Time `json:"last_report,omitzero"`
	// Released counts retries released since the breaker last closed or resumed.
	Released int `json:"released"`
	// Releasing is set from a close or resume until no held retry is left to release.
	Releasing bool `json:"releasing,omitempty"`
	// PausedBy is the operator's action while paused.
	PausedBy *OperatorAction `json:"paused_by,omitempty"`
	// Events are the latest transitions (at most MaxBreakerEvents), the audit trail.
	Events []BreakerEvent `json:"events,omitempty"`
}

// BreakerBucket is one span's counts: a second's in a breaker's window, a flush interval's
// in a report.
type BreakerBucket struct {
	At          time.Time `json:"at"`
	Republished int       `json:"republished"`
	Failed      int       `json:"failed"`
}

// BreakerProbe is one half-open probe.
type BreakerProbe struct {
	At       time.Time `json:"at"`
	Released int       `json:"released"`
	Failed   int       `json:"failed"`
	// Probes are the runs released as probes, and Failures those whose probe failed (a
	// SignalBreakerProbeFailed).
	Probes   []string `json:"probes,omitempty"`
	Failures []string `json:"failures,omitempty"`
	// Result is "passed", "failed" or "" while it runs.
	Result string `json:"result,omitempty"`
}

// BreakerEvent is one transition or operator action.
type BreakerEvent struct {
	At     time.Time   `json:"at"`
	To     BreakerMode `json:"to"`
	Actor  string      `json:"actor"`
	Detail string      `json:"detail,omitempty"`
}

// MaxBreakerEvents bounds BreakerState.Events.
const MaxBreakerEvents = 50
