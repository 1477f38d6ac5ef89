package policy

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const uHigh = 0.999999

// jitterBounds gives, for a raw delay, the exact delay at u=0 and u=0.5 and the bound that
// u→1 approaches (exclusive unless the mode has no jitter).
type jitterBounds func(raw time.Duration) (atZero, atHalf, upper time.Duration)

var (
	noJitterBounds = func(raw time.Duration) (time.Duration, time.Duration, time.Duration) {
		return raw, raw, raw
	}
	additive1s = func(raw time.Duration) (time.Duration, time.Duration, time.Duration) {
		return raw, raw + 500*time.Millisecond, raw + time.Second
	}
	proportional20 = func(raw time.Duration) (time.Duration, time.Duration, time.Duration) {
		return raw * 4 / 5, raw, raw * 6 / 5
	}
	equalBounds = func(raw time.Duration) (time.Duration, time.Duration, time.Duration) {
		return raw / 2, raw * 3 / 4, raw
	}
)

func TestBuiltinDelays(t *testing.T) {
	const ms, s, m, h = time.Millisecond, time.Second, time.Minute, time.Hour
	tests := []struct {
		name   string
		bounds jitterBounds
		// raw is the delay before jitter for attempts 1..MaxRetries+1.
		raw []time.Duration
	}{
		{AggressiveName, equalBounds, []time.Duration{500 * ms, 1 * s, 2 * s, 4 * s}},
		{StandardName, equalBounds, []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s}},
		{PatientName, equalBounds, []time.Duration{2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s, 60 * s, 60 * s}},
		{CriticalName, equalBounds, []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 64 * s, 120 * s, 120 * s, 120 * s, 120 * s, 120 * s, 120 * s}},
		{NoneName, noJitterBounds, []time.Duration{1 * s}},
		{DefaultName, additive1s, []time.Duration{2 * s, 4 * s, 8 * s, 16 * s}},
		{OutboundName, proportional20, []time.Duration{2 * s, 4 * s, 8 * s, 8 * s}},
		{EmailName, noJitterBounds, []time.Duration{1 * m, 5 * m, 15 * m, 1 * h, 3 * h, 6 * h, 12 * h, 24 * h, 24 * h}},
		{ExponentialName, noJitterBounds, []time.Duration{5 * s, 30 * s, 5 * m, 5 * m}},
		{ImmediateName, noJitterBounds, []time.Duration{5 * s, 5 * s, 5 * s, 5 * s}},
		{ManualName, noJitterBounds, []time.Duration{5 * s}},
	}
	builtins := Builtins()
	require.Len(t, tests, len(builtins), "every builtin has a row")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := builtins[tt.name]
			require.True(t, ok)
			require.Len(t, tt.raw, p.MaxRetries+1, "rows cover attempts 1..max+1")
			for i, raw := range tt.raw {
				attempt := i + 1
				atZero, atHalf, upper := tt.bounds(raw)
				assert.Equal(t, atZero, p.Delay(attempt, 0), "attempt %d u=0", attempt)
				assert.Equal(t, atHalf, p.Delay(attempt, 0.5), "attempt %d u=0.5", attempt)
				high := p.Delay(attempt, uHigh)
				if upper == atZero {
					assert.Equal(t, upper, high, "attempt %d u→1", attempt)
					continue
				}
				assert.Greater(t, high, atHalf, "attempt %d u→1", attempt)
				assert.Less(t, high, upper, "attempt %d u→1", attempt)
				assert.Greater(t, high, upper-upper/1000, "attempt %d u→1 is near the bound", attempt)
			}
		})
	}
}

// Spot checks written out by hand, independent of the bound helpers above.
func TestDelaySpotChecks(t *testing.T) {
	b := Builtins()
	def, out, std := b[DefaultName], b[OutboundName], b[StandardName]

	assert.Equal(t, 2*time.Second, def.Delay(1, 0))
	assert.Equal(t, 2500*time.Millisecond, def.Delay(1, 0.5))
	assert.Less(t, def.Delay(1, uHigh), 3*time.Second)

	assert.Equal(t, 3200*time.Millisecond, out.Delay(2, 0))
	assert.Equal(t, 4*time.Second, out.Delay(2, 0.5))
	assert.Less(t, out.Delay(2, uHigh), 4800*time.Millisecond)

	assert.Equal(t, 15*time.Second, std.Delay(6, 0))
	assert.Equal(t, 22500*time.Millisecond, std.Delay(6, 0.5))
	assert.Less(t, std.Delay(6, uHigh), 30*time.Second)
	assert.Equal(t, 15*time.Second, std.Delay(100, 0), "stays capped far past the last retry")
}

