//go:build integration

package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/rabbitcluster"
)

// The node of a quorum queue's leader crashes, and the Publisher's channels, on another node,
// first publish to the queue before the cluster has moved the leader: the broker nacks such a
// channel's publishes to the queue, and RabbitMQ 3.10 keeps nacking them for as long as the
// channel lives. The Publisher drops a channel the broker nacked, so the nacks end with the
// leader's move. Kept in the pool, such channels fail every publish that draws them, and
// when all of the pool's channels open in that window (a worker's publishes resuming at once
// after a reconnect) no publish goes through again.
func TestPublisherGetsPastAQuorumLeaderCrash(t *testing.T) {
	c := rabbitcluster.Start(t, 3)
	leader, survivor := c.Nodes[0], c.Nodes[1]

	// A quorum queue's leader is on the node it is declared through.
	const queue = "leader-crash"
	admin, err := amqp.Dial(leader.URL)
	require.NoError(t, err)
	ch, err := admin.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	_ = admin.Close()

	const channels = 4
	p := NewPublisher(Config{URL: survivor.URL, Channels: channels, ConnectionName: "leader-crash"}, nil)
	t.Cleanup(func() { _ = p.Close() })
	var nacks atomic.Int64
	// publish publishes until the broker confirms, at most for a minute, counting the nacks.
	publish := func(body string) error {
		deadline := time.Now().Add(time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := p.Publish(ctx, "", queue, true, amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent})
			cancel()
			if err == nil {
				return nil
			}
			if errors.Is(err, ErrNacked) {
				nacks.Add(1)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not confirmed within a minute (%d nacks): %w", body, nacks.Load(), err)
			}
			time.Sleep(50 * time.Millisecond) // a publisher's pause before it sends again
		}
	}

	// Every channel of the pool opens and first publishes to the queue as the leader dies.
	require.NoError(t, leader.Kill())
	errs := make([]error, channels)
	var wg sync.WaitGroup
	for i := range channels {
		wg.Go(func() { errs[i] = publish(fmt.Sprint("crash-", i)) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	during := nacks.Swap(0)

	// The leader has moved: the pool's channels all confirm.
	const after = 10 * channels
	for i := range after {
		require.NoError(t, publish(fmt.Sprint("after-", i)))
	}
	assert.Zero(t, nacks.Load(), "nacks once the leader moved, in %d publishes", after)
	t.Logf("%d nacks while the leader moved, %d after it in %d publishes; %d connections",
		during, nacks.Load(), after, p.Connections())
}
