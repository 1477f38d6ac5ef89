//go:build integration && cluster

package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/rabbitcluster"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// On a three-node RabbitMQ cluster with quorum queues, the node the bridge consumes through
// crashes while messages flow: the bridge and the publishers reconnect to the other nodes,
// and every message reaches its destination, duplicates only with the same x-retry-key.
func TestClusterNodeLossUnderLoad(t *testing.T) {
	cl := rabbitcluster.Start(t, 3)
	started := time.Now()
	s := newStackWith(t, devserver.StartForTest(t), stackOptions{brokerURLs: cl.URLs(), queueType: broker.QueueTypeQuorum})
	s.run("all")
	orders := s.queue(s.prefix+".orders", amqp.Table{"x-queue-type": "quorum"})
	c := s.consume(orders, nil)

	// The node the bridge consumes the ingress queue through. A quorum queue keeps listing a
	// consumer of a crashed node (as suspected down) until the node returns: only consumers on
	// running nodes count.
	bridgeNode := func() (*rabbitcluster.Node, error) {
		nodes, err := cl.ConsumerNodes(s.ingress)
		if err != nil {
			return nil, err
		}
		nodes = slices.DeleteFunc(nodes, func(n *rabbitcluster.Node) bool { return !n.Running() })
		if len(nodes) != 1 {
			return nil, fmt.Errorf("%d consumers of %s on running nodes, want the bridge alone", len(nodes), s.ingress)
		}
		return nodes[0], nil
	}
	killed, err := bridgeNode()
	require.NoError(t, err)
	// The service's connections (bridge and publisher) share one name; the publisher connects
	// at its first publish.
	svcConn := s.cfg.ServiceName + "-all"

	const n = 200
	third := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		for i := range n {
			if i == n/3 {
				close(third)
			}
			m := message.RetryMessage{MessageID: fmt.Sprintf("c-%d", i), OriginalPayload: []byte(fmt.Sprint(i)), OriginalQueue: orders, ErrorReason: "503"}
			if err := sendRetryUntil(s, m, time.Now().Add(2*time.Minute)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	<-third
	before, err := cl.ConnectionNodes(svcConn)
	require.NoError(t, err)
	killed.Kill()
	t.Logf("killed %s, the bridge's node (%d of the service's %d connections), after %d of %d publishes began",
		killed.Name, countNode(before, killed), len(before), n/3, n)
	require.NoError(t, <-published)

	keys := map[string]map[string]bool{}
	eventually(t, 5*time.Minute, func() error {
		clear(keys)
		for _, d := range c.all() {
			if keys[d.MessageId] == nil {
				keys[d.MessageId] = map[string]bool{}
			}
			k, _ := d.Headers["x-retry-key"].(string)
			keys[d.MessageId][k] = true
		}
		if len(keys) < n {
			return fmt.Errorf("%d of %d republished", len(keys), n)
		}
		return nil
	})
	for id, ks := range keys {
		require.Len(t, ks, 1, "message %s arrived with different keys: %v", id, ks)
		require.True(t, ks[id+":1"], "message %s key", id)
	}
	eventually(t, time.Minute, func() error {
		now, err := bridgeNode()
		if err != nil {
			return err
		}
		if now == killed {
			return fmt.Errorf("the bridge consumes through %s", now.Name)
		}
		return nil
	})
	// Both of the service's connections are up again, on the nodes left.
	eventually(t, time.Minute, func() error {
		nodes, err := cl.ConnectionNodes(svcConn)
		if err != nil {
			return err
		}
		if len(nodes) != 2 || countNode(nodes, killed) > 0 {
			return fmt.Errorf("the service's connections are on %v, want two, none on %s", nodeNames(nodes), killed.Name)
		}
		return nil
	})
	require.True(t, httpOK("http://"+s.cfg.HTTPAddr+"/readyz"), "service ready after the failover")
	dups := len(c.all()) - n
	t.Logf("%d messages, node %s killed mid-run: 0 lost, %d duplicates (same key); %s after the cluster was up",
		n, killed.Name, dups, time.Since(started).Round(100*time.Millisecond))
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

func countNode(nodes []*rabbitcluster.Node, n *rabbitcluster.Node) int {
	c := 0
	for _, m := range nodes {
		if m == n {
			c++
		}
	}
	return c
}

func nodeNames(nodes []*rabbitcluster.Node) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return names
}
