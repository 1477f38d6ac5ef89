package policy

import "time"

// Names of the built-in policies. The first five are the tiers (aggressive to none), which
// cap unknown errors; the rest keep the schedules their services had before the scheduler.
const (
	// AggressiveName retries fast and gives up fast: within 15 s.
	AggressiveName = "aggressive"
	// StandardName is the everyday tier: 5 retries within 5 minutes.
	StandardName = "standard"
	// PatientName waits longer for slow dependencies: 8 retries within 15 minutes.
	PatientName = "patient"
	// CriticalName keeps trying for half an hour.
	CriticalName = "critical"
	// NoneName never retries.
	NoneName = "none"
	// DefaultName is the catalog's default (Default): 3 retries, 2 s doubling to 60 s.
	DefaultName = "default"
	// OutboundName is for outbound HTTP calls: 2, 4, 8 s, ±20 %.
	OutboundName = "outbound"
	// EmailName is mail delivery's long schedule: 1 minute up to a day, 8 retries.
	EmailName = "email"
	// ExponentialName is a three-step schedule: 5 s, 30 s, 5 minutes.
	ExponentialName = "exponential"
	// ImmediateName is a fixed short delay: 5 s, 3 retries.
	ImmediateName = "immediate"
	// ManualName never retries by itself: every failure waits for an operator.
	ManualName = "manual"
)

// tierUnknownMaxRetries is the tiers' cap on retries of unknown errors: an unknown error may
// be permanent, so it gets 2 retries and then goes to the dead-letter queue.
const tierUnknownMaxRetries = 2

// DefaultQuietWindow is how long a republished message must go without a new failure
// before it counts as delivered, unless a policy says otherwise.
const DefaultQuietWindow = 30 * time.Second

// Builtins returns the built-in catalogue: the tiers, and the schedules of the services that
// hand their failures to the scheduler, so that their queues keep their old behaviour. The map and its slices are new on every call, so
// callers may change them freely.
func Builtins() map[string]Policy {
	exp := func(initial time.Duration, mult float64, maxDelay time.Duration) Backoff {
		return Backoff{Kind: Exponential, Initial: initial, Multiplier: mult, Max: maxDelay}
	}
	sched := func(delays ...time.Duration) Backoff {
		return Backoff{Kind: Schedule, Delays: delays}
	}
	equal := Jitter{Mode: Equal}
	none := Jitter{Mode: NoJitter}
	const m, h = time.Minute, time.Hour

	list := []Policy{
		{Name: AggressiveName, Backoff: exp(500*time.Millisecond, 2, 5*time.Second), Jitter: equal, MaxRetries: 3, UnknownMaxRetries: tierUnknownMaxRetries, MaxWindow: 15 * time.Second},
		{Name: StandardName, Backoff: exp(time.Second, 2, 30*time.Second), Jitter: equal, MaxRetries: 5, UnknownMaxRetries: tierUnknownMaxRetries, MaxWindow: 5 * m},
		{Name: PatientName, Backoff: exp(2*time.Second, 2, 60*time.Second), Jitter: equal, MaxRetries: 8, UnknownMaxRetries: tierUnknownMaxRetries, MaxWindow: 15 * m},
		{Name: CriticalName, Backoff: exp(time.Second, 2, 120*time.Second), Jitter: equal, MaxRetries: 12, UnknownMaxRetries: tierUnknownMaxRetries, MaxWindow: 30 * m},
		// The backoff only makes the policy valid: with no retries it is never used.
		{Name: NoneName, Backoff: exp(time.Second, 1, time.Second), Jitter: none, MaxRetries: 0, UnknownMaxRetries: tierUnknownMaxRetries},
		Default(3, 2*time.Second, 60*time.Second),
		{Name: OutboundName, Backoff: exp(2*time.Second, 2, 8*time.Second), Jitter: Jitter{Mode: Proportional, Fraction: 0.2}, MaxRetries: 3},
		{Name: EmailName, Backoff: sched(1*m, 5*m, 15*m, 1*h, 3*h, 6*h, 12*h, 24*h), Jitter: none, MaxRetries: 8, QuietWindow: 5 * m},
		{Name: ExponentialName, Backoff: sched(5*time.Second, 30*time.Second, 5*m), Jitter: none, MaxRetries: 3},
		{Name: ImmediateName, Backoff: sched(5 * time.Second), Jitter: none, MaxRetries: 3},
		// The schedule only makes the policy valid: manual policies never schedule retries.
		{Name: ManualName, Backoff: sched(5 * time.Second), Jitter: none, MaxRetries: 0, Manual: true},
	}
	out := make(map[string]Policy, len(list))
	for _, p := range list {
		if p.QuietWindow == 0 {
			p.QuietWindow = DefaultQuietWindow
		}
		out[p.Name] = p
	}
	return out
}

// Default is the default policy shaped by its environment (DEFAULT_MAX_RETRIES,
// BASE_DELAY_MS, MAX_DELAY_MS): exponential ×2 from base, capped at maxDelay, plus up
// to 1 s of additive jitter, no window, every error retried alike.
func Default(maxRetries int, base, maxDelay time.Duration) Policy {
	return Policy{
		Name:        DefaultName,
		Backoff:     Backoff{Kind: Exponential, Initial: base, Multiplier: 2, Max: maxDelay},
		Jitter:      Jitter{Mode: Additive, Max: time.Second},
		MaxRetries:  maxRetries,
		QuietWindow: DefaultQuietWindow,
	}
}
