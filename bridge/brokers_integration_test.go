//go:build integration

package bridge

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// With a list of brokers of which only the last answers AMQP (a closed port, then nodes that
// drop every connection), the bridge consumes and dead-letters through its publisher, and
// after each lost connection it reconnects past the dead ones. Every dial shuffles the list,
// so the dead ones come first in most dials; the test checks they were tried.
func TestIntegrationBrokerListSkipsDeadNodes(t *testing.T) {
	var dropped atomic.Int64
	urls := []string{"amqp://guest:guest@127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/"}
	for range 3 {
		urls = append(urls, "amqp://guest:guest@"+droppingListener(t, &dropped)+"/")
	}
	urls = append(urls, brokertest.URL())

	f := newFixtureOn(t, Config{}, strings.Join(urls, ","))
	f.start()

	const rounds = 5
	for i := range rounds {
		good, junk := fmt.Sprintf("good-%d", i), fmt.Sprintf("junk-%d", i)
		f.publishRetry(good)
		f.publish(f.ingress, amqp.Publishing{ContentType: "text/plain", MessageId: junk, Body: []byte("not a retry message")})
		f.eventually(good+" accepted", 20*time.Second, func() bool { return f.reporter.count(good) == 1 })
		f.eventually(junk+" dead-lettered", 20*time.Second, func() bool { return outcomes(f.metrics, OutcomePoison) == float64(i+1) })
		d, ok, err := f.ch.Get(f.dlq, true)
		require.NoError(t, err)
		require.True(t, ok, "envelope of %s on the dead-letter queue", junk)
		var env message.Envelope
		require.NoError(t, json.Unmarshal(d.Body, &env))
		assert.Equal(t, junk, env.MessageID)

		// Lose the bridge's connection: the next round needs it to dial the list again.
		f.mu.Lock()
		conns := f.conns
		f.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		// Ready alone can still read the lost session's state: wait for the new connection.
		f.eventually("bridge consuming on a new connection", 20*time.Second, func() bool {
			f.mu.Lock()
			n := len(f.conns)
			f.mu.Unlock()
			return n > len(conns) && f.bridge.Ready()
		})
	}
	f.mu.Lock()
	dials := len(f.conns)
	f.mu.Unlock()
	assert.GreaterOrEqual(t, dials, rounds+1, "one bridge connection per round, plus the one after the last")
	// Each dial tries a dead node before the live one with odds 4/5: never in 6 dials is
	// 1 in 15,625.
	assert.Positive(t, dropped.Load(), "the dead nodes were tried")
	assert.Equal(t, 0, f.messages(f.dlq), "every envelope read")
}

// closedPort is a loopback port nothing listens on (just released by the kernel).
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// droppingListener is a node that accepts TCP connections and closes them at once, counting
// them in n; it returns its host:port.
func droppingListener(t *testing.T, n *atomic.Int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}