func TestDelayEdges(t *testing.T) {
	exp := Policy{Backoff: Backoff{Kind: Exponential, Initial: time.Second, Multiplier: 2, Max: time.Minute}}

	t.Run("attempt below 1 counts as 1", func(t *testing.T) {
		assert.Equal(t, time.Second, exp.Delay(0, 0))
		assert.Equal(t, time.Second, exp.Delay(-5, 0))
	})
	t.Run("huge attempts reach the cap without overflow", func(t *testing.T) {
		assert.Equal(t, time.Minute, exp.Delay(1<<30, 0))
		assert.Equal(t, time.Minute, exp.Delay(math.MaxInt, 0))
		big := exp
		big.Backoff.Multiplier = 1e300
		assert.Equal(t, time.Minute, big.Delay(5, 0))
	})
	t.Run("u outside [0,1) is clamped", func(t *testing.T) {
		eq := exp
		eq.Jitter = Jitter{Mode: Equal}
		assert.Equal(t, 500*time.Millisecond, eq.Delay(1, -1))
		assert.Equal(t, 500*time.Millisecond, eq.Delay(1, math.NaN()))
		assert.LessOrEqual(t, eq.Delay(1, 7), time.Second, "u just under 1 rounds to at most raw")
		assert.Greater(t, eq.Delay(1, 1), 999*time.Millisecond)
	})
	t.Run("u of 1 stays below the bound", func(t *testing.T) {
		// Large enough that one ulp of u shows after rounding to nanoseconds.
		p := Policy{Backoff: Backoff{Kind: Schedule, Delays: []time.Duration{1 << 60}}, Jitter: Jitter{Mode: Proportional, Fraction: 1}}
		assert.Less(t, p.Delay(1, 1), time.Duration(1<<61))
		assert.Less(t, p.Delay(1, math.Inf(1)), time.Duration(1<<61))
	})
	t.Run("never negative", func(t *testing.T) {
		p := exp
		p.Jitter = Jitter{Mode: Proportional, Fraction: 3} // invalid, but must not go below 0
		assert.Equal(t, time.Duration(0), p.Delay(1, 0))
		p.Jitter = Jitter{Mode: Additive, Max: -10 * time.Second}
		assert.Equal(t, time.Duration(0), p.Delay(1, 0.9))
	})
	t.Run("saturates instead of overflowing", func(t *testing.T) {
		p := Policy{
			Backoff: Backoff{Kind: Exponential, Initial: math.MaxInt64 - 1, Multiplier: 2, Max: math.MaxInt64},
			Jitter:  Jitter{Mode: Additive, Max: math.MaxInt64},
		}
		assert.Equal(t, time.Duration(math.MaxInt64), p.Delay(3, 0.9))
	})
	t.Run("max 0 means no cap", func(t *testing.T) {
		p := exp
		p.Backoff.Max = 0
		assert.Equal(t, 1024*time.Second, p.Delay(11, 0))
	})
	t.Run("schedule reuses its last delay", func(t *testing.T) {
		p := Policy{Backoff: Backoff{Kind: Schedule, Delays: []time.Duration{time.Second, time.Minute}}}
		assert.Equal(t, time.Second, p.Delay(1, 0.7))
		assert.Equal(t, time.Minute, p.Delay(2, 0.7))
		assert.Equal(t, time.Minute, p.Delay(50, 0.7))
	})
	t.Run("invalid backoffs give 0", func(t *testing.T) {
		assert.Equal(t, time.Duration(0), Policy{Backoff: Backoff{Kind: Schedule}}.Delay(1, 0))
		assert.Equal(t, time.Duration(0), Policy{}.Delay(1, 0))
	})
	t.Run("empty jitter mode means none", func(t *testing.T) {
		assert.Equal(t, 4*time.Second, exp.Delay(3, 0.9))
	})
}

func TestJitterFraction(t *testing.T) {
	u := JitterFraction("msg-1", 1)
	assert.Equal(t, u, JitterFraction("msg-1", 1), "deterministic")
	assert.NotEqual(t, u, JitterFraction("msg-1", 2), "differs by attempt")
	assert.NotEqual(t, u, JitterFraction("msg-2", 1), "differs by key")
	// The separator keeps ("a1", 1) apart from ("a", 11).
	assert.NotEqual(t, JitterFraction("a1", 1), JitterFraction("a", 11))

	// FNV-1a 64 of "" is its offset basis; pins the algorithm, not just its properties.
	assert.Equal(t, float64(uint64(0xcbf29ce484222325)>>11)/(1<<53), fnvFraction(""))
	assert.Equal(t, fnvFraction("k:3"), JitterFraction("k", 3))

	const n = 10000
	sum := 0.0
	var low, high int
	for i := range n {
		v := JitterFraction("key-"+time.Duration(i).String(), i%7)
		require.GreaterOrEqual(t, v, 0.0)
		require.Less(t, v, 1.0)
		sum += v
		if v < 0.5 {
			low++
		} else {
			high++
		}
	}
	mean := sum / n
	assert.InDelta(t, 0.5, mean, 0.05, "mean")
	assert.InDelta(t, n/2, low, n/10, "lower half")
	assert.InDelta(t, n/2, high, n/10, "upper half")
}

// fnvFraction is FNV-1a 64 written out, to check JitterFraction against.
func fnvFraction(s string) float64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return float64(h>>11) / (1 << 53)
}
