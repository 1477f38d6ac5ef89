package policy

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDecide(t *testing.T) {
	b := Builtins()
	def, std, aggr, manual := b[DefaultName], b[StandardName], b[AggressiveName], b[ManualName]
	transient := Failure{HTTPStatus: 503}
	unknown := Failure{HTTPStatus: 500}
	const s = time.Second

	tests := []struct {
		name       string
		p          Policy
		f          Failure
		retryCount int
		override   int
		sinceFirst time.Duration
		u          float64
		want       Decision
	}{
		{
			name: "first retry", p: def, f: transient,
			want: Decision{Retry: true, Attempt: 1, Delay: 2 * s, Category: Transient, Reason: "transient: retry 1 of 3 in 2s"},
		},
		{
			name: "last retry", p: def, f: transient, retryCount: 2, u: 0.5,
			want: Decision{Retry: true, Attempt: 3, Delay: 8500 * time.Millisecond, Category: Transient, Reason: "transient: retry 3 of 3 in 8.5s"},
		},
		{
			name: "negative retry count counts as 0", p: def, f: transient, retryCount: -4,
			want: Decision{Retry: true, Attempt: 1, Delay: 2 * s, Category: Transient, Reason: "transient: retry 1 of 3 in 2s"},
		},
		{
			name: "exhausted", p: def, f: transient, retryCount: 3,
			want: Decision{Attempt: 3, Category: Transient, Cause: CauseExhausted, Reason: "exhausted: 3 of 3 retries used"},
		},
		{
			name: "non-retryable", p: def, f: Failure{HTTPStatus: 422}, retryCount: 1,
			want: Decision{Attempt: 1, Category: Permanent, Cause: CauseNonRetryable, Reason: "permanent error: not retried"},
		},
		{
			name: "non-retryable explicit category", p: def, f: Failure{Category: "configuration"},
			want: Decision{Category: Configuration, Cause: CauseNonRetryable, Reason: "configuration error: not retried"},
		},
		{
			name: "manual", p: manual, f: transient,
			want: Decision{Category: Transient, Cause: CauseManual, Reason: `transient: policy "manual" is manual, left to an operator`},
		},
		{
			name: "non-retryable beats manual", p: manual, f: Failure{Reason: "schema mismatch"},
			want: Decision{Category: Permanent, Cause: CauseNonRetryable, Reason: "permanent error: not retried"},
		},
		{
			name: "none policy dies on first failure", p: b[NoneName], f: transient,
			want: Decision{Category: Transient, Cause: CauseExhausted, Reason: "exhausted: 0 of 0 retries used"},
		},

		// Unknown failures get at most the policy's unknown_max_retries (2 on the tiers).
		{
			name: "unknown retried while under 2", p: std, f: unknown, retryCount: 1,
			want: Decision{Retry: true, Attempt: 2, Delay: 1 * s, Category: Unknown, Reason: "unknown: retry 2 of 2 in 1s"},
		},
		{
			name: "unknown stops after 2", p: std, f: unknown, retryCount: 2,
			want: Decision{Attempt: 2, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 2 of 2 retries used (unknown errors get at most 2)"},
		},
		{
			name: "the default policy does not cap unknown", p: def, f: unknown, retryCount: 2,
			want: Decision{Retry: true, Attempt: 3, Delay: 8 * s, Category: Unknown, Reason: "unknown: retry 3 of 3 in 8s"},
		},
		{
			name: "default dead after its 3 unknown retries", p: def, f: unknown, retryCount: 3,
			want: Decision{Attempt: 3, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 3 of 3 retries used"},
		},
		{
			name: "a policy's own unknown cap", p: Policy{Name: "one-unknown", Backoff: def.Backoff, MaxRetries: 5, UnknownMaxRetries: 1}, f: unknown, retryCount: 1,
			want: Decision{Attempt: 1, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 1 of 1 retries used (unknown errors get at most 1)"},
		},
		{
			name: "aggressive caps unknown at 2", p: aggr, f: unknown, retryCount: 2,
			want: Decision{Attempt: 2, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 2 of 2 retries used (unknown errors get at most 2)"},
		},
		{
			name: "socket code in the reason text is transient", p: def, f: Failure{Reason: "ECONNRESET: socket hang up"}, retryCount: 2,
			want: Decision{Retry: true, Attempt: 3, Delay: 8 * s, Category: Transient, Reason: "transient: retry 3 of 3 in 8s"},
		},
		{
			name: "unknown cap ignores a larger override", p: std, f: unknown, retryCount: 2, override: 10,
			want: Decision{Attempt: 2, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 2 of 2 retries used (unknown errors get at most 2)"},
		},
		{
			name: "unknown keeps a smaller max", p: Policy{Name: "one", Backoff: def.Backoff, MaxRetries: 1}, f: unknown, retryCount: 1,
			want: Decision{Attempt: 1, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 1 of 1 retries used"},
		},

		// Per-message max override.
		{
			name: "override raises max", p: def, f: transient, retryCount: 3, override: 5,
			want: Decision{Retry: true, Attempt: 4, Delay: 16 * s, Category: Transient, Reason: "transient: retry 4 of 5 in 16s"},
		},
		{
			name: "override lowers max", p: def, f: transient, retryCount: 1, override: 1,
			want: Decision{Attempt: 1, Category: Transient, Cause: CauseExhausted, Reason: "exhausted: 1 of 1 retries used"},
		},
		{
			name: "negative override ignored", p: def, f: transient, retryCount: 2, override: -1,
			want: Decision{Retry: true, Attempt: 3, Delay: 8 * s, Category: Transient, Reason: "transient: retry 3 of 3 in 8s"},
		},

		// Rate limiting.
		{
			name: "retry-after longer than the policy delay", p: def, f: Failure{HTTPStatus: 429, RetryAfter: 10 * s},
			want: Decision{Retry: true, Attempt: 1, Delay: 10 * s, Category: RateLimited, Reason: "rate-limited: retry 1 of 3 in 10s (Retry-After)"},
		},
		{
			name: "retry-after shorter than the policy delay", p: def, f: Failure{HTTPStatus: 429, RetryAfter: s},
			want: Decision{Retry: true, Attempt: 1, Delay: 2 * s, Category: RateLimited, Reason: "rate-limited: retry 1 of 3 in 2s"},
		},
		{
			name: "no retry-after doubles the delay", p: def, f: Failure{Reason: "quota exceeded"}, retryCount: 1,
			want: Decision{Retry: true, Attempt: 2, Delay: 8 * s, Category: RateLimited, Reason: "rate-limited: retry 2 of 3 in 8s (extended backoff)"},
		},

		// Max window (aggressive: 15s; attempt 1 at u=0 is 250ms).
		{
			name: "inside the window", p: aggr, f: transient, sinceFirst: 14 * s,
			want: Decision{Retry: true, Attempt: 1, Delay: 250 * time.Millisecond, Category: Transient, Reason: "transient: retry 1 of 3 in 250ms"},
		},
		{
			name: "ending exactly at the window", p: aggr, f: transient, sinceFirst: 15*s - 250*time.Millisecond,
			want: Decision{Retry: true, Attempt: 1, Delay: 250 * time.Millisecond, Category: Transient, Reason: "transient: retry 1 of 3 in 250ms"},
		},
		{
			name: "past the window", p: aggr, f: transient, sinceFirst: 14900 * time.Millisecond,
			want: Decision{Category: Transient, Cause: CauseMaxWindow, Reason: "max window: retry 1 in 250ms would fall past 15s after the first failure (14.9s elapsed)"},
		},
		{
			name: "already past the window", p: aggr, f: transient, retryCount: 1, sinceFirst: time.Hour,
			want: Decision{Attempt: 1, Category: Transient, Cause: CauseMaxWindow, Reason: "max window: retry 2 in 500ms would fall past 15s after the first failure (1h0m0s elapsed)"},
		},
		{
			name: "extended backoff pushes past the window", p: aggr, f: Failure{HTTPStatus: 429}, sinceFirst: 14600 * time.Millisecond,
			want: Decision{Category: RateLimited, Cause: CauseMaxWindow, Reason: "max window: retry 1 in 500ms would fall past 15s after the first failure (14.6s elapsed)"},
		},
		{
			name: "negative time since first counts as 0", p: aggr, f: transient, sinceFirst: -time.Hour,
			want: Decision{Retry: true, Attempt: 1, Delay: 250 * time.Millisecond, Category: Transient, Reason: "transient: retry 1 of 3 in 250ms"},
		},
		{
			name: "no window", p: def, f: transient, sinceFirst: 1000 * time.Hour,
			want: Decision{Retry: true, Attempt: 1, Delay: 2 * s, Category: Transient, Reason: "transient: retry 1 of 3 in 2s"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.p, tt.f, tt.retryCount, tt.override, tt.sinceFirst, tt.u)
			assert.Equal(t, tt.want, got)
		})
	}
}

// Workflows that decided under the older rules keep them on replay: unknown errors capped
// at 2 under every policy, socket codes in the reason text not read.
func TestDecideUnknownCapEverywhere(t *testing.T) {
	b := Builtins()
	def, std := b[DefaultName], b[StandardName]
	old := RulesUnknownCapEverywhere
	tests := []struct {
		name       string
		p          Policy
		f          Failure
		retryCount int
		want       Decision
	}{
		{
			name: "default capped at 2", p: def, f: Failure{HTTPStatus: 500}, retryCount: 2,
			want: Decision{Attempt: 2, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 2 of 2 retries used (unknown errors get at most 2)"},
		},
		{
			name: "a policy without a cap still capped", p: Policy{Name: "p", Backoff: def.Backoff, MaxRetries: 5}, f: Failure{HTTPStatus: 500}, retryCount: 2,
			want: Decision{Attempt: 2, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 2 of 2 retries used (unknown errors get at most 2)"},
		},
		{
			name: "socket code in the text is unknown", p: def, f: Failure{Reason: "ECONNRESET: socket hang up"}, retryCount: 2,
			want: Decision{Attempt: 2, Category: Unknown, Cause: CauseExhausted, Reason: "exhausted: 2 of 2 retries used (unknown errors get at most 2)"},
		},
		{
			name: "a tier agrees with the current rules", p: std, f: Failure{HTTPStatus: 500}, retryCount: 1,
			want: Decision{Retry: true, Attempt: 2, Delay: time.Second, Category: Unknown, Reason: "unknown: retry 2 of 2 in 1s"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := old.Decide(tt.p, tt.f, tt.retryCount, 0, 0, 0)
			assert.Equal(t, tt.want, got)
			if tt.p.Name == StandardName {
				assert.Equal(t, got, CurrentRules.Decide(tt.p, tt.f, tt.retryCount, 0, 0, 0))
			}
		})
	}
}

func TestDecideNoOverflow(t *testing.T) {
	p := Policy{
		Name:       "huge",
		Backoff:    Backoff{Kind: Exponential, Initial: math.MaxInt64 / 2, Multiplier: 4, Max: math.MaxInt64},
		MaxRetries: 5,
		MaxWindow:  math.MaxInt64,
	}
	// Rate limited with no Retry-After doubles a delay near the top of the range.
	d := Decide(p, Failure{HTTPStatus: 429}, 1, 0, 0, 0)
	assert.True(t, d.Retry)
	assert.Equal(t, time.Duration(math.MaxInt64), d.Delay)

	// A nonsense negative time since the first failure counts as 0, not as a wrap-around.
	d = Decide(p, Failure{HTTPStatus: 503}, 0, 0, math.MinInt64, 0)
	assert.True(t, d.Retry)

	// sinceFirst + delay would wrap around; it must count as past the window.
	d = Decide(p, Failure{HTTPStatus: 503}, 0, 0, math.MaxInt64-time.Second, 0)
	assert.False(t, d.Retry)
	assert.Equal(t, CauseMaxWindow, d.Cause)
}

func TestHuman(t *testing.T) {
	assert.Equal(t, "4.2s", human(4213456789))
	assert.Equal(t, "250ms", human(250*time.Millisecond+300))
	assert.Equal(t, "0s", human(0))
	assert.Equal(t, "1m30s", human(90*time.Second+20*time.Millisecond))
}

func TestMaxRetries(t *testing.T) {
	capped := Policy{Name: "p", MaxRetries: 5, UnknownMaxRetries: 2}
	uncapped := Policy{Name: "p", MaxRetries: 5}
	tests := []struct {
		name       string
		rules      Rules
		p          Policy
		cat        Category
		override   int
		want       int
		wantCapped bool
	}{
		{name: "the policy's maximum", rules: CurrentRules, p: capped, cat: Transient, want: 5},
		{name: "the message's own maximum replaces it", rules: CurrentRules, p: capped, cat: Transient, override: 8, want: 8},
		{name: "unknown held to the policy's cap", rules: CurrentRules, p: capped, cat: Unknown, want: 2, wantCapped: true},
		{name: "unknown held to the cap over the message's own maximum", rules: CurrentRules, p: capped, cat: Unknown, override: 8, want: 2, wantCapped: true},
		{name: "a maximum under the cap is kept", rules: CurrentRules, p: capped, cat: Unknown, override: 1, want: 1},
		{name: "no cap in the policy", rules: CurrentRules, p: uncapped, cat: Unknown, want: 5},
		{name: "older rules cap unknown everywhere", rules: RulesUnknownCapEverywhere, p: uncapped, cat: Unknown, want: legacyUnknownMaxRetries, wantCapped: true},
		{name: "older rules leave other categories", rules: RulesUnknownCapEverywhere, p: uncapped, cat: Transient, want: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, c := tt.rules.MaxRetries(tt.p, tt.cat, tt.override)
			assert.Equal(t, tt.want, n)
			assert.Equal(t, tt.wantCapped, c)
			if tt.rules == CurrentRules {
				assert.Equal(t, tt.want, MaxRetries(tt.p, tt.cat, tt.override))
			}
		})
	}
}

// Decide exhausts a message at exactly the retries MaxRetries gives it.
func TestDecideExhaustsAtMaxRetries(t *testing.T) {
	p := Policy{Name: "p", Backoff: Builtins()[DefaultName].Backoff, MaxRetries: 5, UnknownMaxRetries: 2}
	for _, f := range []Failure{{HTTPStatus: 503}, {HTTPStatus: 500}} {
		for _, rules := range []Rules{RulesUnknownCapEverywhere, RulesUnknownCapPerPolicy} {
			for _, override := range []int{0, 1, 8} {
				n, _ := rules.MaxRetries(p, rules.Classify(f), override)
				assert.True(t, rules.Decide(p, f, n-1, override, 0, 0).Retry, "%v %d: retry %d of %d", f, override, n, n)
				d := rules.Decide(p, f, n, override, 0, 0)
				assert.Equal(t, CauseExhausted, d.Cause, "%v %d: after %d", f, override, n)
			}
		}
	}
}
