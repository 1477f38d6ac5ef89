package rabbitcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Ctl runs rabbitmqctl against a running node of the cluster (the first one that answers),
// returning its output.
func (c *Cluster) Ctl(args ...string) ([]byte, error) {
	var lastErr error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		out, err := n.Ctl(args...)
		if err == nil {
			return out, nil
		}
		lastErr = fmt.Errorf("rabbitmqctl -n %s %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("rabbitmqctl %s: no node running", strings.Join(args, " "))
	}
	return nil, lastErr
}

// Ctl runs rabbitmqctl against the node.
func (n *Node) Ctl(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(n.c.bin, "rabbitmqctl"), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.c.env(n.Name)
	return cmd.CombinedOutput()
}

// QueueLeader is the node that leads quorum queue queue (of the default vhost), as the queue's
// record names it. After the leader's node went down, and until the queue has elected another
// leader, it returns an error: the caller asks again.
func (c *Cluster) QueueLeader(queue string) (*Node, error) {
	// JSON, for a queue name with a tab or a space in it; the leader is a node name.
	out, err := c.Ctl("list_queues", "-q", "--formatter", "json", "name", "leader")
	if err != nil {
		return nil, fmt.Errorf("leader of %s: %w", queue, err)
	}
	var queues []struct {
		Name   string `json:"name"`
		Leader string `json:"leader"`
	}
	if err := json.Unmarshal(out, &queues); err != nil {
		return nil, fmt.Errorf("leader of %s: list_queues: %w: %s", queue, err, out)
	}
	for _, q := range queues {
		if q.Name != queue {
			continue
		}
		// RabbitMQ reports no leader when the leader's process is not alive.
		if q.Leader == "" {
			return nil, fmt.Errorf("leader of %s: none (not a quorum queue, or electing one)", queue)
		}
		for _, n := range c.Nodes {
			if n.Name == q.Leader {
				return n, nil
			}
		}
		return nil, fmt.Errorf("leader of %s: %s is no node of the cluster", queue, q.Leader)
	}
	return nil, fmt.Errorf("leader of %s: no such queue", queue)
}

// CloseConnections closes every client connection to the cluster whose connection_name
// client property starts with prefix (a test's or a soak's own, never another's), as an
// operator would with rabbitmqctl close_connection, and returns how many it closed.
func (c *Cluster) CloseConnections(prefix, reason string) (int, error) {
	if prefix == "" {
		return 0, errors.New("close connections: an empty prefix would close every one")
	}
	conns, err := c.connections()
	if err != nil {
		return 0, fmt.Errorf("close connections: %w", err)
	}
	closed := 0
	var errs []error
	for _, conn := range conns {
		if !strings.HasPrefix(conn.name, prefix) {
			continue
		}
		// Any node closes a connection of any other (the pid names its node).
		if _, err := c.Ctl("close_connection", conn.pid, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		closed++
	}
	if err := errors.Join(errs...); err != nil {
		return closed, fmt.Errorf("close connections %s*: %w", prefix, err)
	}
	return closed, nil
}

// connection is a client connection as rabbitmqctl list_connections shows it.
type connection struct {
	pid  string // <node.N.N.N>
	name string // the connection_name client property; "" without one
}

// connections lists the cluster's client connections. The table format is read because it
// prints pids as <node.N.N.N>, the form close_connection accepts and nodeOfPid reads (the
// JSON one does not).
func (c *Cluster) connections() ([]connection, error) {
	out, err := c.Ctl("list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	if err != nil {
		return nil, err
	}
	var conns []connection
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || !strings.HasPrefix(pid, "<") {
			continue
		}
		conn := connection{pid: pid}
		if m := connectionNameRE.FindStringSubmatch(props); m != nil {
			conn.name = m[1]
		}
		conns = append(conns, conn)
	}
	return conns, nil
}

// connectionNameRE finds connection_name in rabbitmqctl's table rendering of client properties.
var connectionNameRE = regexp.MustCompile(`\{"connection_name","([^"]*)"\}`)

// ConsumerNodes is, for each consumer of queue, the node its client is connected to: the
// node of its channel's process (rabbitmqctl list_consumers shows pids as <node.N.N.N>).
func (c *Cluster) ConsumerNodes(queue string) ([]*Node, error) {
	out, err := c.Ctl("list_consumers", "-q", "--no-table-headers", "queue_name", "channel_pid")
	if err != nil {
		return nil, err
	}
	var nodes []*Node
	for line := range strings.Lines(string(out)) {
		q, pid, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || q != queue {
			continue
		}
		n := c.nodeOfPid(pid)
		if n == nil {
			return nil, fmt.Errorf("consumer of %s: channel pid %s is on no node of the cluster", queue, pid)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// nodeOfPid is the node an Erlang pid printed as <name@host.N.N.N> lives on, or nil.
func (c *Cluster) nodeOfPid(pid string) *Node {
	for _, n := range c.Nodes {
		if strings.HasPrefix(pid, "<"+n.Name+".") {
			return n
		}
	}
	return nil
}

// ConnectionNodes is, for each client connection named name (its connection_name client
// property), the node it is connected to.
func (c *Cluster) ConnectionNodes(name string) ([]*Node, error) {
	conns, err := c.connections()
	if err != nil {
		return nil, err
	}
	var nodes []*Node
	for _, conn := range conns {
		if conn.name != name {
			continue
		}
		n := c.nodeOfPid(conn.pid)
		if n == nil {
			return nil, fmt.Errorf("connection %s: pid %s is on no node of the cluster", name, conn.pid)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
