package policy

import (
	"errors"
	"fmt"
	"math"
)

// maxMaxRetries bounds max_retries: beyond it a workflow's history grows without purpose.
const maxMaxRetries = 1000

// Validate reports every problem with the policy, each naming the policy and the field
// as the policy file spells it, so that an operator can fix a file in one pass.
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("policy %q: "+format, append([]any{p.Name}, args...)...))
	}

	if p.Name == "" {
		bad("name must not be empty")
	}

	switch p.Backoff.Kind {
	case Exponential:
		b := p.Backoff
		if b.Initial <= 0 {
			bad("backoff.initial must be above 0")
		}
		if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 1) {
			bad("backoff.multiplier must be a finite number of at least 1, not %v", b.Multiplier)
		}
		if b.Max < b.Initial {
			bad("backoff.max (%s) must be at least backoff.initial (%s)", b.Max, b.Initial)
		}
	case Schedule:
		if len(p.Backoff.Delays) == 0 {
			bad("backoff.delays must list at least one delay")
		}
		for i, d := range p.Backoff.Delays {
			if d <= 0 {
				bad("backoff.delays[%d] must be above 0, not %s", i, d)
			}
		}
	default:
		bad("backoff.type %q must be %q or %q", p.Backoff.Kind, Exponential, Schedule)
	}

	switch p.Jitter.Mode {
	case "", NoJitter, Equal:
	case Additive:
		if p.Jitter.Max <= 0 {
			bad("jitter.max must be above 0 for additive jitter")
		}
	case Proportional:
		if f := p.Jitter.Fraction; !(f > 0 && f <= 1) {
			bad("jitter.fraction must be above 0 and at most 1 for proportional jitter, not %v", f)
		}
	default:
		bad("jitter.mode %q must be one of none, additive, proportional, equal", p.Jitter.Mode)
	}

	if p.MaxRetries < 0 || p.MaxRetries > maxMaxRetries {
		bad("max_retries must be between 0 and %d, not %d", maxMaxRetries, p.MaxRetries)
	}
	if p.UnknownMaxRetries < 0 || p.UnknownMaxRetries > maxMaxRetries {
		bad("unknown_max_retries must be between 0 and %d, not %d", maxMaxRetries, p.UnknownMaxRetries)
	}
	if p.MaxRetriesCeiling < 0 || p.MaxRetriesCeiling > maxMaxRetries {
		bad("max_retries_ceiling must be between 0 and %d, not %d", maxMaxRetries, p.MaxRetriesCeiling)
	} else if p.MaxRetriesCeiling > 0 && p.MaxRetriesCeiling < p.MaxRetries {
		bad("max_retries_ceiling (%d) must be at least max_retries (%d): it caps what a message may ask for, not the policy", p.MaxRetriesCeiling, p.MaxRetries)
	}
	if p.MaxWindow < 0 {
		bad("max_window must not be negative")
	}
	if p.QuietWindow < 0 {
		bad("quiet_window must not be negative")
	}
	// With the defaults filled in, so that a cooldown above the default cooldown_max, say,
	// is refused here rather than misbehaving later.
	if err := p.Breaker.WithDefaults().Validate(); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}
