package policy

import (
	"hash/fnv"
	"math"
	"strconv"
	"time"
)

// JitterFraction returns a deterministic u in [0, 1) for a key and attempt. Workflows must
// replay identically, so they use this instead of math/rand; hashing the message key
// still spreads messages that failed together.
func JitterFraction(key string, attempt int) float64 {
	h := fnv.New64a()
	h.Write([]byte(key + ":" + strconv.Itoa(attempt)))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// Delay is the wait before retry number attempt (1-based; below 1 counts as 1), with u in
// [0, 1) choosing the jitter. It never returns a negative duration and saturates instead
// of overflowing, so a hostile policy file cannot produce a negative or wrapped delay.
func (p Policy) Delay(attempt int, u float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	u = clampUnit(u)
	raw := p.rawDelay(attempt)
	d := raw
	switch p.Jitter.Mode {
	case Additive:
		d = raw + u*float64(p.Jitter.Max)
	case Proportional:
		d = raw * (1 + p.Jitter.Fraction*(2*u-1))
	case Equal:
		d = raw * (0.5 + 0.5*u)
	}
	return toDuration(d)
}

// rawDelay is the delay before jitter, in nanoseconds. It works in float64 so that large
// attempts reach the cap instead of overflowing int64. Max <= 0 (only in a policy that
// fails Validate) means no cap rather than a zero delay, which would retry in a tight loop.
func (p Policy) rawDelay(attempt int) float64 {
	switch p.Backoff.Kind {
	case Exponential:
		raw := float64(p.Backoff.Initial) * math.Pow(p.Backoff.Multiplier, float64(attempt-1))
		if p.Backoff.Max > 0 && raw > float64(p.Backoff.Max) {
			raw = float64(p.Backoff.Max)
		}
		return raw
	case Schedule:
		if len(p.Backoff.Delays) == 0 {
			return 0
		}
		return float64(p.Backoff.Delays[min(attempt-1, len(p.Backoff.Delays)-1)])
	}
	return 0
}

// clampUnit forces u into [0, 1), NaN to 0.
func clampUnit(u float64) float64 {
	switch {
	case !(u >= 0):
		return 0
	case u >= 1:
		return math.Nextafter(1, 0)
	}
	return u
}

// toDuration rounds nanoseconds to a Duration, clamping to [0, math.MaxInt64].
func toDuration(ns float64) time.Duration {
	switch {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64: // float64(math.MaxInt64) is 2^63, one past the range
		return math.MaxInt64
	}
	return time.Duration(math.Round(ns))
}
