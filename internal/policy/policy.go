// Package policy decides when and whether a failed message is retried: named retry
// policies, backoff and jitter, error classification, and routes by queue. Pure Go, no
// Temporal imports, so the workflow and the bridge can share it.
package policy

import "time"

// Category is the class of a failure: it decides whether the failure is retried, and how.
type Category string

// The categories. Transient, RateLimited and Unknown are retried; the rest go to dead at once.
const (
	Transient     Category = "transient"
	RateLimited   Category = "rate-limited"
	Permanent     Category = "permanent"
	Validation    Category = "validation"
	Client        Category = "client"
	Configuration Category = "configuration"
	Unknown       Category = "unknown"
)

// Failure is what a reporter says about an error.
type Failure struct {
	// Category, when it names a category, wins over classification.
	Category   string        `json:"category,omitempty"`
	HTTPStatus int           `json:"http_status,omitempty"`
	ErrorCode  string        `json:"error_code,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
}

// BackoffKind selects how delays grow.
type BackoffKind string

// Backoff kinds.
const (
	Exponential BackoffKind = "exponential"
	Schedule    BackoffKind = "schedule"
)

// Backoff gives the delay before retry n, before jitter.
type Backoff struct {
	Kind BackoffKind `json:"kind"`
	// Initial is the delay before the first retry (exponential).
	Initial time.Duration `json:"initial,omitempty"`
	// Multiplier is the growth per retry (exponential); 1 gives a fixed delay.
	Multiplier float64 `json:"multiplier,omitempty"`
	// Max caps the delay (exponential).
	Max time.Duration `json:"max,omitempty"`
	// Delays is the explicit schedule; retries past its end reuse the last entry.
	Delays []time.Duration `json:"delays,omitempty"`
}

// JitterMode selects how the delay is spread.
type JitterMode string

// Jitter modes.
const (
	// NoJitter keeps the delay as it is.
	NoJitter JitterMode = "none"
	// Additive adds u·Max (the default policy: 0–1 s).
	Additive JitterMode = "additive"
	// Proportional multiplies by 1 ± Fraction (the outbound policy: ±20 %).
	Proportional JitterMode = "proportional"
	// Equal multiplies by 0.5 + u·0.5 (the tiers, aggressive to none).
	Equal JitterMode = "equal"
)

// Jitter spreads retries so that a recovering dependency is not hit by a herd.
type Jitter struct {
	Mode     JitterMode    `json:"mode"`
	Max      time.Duration `json:"max,omitempty"`
	Fraction float64       `json:"fraction,omitempty"`
}

// Policy is one named retry policy.
type Policy struct {
	Name    string  `json:"name"`
	Backoff Backoff `json:"backoff"`
	Jitter  Jitter  `json:"jitter"`
	// MaxRetries is how many republishes a message gets; the failure after the last is dead.
	MaxRetries int `json:"max_retries"`
	// UnknownMaxRetries, when above 0, caps the retries of failures classified Unknown: they
	// may be permanent, so the tiers (aggressive to none) give them 2 chances rather than the
	// full budget. 0 means no cap (the default policy retries every error alike).
	UnknownMaxRetries int `json:"unknown_max_retries,omitempty"`
	// MaxRetriesCeiling, when above 0, is the most retries a message may ask for with its own
	// max_retries; 0 means the default (see RetriesCeiling).
	MaxRetriesCeiling int `json:"max_retries_ceiling,omitempty"`
	// MaxWindow, when above 0, sends the message to dead once a retry would fall later than
	// this after the first failure.
	MaxWindow time.Duration `json:"max_window,omitempty"`
	// QuietWindow is how long after a republish no new failure means delivered.
	QuietWindow time.Duration `json:"quiet_window"`
	// DeadLetterQueue, when set, is where this policy's dead letters go.
	DeadLetterQueue string `json:"dead_letter_queue,omitempty"`
	// Manual policies never retry by themselves: the first failure waits for an operator.
	Manual bool `json:"manual,omitempty"`
	// Breaker holds this policy's retries while their destination is failing (see Breaker).
	Breaker Breaker `json:"breaker,omitzero"`
}

// DefaultMaxRetriesCeiling is the most retries a message may ask for with its own
// max_retries when its policy sets no max_retries_ceiling (and max_retries is lower).
const DefaultMaxRetriesCeiling = 25

// RetriesCeiling is the most retries a message may ask for under p: MaxRetriesCeiling when
// set, else DefaultMaxRetriesCeiling or the policy's own max_retries, whichever is higher
// (a message never needs to be capped below its policy).
func (p Policy) RetriesCeiling() int {
	if p.MaxRetriesCeiling > 0 {
		return p.MaxRetriesCeiling
	}
	return max(DefaultMaxRetriesCeiling, p.MaxRetries)
}
