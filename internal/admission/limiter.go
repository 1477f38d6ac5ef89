package admission

import (
	"sync"
	"time"
)

// The limiter's control law, per period (Config.Interval). Fixed rather than settings: the
// bound and the floor are what an operator tunes; these only shape how fast it converges.
const (
	// engageFactor: the first limit is this share of the intake of the period that crossed
	// the bound, so that the engine gets less than it was falling behind on.
	engageFactor = 0.8
	// decreaseFactor multiplies the limit each period the lag stays above the bound.
	decreaseFactor = 0.8
	// increaseFactor multiplies the limit each period the lag is below half the bound.
	increaseFactor = 1.1
	// releaseUtilization: a period whose intake stayed under this share of the limit had
	// less demand than the limit allowed.
	releaseUtilization = 0.9
	// releasePeriods is how many periods in a row of low lag and demand under the limit
	// release it.
	releasePeriods = 3
	// burstSpan is the bucket's depth in time at the limit: up to 100 ms of tokens at once,
	// never fewer than one.
	burstSpan = 100 * time.Millisecond
	// minWait keeps a refused caller from arming a timer that fires at once.
	minWait = time.Millisecond
)

// limiter is AIMD on an intake rate with a token bucket: unlimited until the lag passes the
// bound, then a rate that falls by decreaseFactor while the lag stays above the bound, rises
// by increaseFactor while it is below half of it, and is released once demand stays under it.
// Safe for concurrent use: every session of a bridge shares one.
type limiter struct {
	mu      sync.Mutex
	now     func() time.Time
	bound   time.Duration
	minRate float64
	// maxWait caps a refusal's wait at one period, so that a release is seen within one.
	maxWait time.Duration

	limited bool
	// rate is the limit in admissions a second, while limited.
	rate float64
	// tokens may go below 0: several loops that each saw a token take one each, and the
	// debt is paid from the refill.
	tokens   float64
	refilled time.Time

	// windowStart and taken are the current period's start and its net admissions.
	windowStart time.Time
	taken       int
	// calm counts the periods in a row with low lag and demand under the limit.
	calm      int
	engagedAt time.Time
	// lastLag is the previous period's lag: above the bound, the limit falls only while the
	// lag is not falling. Backlog age answers a cut only once the older backlog is served,
	// so cutting every period it stays high would drive the rate to the floor and leave the
	// engine idle below its capacity.
	lastLag time.Duration
}

func newLimiter(now func() time.Time, bound time.Duration, minRate float64, period time.Duration) *limiter {
	t := now()
	return &limiter{now: now, bound: bound, minRate: minRate, maxWait: period, refilled: t, windowStart: t}
}

// step is what one period's update did.
type step int

const (
	stepNone step = iota // unlimited, and stays so (or the limiter is disabled)
	stepEngaged
	stepDecreased
	stepIncreased
	stepHeld
	stepReleased
)

// decision is one period's update, for the logs and the metrics.
type decision struct {
	step step
	// intake is the period's net admissions a second.
	intake float64
	// rate is the limit after the update; 0 when unlimited.
	rate float64
	// engagedFor is how long the limit held, on a release.
	engagedFor time.Duration
}

// update ends a period whose engine lag was lag, and sets the limit for the next.
func (l *limiter) update(lag time.Duration) decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var d decision
	if secs := now.Sub(l.windowStart).Seconds(); secs > 0 {
		d.intake = max(0, float64(l.taken)) / secs
	}
	l.windowStart, l.taken = now, 0
	prevLag := l.lastLag
	l.lastLag = lag
	if l.bound <= 0 {
		return d
	}
	if !l.limited {
		if lag > l.bound {
			l.limited, l.engagedAt, l.calm = true, now, 0
			l.rate, l.refilled = max(l.minRate, engageFactor*d.intake), now
			// No burst at the start: the engine is behind already.
			l.tokens = 0
			d.step = stepEngaged
		}
		d.rate = l.currentRate()
		return d
	}
	was := l.rate
	switch {
	case lag > l.bound && lag < prevLag:
		// Above the bound but falling: the last cut is working; hold.
		l.calm = 0
		d.step = stepHeld
	case lag > l.bound:
		l.calm = 0
		l.setRate(now, max(l.minRate, l.rate*decreaseFactor))
		d.step = stepDecreased
	case lag < l.bound/2:
		// Demand under the limit, with the engine keeping up: the limit no longer binds.
		if d.intake < releaseUtilization*was {
			l.calm++
		} else {
			l.calm = 0
		}
		if l.calm >= releasePeriods {
			l.limited, l.calm = false, 0
			d.step, d.engagedFor = stepReleased, now.Sub(l.engagedAt)
			break
		}
		l.setRate(now, l.rate*increaseFactor)
		d.step = stepIncreased
	default:
		l.calm = 0
		d.step = stepHeld
	}
	d.rate = l.currentRate()
	return d
}

// ready reports whether one admission may be taken now; when not, wait is how long until
// one may (at least minWait, at most one period).
func (l *limiter) ready() (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.limited {
		return true, 0
	}
	l.refill(l.now())
	if l.tokens >= 1 {
		return true, 0
	}
	wait := time.Duration((1 - l.tokens) / l.rate * float64(time.Second))
	return false, min(max(wait, minWait), l.maxWait)
}

// take spends one admission.
func (l *limiter) take() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.taken++
	if l.limited {
		l.refill(l.now())
		l.tokens--
	}
}

// give returns one admission that made no report.
func (l *limiter) give() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.taken--
	if l.limited {
		l.refill(l.now())
		l.tokens = min(l.tokens+1, burst(l.rate))
	}
}

// state is the limit now: whether it holds, and its rate (0 when unlimited).
func (l *limiter) state() (bool, float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limited, l.currentRate()
}

func (l *limiter) currentRate() float64 {
	if !l.limited {
		return 0
	}
	return l.rate
}

// setRate refills at the old rate up to now, then takes the new one.
func (l *limiter) setRate(now time.Time, rate float64) {
	l.refill(now)
	l.rate = rate
	l.tokens = min(l.tokens, burst(rate))
}

func (l *limiter) refill(now time.Time) {
	if el := now.Sub(l.refilled).Seconds(); el > 0 {
		l.tokens = min(l.tokens+el*l.rate, burst(l.rate))
	}
	l.refilled = now
}

// burst is the bucket's depth at rate: burstSpan of tokens, at least one.
func burst(rate float64) float64 {
	return max(1, rate*burstSpan.Seconds())
}
