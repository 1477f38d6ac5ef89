package policy

import (
	"fmt"
	"math"
	"time"
)

// Causes say why a message went to dead; they are stable strings for metrics and alerts.
const (
	// CauseExhausted: the message used all its retries.
	CauseExhausted = "exhausted"
	// CauseNonRetryable: the failure's category cannot be helped by retrying.
	CauseNonRetryable = "non-retryable"
	// CauseMaxWindow: the next retry would fall after the policy's window.
	CauseMaxWindow = "max-window"
	// CauseManual: the policy leaves every failure to an operator.
	CauseManual = "manual"
)

// Decision is what to do with a failed message.
type Decision struct {
	// Retry is true to republish after Delay, false to send to dead.
	Retry bool `json:"retry"`
	// Attempt is the retry number being scheduled (1-based); when Retry is false it is the
	// number of retries already used.
	Attempt int `json:"attempt"`
	// Delay is the wait before the retry; zero when Retry is false.
	Delay time.Duration `json:"delay"`
	// Category is the failure's class.
	Category Category `json:"category"`
	// Cause is one of the Cause constants when Retry is false, else empty.
	Cause string `json:"cause,omitempty"`
	// Reason is a short sentence for people reading the history or the dead letter.
	Reason string `json:"reason"`
}

// Decide chooses between retrying and dead for a failure. retryCount is how many retries
// the message already had (0 on its first failure), maxOverride > 0 replaces
// p.MaxRetries, sinceFirst is the time since the first failure and u in [0, 1) picks the
// jitter (see JitterFraction). It is pure so that workflows can call it on replay. It
// follows CurrentRules.
func Decide(p Policy, f Failure, retryCount, maxOverride int, sinceFirst time.Duration, u float64) Decision {
	return CurrentRules.Decide(p, f, retryCount, maxOverride, sinceFirst, u)
}

// MaxRetries is how many retries a message of policy p gets when its latest failure is of
// category cat, under CurrentRules (see Rules.MaxRetries).
func MaxRetries(p Policy, cat Category, maxOverride int) int {
	n, _ := CurrentRules.MaxRetries(p, cat, maxOverride)
	return n
}

// MaxRetries is how many retries a message of policy p gets under rules r when its latest
// failure is of category cat: maxOverride when > 0, else p.MaxRetries, and for an unknown
// error at most the rules' unknown-error cap; capped says the cap lowered it.
func (r Rules) MaxRetries(p Policy, cat Category, maxOverride int) (n int, capped bool) {
	n = p.MaxRetries
	if maxOverride > 0 {
		n = maxOverride
	}
	unknownCap := p.UnknownMaxRetries
	if r < RulesUnknownCapPerPolicy {
		unknownCap = legacyUnknownMaxRetries
	}
	if cat == Unknown && unknownCap > 0 && n > unknownCap {
		return unknownCap, true
	}
	return n, false
}

// Decide is Decide under rules r. sinceFirst is the time since the window opened: the first
// failure, or what the caller counts as a new start.
func (r Rules) Decide(p Policy, f Failure, retryCount, maxOverride int, sinceFirst time.Duration, u float64) Decision {
	retryCount = max(retryCount, 0)
	sinceFirst = max(sinceFirst, 0)
	cat := r.Classify(f)
	dead := func(cause, reason string) Decision {
		return Decision{Attempt: retryCount, Category: cat, Cause: cause, Reason: reason}
	}

	if !cat.Retryable() {
		return dead(CauseNonRetryable, fmt.Sprintf("%s error: not retried", cat))
	}
	if p.Manual {
		return dead(CauseManual, fmt.Sprintf("%s: policy %q is manual, left to an operator", cat, p.Name))
	}
	maxRetries, capped := r.MaxRetries(p, cat, maxOverride)
	capNote := ""
	if capped {
		capNote = fmt.Sprintf(" (unknown errors get at most %d)", maxRetries)
	}
	if retryCount >= maxRetries {
		return dead(CauseExhausted, fmt.Sprintf("exhausted: %d of %d retries used%s", retryCount, maxRetries, capNote))
	}

	attempt := retryCount + 1
	delay := p.Delay(attempt, u)
	how := ""
	if cat == RateLimited {
		switch {
		case f.RetryAfter <= 0:
			// No hint from the server: back off harder than for a plain transient error.
			delay = saturatingDouble(delay)
			how = " (extended backoff)"
		case f.RetryAfter > delay:
			delay = f.RetryAfter
			how = " (Retry-After)"
		}
	}
	if p.MaxWindow > 0 && delay > p.MaxWindow-sinceFirst { // both non-negative: no overflow
		return dead(CauseMaxWindow, fmt.Sprintf("max window: retry %d in %s would fall past %s after the first failure (%s elapsed)",
			attempt, human(delay), human(p.MaxWindow), human(sinceFirst)))
	}
	return Decision{
		Retry:    true,
		Attempt:  attempt,
		Delay:    delay,
		Category: cat,
		Reason:   fmt.Sprintf("%s: retry %d of %d in %s%s", cat, attempt, maxRetries, human(delay), how),
	}
}

func saturatingDouble(d time.Duration) time.Duration {
	if d > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * d
}

// human rounds a duration for reading: 4.2s rather than 4.213456789s.
func human(d time.Duration) string {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
