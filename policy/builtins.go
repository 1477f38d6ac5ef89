package policy

import "time"

// Names of the built-in policies.
const (
	// AggressiveName retries fast and gives up fast (seed 004).
	AggressiveName = "aggressive"
	// StandardName is seed 004's everyday policy.
	StandardName = "standard"
	// PatientName waits longer for slow dependencies (seed 004).
	PatientName = "patient"
	// CriticalName keeps trying for half an hour (seed 004).
	CriticalName = "critical"
	// NoneName never retries (seed 004).
	NoneName = "none"
	// DefaultName is seed 000's policy and the catalog's default.
	DefaultName = "default"
	// OutboundName is seed 001's policy for outbound HTTP calls.
	OutboundName = "outbound"
	// EmailName is seed 002's long schedule for mail delivery.
	EmailName = "email"
	// ExponentialName is seed 003's three-step schedule.
	ExponentialName = "exponential"
	// ImmediateName is seed 003's fixed short delay.
	ImmediateName = "immediate"
	// ManualName is seed 003's operator-only policy.
	ManualName = "manual"
)

// seed004UnknownMaxRetries is seed 004's cap on retries of unknown errors ("limited retry
// (max 2), then DLQ"), a rule of its catalogue's policies only.
const seed004UnknownMaxRetries = 2

// DefaultQuietWindow is how long a republished message must go without a new failure
// before it counts as delivered, unless a policy says otherwise.
const DefaultQuietWindow = 30 * time.Second

// Builtins returns the built-in catalogue, gathered from the seed services so that their
// queues keep their old behaviour. The map and its slices are new on every call, so
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
		{Name: AggressiveName, Backoff: exp(500*time.Millisecond, 2, 5*time.Second), Jitter: equal, MaxRetries: 3, UnknownMaxRetries: seed004UnknownMaxRetries, MaxWindow: 15 * time.Second},
		{Name: StandardName, Backoff: exp(time.Second, 2, 30*time.Second), Jitter: equal, MaxRetries: 5, UnknownMaxRetries: seed004UnknownMaxRetries, MaxWindow: 5 * m},
		{Name: PatientName, Backoff: exp(2*time.Second, 2, 60*time.Second), Jitter: equal, MaxRetries: 8, UnknownMaxRetries: seed004UnknownMaxRetries, MaxWindow: 15 * m},
		{Name: CriticalName, Backoff: exp(time.Second, 2, 120*time.Second), Jitter: equal, MaxRetries: 12, UnknownMaxRetries: seed004UnknownMaxRetries, MaxWindow: 30 * m},
		// The backoff only makes the policy valid: with no retries it is never used.
		{Name: NoneName, Backoff: exp(time.Second, 1, time.Second), Jitter: none, MaxRetries: 0, UnknownMaxRetries: seed004UnknownMaxRetries},
		SeedDefault(3, 2*time.Second, 60*time.Second),
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

// SeedDefault is seed 000's policy shaped by its environment (DEFAULT_MAX_RETRIES,
// BASE_DELAY_MS, MAX_DELAY_MS): exponential ×2 from base, capped at maxDelay, plus up
// to 1 s of additive jitter, no window.
func SeedDefault(maxRetries int, base, maxDelay time.Duration) Policy {
	return Policy{
		Name:        DefaultName,
		Backoff:     Backoff{Kind: Exponential, Initial: base, Multiplier: 2, Max: maxDelay},
		Jitter:      Jitter{Mode: Additive, Max: time.Second},
		MaxRetries:  maxRetries,
		QuietWindow: DefaultQuietWindow,
	}
}
