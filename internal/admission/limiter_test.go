package admission

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	testBound   = 5 * time.Second
	testPeriod  = 2 * time.Second
	testMinRate = 1.0
)

// The lags the tests feed the limiter in place of a reading: above the bound, between half of
// it and it, and below half of it.
const (
	lagHigh = testBound + time.Second
	lagMid  = testBound * 3 / 4
	lagLow  = testBound / 4
)

func newTestLimiter(c *fakeClock) *limiter {
	return newLimiter(c.now, testBound, testMinRate, testPeriod)
}

// period takes n admissions over one period of the fake clock, then ends it with lag.
func period(c *fakeClock, l *limiter, n int, lag time.Duration) decision {
	for range n {
		l.take()
	}
	c.advance(testPeriod)
	return l.update(lag)
}

// engage runs one period of intake admissions a second and ends it above the bound.
func engage(t *testing.T, c *fakeClock, l *limiter, intake float64) decision {
	t.Helper()
	d := period(c, l, int(intake*testPeriod.Seconds()), lagHigh)
	require.Equal(t, stepEngaged, d.step)
	return d
}

func TestLimiterStaysUnlimitedWhileTheLagIsWithinTheBound(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	for _, lag := range []time.Duration{0, lagLow, lagMid, testBound} {
		d := period(c, l, 1000, lag)
		assert.Equal(t, stepNone, d.step, "lag %s", lag)
		assert.Equal(t, 500.0, d.intake)
		ok, wait := l.ready()
		assert.True(t, ok)
		assert.Zero(t, wait)
	}
	limited, rate := l.state()
	assert.False(t, limited)
	assert.Zero(t, rate)
}

func TestLimiterEngagesPastTheBoundAtFourFifthsOfTheIntake(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)

	d := engage(t, c, l, 50)

	assert.Equal(t, 50.0, d.intake)
	assert.InDelta(t, 40.0, d.rate, 1e-9)
	limited, rate := l.state()
	assert.True(t, limited)
	assert.InDelta(t, 40.0, rate, 1e-9)
	// No burst at the start: the first token comes after 1/40 s.
	ok, wait := l.ready()
	assert.False(t, ok)
	assert.Equal(t, 25*time.Millisecond, wait)
	c.advance(wait)
	ok, _ = l.ready()
	assert.True(t, ok)
}

func TestLimiterAdmitsAtItsRate(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 12.5) // a limit of 10/s

	// A caller that takes whenever it may, and otherwise waits as told, for 10 s.
	end := c.now().Add(10 * time.Second)
	admitted := 0
	for c.now().Before(end) {
		if ok, wait := l.ready(); ok {
			l.take()
			admitted++
		} else {
			require.Positive(t, wait)
			c.advance(wait)
		}
	}
	assert.InDelta(t, 100, admitted, 1, "10 s at 10/s")
}

func TestLimiterDecreasesWhileTheLagStaysAboveTheBound(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 100) // 80/s

	want := 80.0
	for range 3 {
		d := period(c, l, 0, lagHigh)
		want *= 0.8
		assert.Equal(t, stepDecreased, d.step)
		assert.InDelta(t, want, d.rate, 1e-9)
	}
}

func TestLimiterHoldsWhileTheLagIsAboveTheBoundButFalling(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 100) // 80/s
	d := period(c, l, 0, lagHigh)
	assert.Equal(t, stepDecreased, d.step)

	// The backlog drains: the lag falls, still above the bound; the rate holds, it does not
	// fall to the floor while the older backlog is served.
	for i := range 5 {
		d = period(c, l, 0, lagHigh-time.Duration(i+1)*time.Millisecond)
		assert.Equal(t, stepHeld, d.step)
		assert.InDelta(t, 64.0, d.rate, 1e-9)
	}
	// It grows again: the limit falls again.
	d = period(c, l, 0, lagHigh)
	assert.Equal(t, stepDecreased, d.step)
}

func TestLimiterIncreasesWhileTheLagIsBelowHalfTheBound(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 25) // 20/s

	// Demand at the limit: it binds, so it rises but is not released.
	rate := 20.0
	for range 5 {
		d := period(c, l, int(rate*testPeriod.Seconds()), lagLow)
		rate *= 1.1
		assert.Equal(t, stepIncreased, d.step)
		assert.InDelta(t, rate, d.rate, 1e-9)
	}
	limited, _ := l.state()
	assert.True(t, limited, "a limit that binds is not released")
}

