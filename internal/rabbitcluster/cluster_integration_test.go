//go:build integration

package rabbitcluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
)

// A message on a quorum queue survives the crash of the node it was published through: the
// other two still serve it, and the crashed node rejoins when started again.
func TestClusterSurvivesANodeCrash(t *testing.T) {
	c := Start(t, 3)
	require.Len(t, c.Nodes, 3)
	running, err := c.runningNodes()
	require.NoError(t, err)
	assert.Len(t, running, 3)

	// broker.Dial over the whole list spreads connections over the nodes: twelve all on one
	// node has odds of 1 in 59,049.
	for range 12 {
		conn, err := broker.Dial(broker.Config{URL: c.URLs(), ConnectionName: "spread"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
	}
	spread, err := c.ConnectionNodes("spread")
	require.NoError(t, err)
	require.Len(t, spread, 12)
	slices.SortFunc(spread, func(a, b *Node) int { return a.index - b.index })
	assert.Greater(t, len(slices.Compact(spread)), 1, "connections on more than one node")

	// CloseConnections closes the connections named with its prefix, and no other: not the
	// twelve above, nor one whose name holds the prefix further in.
	prefix := fmt.Sprintf("close-%d-", time.Now().UnixNano())
	target := dialNamed(t, c.URLs(), prefix+"1")
	other := dialNamed(t, c.URLs(), "not-"+prefix+"1")
	closedTarget := target.NotifyClose(make(chan *amqp.Error, 1))
	_, err = c.CloseConnections("", "everyone")
	require.Error(t, err, "an empty prefix")
	closed, err := c.CloseConnections(prefix, "closed by the test")
	require.NoError(t, err)
	assert.Equal(t, 1, closed)
	select {
	case cerr := <-closedTarget:
		require.NotNil(t, cerr)
		assert.Equal(t, amqp.ConnectionForced, cerr.Code)
		assert.Contains(t, cerr.Reason, "closed by the test")
	case <-time.After(30 * time.Second):
		t.Fatal("the connection named with the prefix is still open")
	}
	och, err := other.Channel() // a round trip: the other connection is still served
	require.NoError(t, err)
	require.NoError(t, och.Close())

	first := dial(t, c.Nodes[0].URL)
	ch, err := first.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	_, err = ch.QueueDeclare("q", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "q", true, false, amqp.Publishing{Body: []byte("m1"), DeliveryMode: amqp.Persistent})
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	// This test's connection to node 1 consumes from q: list_consumers places it there.
	cch, err := first.Channel()
	require.NoError(t, err)
	_, err = cch.Consume("q", "", false, false, false, false, amqp.Table{"x-priority": int32(-1)})
	require.NoError(t, err)
	nodes, err := c.ConsumerNodes("q")
	require.NoError(t, err)
	assert.Equal(t, []*Node{c.Nodes[0]}, nodes)
	require.NoError(t, cch.Close()) // gives m1 back unacked, if it got it

	// The queue's leader is on the node it was declared through.
	leader, err := c.QueueLeader("q")
	require.NoError(t, err)
	require.Equal(t, c.Nodes[0], leader)
	_, err = c.QueueLeader("no-such-queue")
	require.Error(t, err)

	require.NoError(t, c.Nodes[0].Kill())
	assert.False(t, c.Nodes[0].Running())
	require.NoError(t, c.Nodes[0].Kill(), "killing a dead node")

	// The queue elects a leader among the running nodes; until then QueueLeader names none.
	deadline := time.Now().Add(60 * time.Second)
	for {
		next, err := c.QueueLeader("q")
		if err == nil && next != leader && next.Running() {
			t.Logf("leader of q moved from %s to %s", leader.Name, next.Name)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader of q: %v, %v", next, err)
		}
		t.Logf("leader of q: %v, %v", next, err)
		time.Sleep(500 * time.Millisecond)
	}

	// Until the queue has elected a new leader, a Get fails and closes its channel (or, on a
	// node still noticing the loss, its connection): try again on a new one.
	var got amqp.Delivery
	deadline = time.Now().Add(60 * time.Second)
	for {
		d, ok, err := getOne(c.Nodes[1].URL, "q")
		if err == nil && ok {
			got = d
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message from a surviving node: ok=%v err=%v", ok, err)
		}
		t.Logf("get from %s: ok=%v err=%v", c.Nodes[1].Name, ok, err)
		time.Sleep(500 * time.Millisecond)
	}
	assert.Equal(t, "m1", string(got.Body))

	require.Error(t, c.Nodes[1].Restart(), "restarting a running node")
	require.NoError(t, c.Nodes[0].Restart())
	assert.True(t, c.Nodes[0].Running())
	running, err = c.runningNodes()
	require.NoError(t, err)
	assert.Len(t, running, 3, "the restarted node rejoined")
	assert.Equal(t, c.Nodes[2], c.NodeByPort(c.Nodes[2].Port))
}

func dial(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// dialNamed dials url with the connection_name client property name.
func dialNamed(t *testing.T, url, name string) *amqp.Connection {
	t.Helper()
	conn, err := broker.Dial(broker.Config{URL: url, ConnectionName: name})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// getOne gets one message from queue on a connection of its own.
func getOne(url, queue string) (amqp.Delivery, bool, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return amqp.Delivery{}, false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return amqp.Delivery{}, false, err
	}
	return ch.Get(queue, true)
}
