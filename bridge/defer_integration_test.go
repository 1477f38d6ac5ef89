//go:build integration

package bridge

import (
	"fmt"
	"sync"
	"time"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// Deliveries whose first delay the bridge waits out (Config.Hold) are reported when due,
// unacked meanwhile and without holding a handler: with one worker, twenty deliveries held
// for 500 ms each wait at the same time, not one after another. That is an order, checked as
// one: the one worker took further deliveries (and began their waits) before it reported the
// first, which a worker waiting out each delay in turn never does. (How soon they were all
// reported, about 500 ms after they came, is a figure the test logs.)
func TestIntegrationHoldReportsWhenDue(t *testing.T) {
	const hold = 500 * time.Millisecond
	var mu sync.Mutex
	received := map[string]time.Time{}
	var f *fixture
	// waitingAtOnce is the most deliveries taken and not yet reported at one time.
	waitingAtOnce := 0
	f = newFixture(t, Config{Workers: 1, Prefetch: 64, Defer: func(r message.FailureReport) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if _, again := received[r.Message.MessageID]; !again {
			received[r.Message.MessageID] = r.ReportedAt
			waitingAtOnce = max(waitingAtOnce, len(received)-f.reporter.total())
		}
		return hold
	}})
	f.start()
	defer func() {
		if f.stop != nil {
			f.stop()
		}
	}()
	const n = 20
	sent := time.Now()
	for i := range n {
		f.publishRetry(fmt.Sprintf("hold-%d", i))
	}
	for range n {
		f.waitCall(10 * time.Second)
	}
	elapsed := time.Since(sent)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, received, n)
	for i := range n {
		id := fmt.Sprintf("hold-%d", i)
		assert.Equal(t, 1, f.reporter.count(id), id)
	}
	assert.GreaterOrEqual(t, elapsed, hold, "reported no sooner than due")
	assert.GreaterOrEqual(t, waitingAtOnce, 2, "the one worker waited out the delays in turn: it took no delivery while another waited")
	t.Logf("%d deliveries, %d waiting at once at most, all reported %s after the first publish (each held %s)", n, waitingAtOnce, elapsed.Round(time.Millisecond), hold)
	f.stop()
	assert.Equal(t, 0, f.messages(f.ingress), "all acked")
	assert.Equal(t, float64(n), outcomes(f.metrics, OutcomeAccepted))
}

// A bridge that stops while deliveries wait out their delay gives them back to the broker:
// nothing is acked that was not reported.
func TestIntegrationHoldRequeuedOnShutdown(t *testing.T) {
	f := newFixture(t, Config{Defer: func(message.FailureReport) time.Duration { return time.Hour }})
	f.start()
	for i := range 5 {
		f.publishRetry(fmt.Sprintf("wait-%d", i))
	}
	f.eventually("deliveries taken", 10*time.Second, func() bool { return f.messages(f.ingress) == 0 })
	f.stop()
	f.eventually("deliveries back in the queue", 10*time.Second, func() bool { return f.messages(f.ingress) == 5 })
	assert.Zero(t, f.reporter.count("wait-0"), "nothing reported")
}
