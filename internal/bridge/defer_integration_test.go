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
// for 500 ms each are all reported about 500 ms after they came, not one after another.
func TestIntegrationHoldReportsWhenDue(t *testing.T) {
	const hold = 500 * time.Millisecond
	var mu sync.Mutex
	received := map[string]time.Time{}
	f := newFixture(t, Config{Workers: 1, Prefetch: 64, Defer: func(r message.FailureReport) time.Duration {
		mu.Lock()
		received[r.Message.MessageID] = r.ReportedAt
		mu.Unlock()
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
	assert.Less(t, elapsed, n*hold/2, "one worker waited for none of them in turn")
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
