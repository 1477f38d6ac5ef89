//go:build integration

package e2e

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The fault-under-load scenarios (a RabbitMQ node, a Temporal host): n messages published
// while a fault strikes, each expected back on its queue exactly under its first retry's key.

// publishThenFault publishes n first failures for queue, ids "<prefix>-<i>", from a goroutine
// (each sent again until the broker confirms it, as a producer does), and calls fault as soon
// as the first third have begun: at once, so that the fault strikes while they are in
// flight. It returns when every publish is confirmed, with when fault returned.
func publishThenFault(t *testing.T, s *stack, queue, prefix string, n int, fault func()) (faultAt time.Time) {
	t.Helper()
	third := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		for i := range n {
			if i == n/3 {
				close(third)
			}
			m := message.RetryMessage{MessageID: fmt.Sprintf("%s-%d", prefix, i), OriginalPayload: []byte(fmt.Sprint(i)), OriginalQueue: queue, ErrorReason: "503"}
			if err := sendRetryUntil(s, m, time.Now().Add(2*time.Minute)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	<-third
	fault()
	faultAt = time.Now()
	require.NoError(t, <-published)
	return faultAt
}

// keysByMessage is the x-retry-key values each message arrived with, by message id.
func keysByMessage(ds []amqp.Delivery) map[string]map[string]bool {
	keys := map[string]map[string]bool{}
	for _, d := range ds {
		if keys[d.MessageId] == nil {
			keys[d.MessageId] = map[string]bool{}
		}
		k, _ := d.Headers["x-retry-key"].(string)
		keys[d.MessageId][k] = true
	}
	return keys
}

// requireFirstKeyOnly checks that every message arrived under one key, its first retry's:
// a duplicate is a copy of that retry, never a second attempt.
func requireFirstKeyOnly(t *testing.T, keys map[string]map[string]bool) {
	t.Helper()
	for id, ks := range keys {
		require.Len(t, ks, 1, "message %s arrived with different keys: %v", id, ks)
		require.True(t, ks[id+":1"], "message %s key", id)
	}
}

// sendRetryUntil publishes m again until the broker confirms it or the deadline passes: a
// publish in flight when a node dies fails, and the producer sends it again (the workflow ID
// makes the copy a duplicate the scheduler drops).
func sendRetryUntil(s *stack, m message.RetryMessage, deadline time.Time) error {
	for {
		err := s.sendRetry(m)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("publish %s: %w", m.MessageID, err)
		}
		time.Sleep(100 * time.Millisecond) // a retry's pause, not a wait for an event
	}
}
