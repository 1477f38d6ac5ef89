//go:build integration

package e2e

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
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
	var logs lockedBuffer
	s := newStackWith(t, devserver.StartForTest(t), stackOptions{brokerURLs: cl.URLs(), queueType: broker.QueueTypeQuorum, logger: textLogger(&logs)})
	s.run("all")

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
	// The destination queue's leader is on that node too (a quorum queue's leader is on the
	// node it is declared through): the crash moves it under the worker's publishes.
	orders := s.queueOn(killed.URL, s.prefix+".orders", amqp.Table{"x-queue-type": "quorum"})
	const n = 200
	var keys map[string]map[string]bool
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		clusterDiagnosis(t, cl, &logs)
		// The first messages missing: where their workflows are.
		missing := 0
		for i := 0; i < n && missing < 5; i++ {
			id := fmt.Sprintf("c-%d", i)
			if keys[id] != nil {
				continue
			}
			missing++
			st, err := s.state(message.WorkflowID(orders, id))
			t.Logf("missing %s: workflow state %+v (%v), status %q", id, st, err, s.retryStatus(message.WorkflowID(orders, id)))
		}
	})
	c := s.consume(orders, nil)
	// The service's connections (bridge and publisher) share one name; the publisher connects
	// at its first publish.
	svcConn := s.cfg.ServiceName + "-all"

	// Killed at once, while the first third is in flight: no rabbitmqctl call in between
	// (each takes seconds on a busy machine, time enough for the flow to drain).
	killedAt := publishThenFault(t, s, orders, "c", n, func() { require.NoError(t, killed.Kill()) })
	t.Logf("killed %s, the bridge's node and the destination queue's leader, after %d of %d publishes began", killed.Name, n/3, n)

	eventually(t, 5*time.Minute, func() error {
		if keys = keysByMessage(c.all()); len(keys) < n {
			return fmt.Errorf("%d of %d republished", len(keys), n)
		}
		return nil
	})
	settled := time.Since(killedAt)
	requireFirstKeyOnly(t, keys)
	eventually(t, patience, func() error {
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
	eventually(t, patience, func() error {
		nodes, err := cl.ConnectionNodes(svcConn)
		if err != nil {
			return err
		}
		if len(nodes) != 2 || countNode(nodes, killed) > 0 {
			return fmt.Errorf("the service's connections are on %v, want two, none on %s", nodeNames(nodes), killed.Name)
		}
		return nil
	})
	require.Eventually(t, func() bool { return httpOK("http://" + s.cfg.HTTPAddr + "/readyz") }, patience, 100*time.Millisecond, "service ready after the failover")
	dups := len(c.all()) - n
	// Whether the publisher's connection was on the killed node (its channels then all open
	// anew while the destination's leader moves), from the service's log.
	publisherMoved := strings.Contains(logs.String(), `msg="amqp connection lost; reconnecting on next publish" component=publisher`)
	t.Logf("%d messages, node %s killed mid-run (publisher's connection on it: %v): 0 lost, %d duplicates (same key); "+
		"all republished %s after the kill; %s after the cluster was up",
		n, killed.Name, publisherMoved, dups, settled.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond))
}

// clusterDiagnosis logs what a stalled run needs to be understood: the queues as each
// running node sees them (leader, members, counts, consumers), the connections, and the end
// of the service's log.
func clusterDiagnosis(t *testing.T, cl *rabbitcluster.Cluster, logs *lockedBuffer) {
	for _, n := range cl.Nodes {
		if !n.Running() {
			continue
		}
		out, err := n.Ctl("list_queues", "-q", "name", "type", "leader", "members", "online",
			"messages_ready", "messages_unacknowledged", "consumers")
		t.Logf("queues seen by %s (%v):\n%s", n.Name, err, out)
	}
	out, err := cl.Ctl("list_connections", "-q", "name", "client_properties", "state", "channels")
	t.Logf("connections (%v):\n%s", err, out)
	out, err = cl.Ctl("list_consumers", "-q")
	t.Logf("consumers (%v):\n%s", err, out)
	lines := strings.Split(logs.String(), "\n")
	var warnings []string
	for _, l := range lines {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			warnings = append(warnings, l)
		}
	}
	t.Logf("service warnings and errors, first %d of %d:\n%s", min(len(warnings), 300), len(warnings), strings.Join(warnings[:min(len(warnings), 300)], "\n"))
	t.Logf("service log, last %d of %d lines:\n%s", min(len(lines), 100), len(lines), strings.Join(lines[max(0, len(lines)-100):], "\n"))
}

// textLogger logs at info, as text, to w.
func textLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
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