func TestLimiterHoldsBetweenHalfTheBoundAndTheBound(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 25)

	d := period(c, l, 0, lagMid)

	assert.Equal(t, stepHeld, d.step)
	assert.InDelta(t, 20.0, d.rate, 1e-9)
}

func TestLimiterReleasesOnceDemandStaysUnderItWithLowLag(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 25) // 20/s

	// Two calm periods, then one at the limit: the count starts again.
	period(c, l, 4, lagLow)
	period(c, l, 4, lagLow)
	_, rate := l.state()
	period(c, l, int(rate*testPeriod.Seconds())+1, lagLow)
	// A period between half the bound and the bound also starts it again.
	period(c, l, 4, lagLow)
	period(c, l, 4, lagMid)
	for range releasePeriods - 1 {
		d := period(c, l, 4, lagLow)
		require.Equal(t, stepIncreased, d.step)
	}

	d := period(c, l, 4, lagLow)

	require.Equal(t, stepReleased, d.step)
	assert.Equal(t, 8*testPeriod, d.engagedFor, "from the engaging period's end to the release")
	assert.Zero(t, d.rate)
	limited, rate := l.state()
	assert.False(t, limited)
	assert.Zero(t, rate)
	ok, _ := l.ready()
	assert.True(t, ok)
	// Engaged again past the bound, from the intake of the period.
	d = period(c, l, 10, lagHigh)
	assert.Equal(t, stepEngaged, d.step)
	assert.InDelta(t, 4.0, d.rate, 1e-9)
}

func TestLimiterNeverGoesBelowMinRate(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)

	// Engaged with no intake at all: at the floor.
	d := engage(t, c, l, 0)
	assert.Equal(t, testMinRate, d.rate)
	for range 20 {
		d = period(c, l, 0, lagHigh)
		assert.Equal(t, testMinRate, d.rate)
	}

	// From above the floor, the decreases stop at it.
	l = newTestLimiter(c)
	engage(t, c, l, 5)
	for range 20 {
		d = period(c, l, 0, lagHigh)
		assert.GreaterOrEqual(t, d.rate, testMinRate)
	}
	assert.Equal(t, testMinRate, d.rate)
	l.take()
	ok, wait := l.ready()
	require.False(t, ok)
	assert.Equal(t, time.Second, wait, "at 1/s the next token is 1 s away")
}

func TestLimiterBoundZeroNeverLimits(t *testing.T) {
	c := newFakeClock()
	l := newLimiter(c.now, 0, testMinRate, testPeriod)

	for range 5 {
		d := period(c, l, 100, time.Hour)
		assert.Equal(t, stepNone, d.step)
		assert.Equal(t, 50.0, d.intake, "the intake is still measured")
	}
	limited, _ := l.state()
	assert.False(t, limited)
	ok, _ := l.ready()
	assert.True(t, ok)
}

func TestLimiterGiveReturnsATokenAndIntake(t *testing.T) {
	c := newFakeClock()
	l := newTestLimiter(c)
	engage(t, c, l, 0) // 1/s
	c.advance(time.Second)
	ok, _ := l.ready()
	require.True(t, ok)
	l.take()
	ok, _ = l.ready()
	require.False(t, ok)

	l.give()

	ok, _ = l.ready()
	assert.True(t, ok, "a deferred delivery's token is returned")
	l.take()
	l.give()
	l.give() // more given than taken in the period counts as no intake
	d := l.update(lagHigh)
	assert.Zero(t, d.intake)
}

func TestLimiterWaitIsCappedAtOnePeriod(t *testing.T) {
	c := newFakeClock()
	l := newLimiter(c.now, testBound, 0.01, testPeriod)
	engage(t, c, l, 0)

	ok, wait := l.ready()

	require.False(t, ok)
	assert.Equal(t, testPeriod, wait, "a release is seen within a period")
}

// Every session of a bridge and its handlers use one limiter at once (run with -race).
func TestLimiterIsSafeForConcurrentUse(t *testing.T) {
	l := newLimiter(time.Now, time.Millisecond, 1000, time.Millisecond)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 500 {
				if ok, _ := l.ready(); ok {
					l.take()
				}
				if i == 0 {
					l.give()
				}
			}
		})
	}
	wg.Go(func() {
		for j := range 100 {
			l.update(time.Duration(j%2) * time.Second)
		}
	})
	wg.Wait()
	_, rate := l.state()
	assert.GreaterOrEqual(t, rate, 0.0)
}
