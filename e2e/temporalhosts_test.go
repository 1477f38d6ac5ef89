//go:build integration && temporalhosts

package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// On Temporal run as two hosts (two server processes, each with all four services, on one
// PostgreSQL, PostgresHistoryShards shards in one membership ring), the host the service
// does not dial is SIGKILLed while messages flow: its shards move to the host left, and
// every message still reaches its destination, duplicates only with the same x-retry-key.
func TestTemporalHostLossUnderLoad(t *testing.T) {
	hostLossUnderLoad(t, false)
}

// The same with the service given both frontends (TEMPORAL_ADDRESS a list, the killed host
// first, so that it also names the connection's authority): the service balances over both
// and goes on with the one left.
func TestTemporalDialledHostLossUnderLoad(t *testing.T) {
	hostLossUnderLoad(t, true)
}

// hostLossUnderLoad runs the scenario: the second host is killed a third into 200 messages;
// dialled says whether the service dials it too.
func hostLossUnderLoad(t *testing.T, dialled bool) {
	hosts := devserver.StartHostsForTest(t, 2)
	started := time.Now()
	s := newStackOn(t, hosts[0])
	if dialled {
		s.cfg.TemporalAddress = hosts[1].Address + "," + hosts[0].Address
	}
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	var mu sync.Mutex
	var arrivals []time.Time
	c := s.consume(orders, func(d amqp.Delivery) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		_ = d.Ack(false)
	})

	const n = 200
	killedAt := publishThenFault(t, s, orders, "h", n, func() { require.NoError(t, hosts[1].Kill()) })
	t.Logf("killed the second Temporal host (pid %d) after %d of %d publishes began", hosts[1].Pid(), n/3, n)

	var keys map[string]map[string]bool
	// The longest time no message arrived, after the kill: the shards' move as the service
	// sees it.
	var longestGap time.Duration
	eventually(t, 6*time.Minute, func() error {
		keys = keysByMessage(c.all())
		last := killedAt
		mu.Lock()
		for _, at := range arrivals {
			if at.After(killedAt) {
				longestGap = max(longestGap, at.Sub(last))
				last = at
			}
		}
		mu.Unlock()
		if len(keys) < n {
			return fmt.Errorf("%d of %d republished", len(keys), n)
		}
		return nil
	})
	settled := time.Since(killedAt)
	requireFirstKeyOnly(t, keys)
	require.True(t, httpOK("http://"+s.cfg.HTTPAddr+"/readyz"), "service ready after the host's loss")
	t.Logf("%d messages on two Temporal hosts, one SIGKILLed mid-run (the service dials %s): 0 lost, %d duplicates (same key); all republished %s after the kill, "+
		"longest time without an arrival after it %s; %s after the hosts were up",
		n, s.cfg.TemporalAddress, len(c.all())-n, settled.Round(100*time.Millisecond), longestGap.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond))
}
