package policy

import (
	"fmt"
	"time"
)

// Breaker is a policy's circuit-breaker settings for the destinations its messages go back
// to. A breaker per destination (the original queue) opens when too many of the retries
// republished there fail again within a window; while it is open, retries due for that
// destination are held (not republished, not counted, not dead-lettered); after a cooldown a
// few held retries are released as probes, and their outcome closes or reopens it; on close,
// held retries are released oldest first at ReleaseRate.
//
// Only retries count: a message's first failure says nothing about whether retrying helps
// now, and a workload where every message fails once and then succeeds must never open it.
type Breaker struct {
	// Disabled turns breakers off for this policy's messages: they are never held and do
	// not count towards their destination's breaker.
	Disabled bool `json:"disabled,omitempty"`
	// Window is how far back republishes and their failures are counted.
	Window time.Duration `json:"window,omitempty"`
	// MinRepublishes is how many republishes the window must hold before the ratio counts.
	MinRepublishes int `json:"min_republishes,omitempty"`
	// FailureRatio opens the breaker: failed republishes ÷ republishes in the window at or
	// above it.
	FailureRatio float64 `json:"failure_ratio,omitempty"`
	// Cooldown is the first wait from open to half-open; each reopening doubles it, up to
	// CooldownMax.
	Cooldown    time.Duration `json:"cooldown,omitempty"`
	CooldownMax time.Duration `json:"cooldown_max,omitempty"`
	// Probes is how many held retries are released in half-open.
	Probes int `json:"probes,omitempty"`
	// ProbeWindow is how long after the probes' release their failures, reported by their
	// runs, reopen the breaker once they reach FailureRatio of the probes (one of one, two of
	// three); a window that ends below it closes the breaker.
	ProbeWindow time.Duration `json:"probe_window,omitempty"`
	// ReleaseRate is how many held retries per second are released on close or resume.
	ReleaseRate int `json:"release_rate,omitempty"`
	// IdleEnd is how long a breaker stays closed with nothing reported before it ends; the
	// next report for its destination starts it again, closed. It bounds the breakers (and
	// their series) to the destinations in use.
	IdleEnd time.Duration `json:"idle_end,omitempty"`
}

// Breaker defaults: a destination whose retries fail at least half the time, over at least
// 10 of them in 30 s, is held; probed after 10 s, then 20, 40… up to 5 min; 3 probes judged
// over 10 s; released at 20 retries/s.
const (
	DefaultBreakerWindow         = 30 * time.Second
	DefaultBreakerMinRepublishes = 10
	DefaultBreakerFailureRatio   = 0.5
	DefaultBreakerCooldown       = 10 * time.Second
	DefaultBreakerCooldownMax    = 5 * time.Minute
	DefaultBreakerProbes         = 3
	DefaultBreakerProbeWindow    = 10 * time.Second
	DefaultBreakerReleaseRate    = 20
	DefaultBreakerIdleEnd        = time.Hour
)

// CooldownAt is the wait from open to half-open at the breaker's opens-th opening since it
// last closed: Cooldown × 2^(opens-1), at most CooldownMax (Cooldown for opens ≤ 1). The
// breaker's workflow waits it and the ops API shows it: one formula for both.
func (b Breaker) CooldownAt(opens int) time.Duration {
	d := b.Cooldown
	for i := 1; i < opens && d < b.CooldownMax; i++ {
		d *= 2
	}
	return min(d, b.CooldownMax)
}

// WithDefaults is b with every unset (zero) setting at its default.
func (b Breaker) WithDefaults() Breaker {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&b.Window, DefaultBreakerWindow)
	set(&b.Cooldown, DefaultBreakerCooldown)
	set(&b.CooldownMax, DefaultBreakerCooldownMax)
	set(&b.ProbeWindow, DefaultBreakerProbeWindow)
	set(&b.IdleEnd, DefaultBreakerIdleEnd)
	if b.MinRepublishes == 0 {
		b.MinRepublishes = DefaultBreakerMinRepublishes
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = DefaultBreakerFailureRatio
	}
	if b.Probes == 0 {
		b.Probes = DefaultBreakerProbes
	}
	if b.ReleaseRate == 0 {
		b.ReleaseRate = DefaultBreakerReleaseRate
	}
	return b
}

// Validate refuses settings that cannot work.
func (b Breaker) Validate() error {
	switch {
	case b.Window < 0, b.Cooldown < 0, b.CooldownMax < 0, b.ProbeWindow < 0, b.IdleEnd < 0:
		return fmt.Errorf("breaker: durations must not be negative")
	case b.MinRepublishes < 0, b.Probes < 0, b.ReleaseRate < 0:
		return fmt.Errorf("breaker: counts must not be negative")
	case b.FailureRatio < 0 || b.FailureRatio > 1:
		return fmt.Errorf("breaker: failure_ratio %v must be within 0..1", b.FailureRatio)
	case b.CooldownMax != 0 && b.Cooldown > b.CooldownMax:
		return fmt.Errorf("breaker: cooldown %s exceeds cooldown_max %s", b.Cooldown, b.CooldownMax)
	}
	return nil
}
