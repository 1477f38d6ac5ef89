// Package rabbitcluster runs a private RabbitMQ cluster for a test: several nodes of the
// machine's rabbitmq-server on free loopback ports, each with its own data, log and config
// files under a temporary directory and one Erlang cookie, so the shared broker is never
// touched. A test can kill a node (SIGKILL, a crash) and start it again.
//
// The first node boots alone; the others boot at once, joining it through classic
// peer discovery (the cluster_formation settings in their config files), which spares the
// stop_app/join_cluster/start_app round of rabbitmqctl and its Erlang VMs per node.
package rabbitcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/proc"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

// Cluster is a running test cluster.
type Cluster struct {
	// Nodes are the cluster's nodes; Nodes[0] booted first.
	Nodes []*Node

	tb       testing.TB
	dir, bin string
}

// Node is one RabbitMQ node of a Cluster.
type Node struct {
	// Name is the Erlang node name (name@localhost), for rabbitmqctl -n.
	Name string
	// Port is the AMQP port on 127.0.0.1; URL is amqp://guest:guest@127.0.0.1:<Port>/.
	Port int
	URL  string

	c        *Cluster
	index    int
	distPort int
	mu       sync.Mutex
	proc     *proc.Process
}

// bootTimeout bounds one node's boot, joining included (about 10 s on a busy two-core machine).
const bootTimeout = 2 * time.Minute

// Start starts a cluster of n nodes for the test and kills it, removing its files, in
// tb.Cleanup. Without RabbitMQ installed it skips the test, or fails it under CI=true.
func Start(tb testing.TB, n int) *Cluster {
	tb.Helper()
	bin := brokertest.RabbitBinDir()
	if bin == "" {
		testenv.Missing(tb, "RabbitMQ is not installed (no rabbitmq-server and rabbitmqctl)")
	}
	dir, err := os.MkdirTemp("", "rabbitmq-cluster-test-")
	if err != nil {
		tb.Fatalf("cluster dir: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o755) // the broker may drop privileges; let it read its files
	c := &Cluster{tb: tb, dir: dir, bin: bin}

	// One cookie for every node and rabbitmqctl, in the HOME they share.
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	c.write(".erlang.cookie", strings.ToUpper(hex.EncodeToString(cookie)), 0o400)
	c.write("enabled_plugins", "[].\n", 0o644)
	c.write("rabbitmq-env.conf", "", 0o644)

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	prefix := "rc-" + hex.EncodeToString(suffix)
	var taken []int
	for i := range n {
		node := &Node{c: c, index: i, Name: fmt.Sprintf("%s-%d@localhost", prefix, i+1)}
		node.Port = distinctPort(tb, 0, &taken)
		// rabbitmqctl uses distPort+10000..+10010: stay below 55525.
		node.distPort = distinctPort(tb, 21000, &taken)
		node.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", node.Port)
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		node.writeConfig()
	}
	tb.Cleanup(c.kill)

	start := time.Now()
	c.Nodes[0].start()
	c.Nodes[0].awaitAMQP()
	for _, node := range c.Nodes[1:] {
		node.start()
	}
	for _, node := range c.Nodes[1:] {
		node.awaitAMQP()
	}
	if err := c.awaitRunning(len(c.Nodes)); err != nil {
		tb.Fatalf("cluster did not form: %v", err)
	}
	tb.Logf("RabbitMQ cluster of %d nodes up in %s", n, time.Since(start).Round(100*time.Millisecond))
	return c
}

// URLs is every node's URL, comma-separated: a broker.Config.URL for the whole cluster.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL
	}
	return strings.Join(urls, ",")
}

// NodeByPort is the node listening on AMQP port port, or nil.
func (c *Cluster) NodeByPort(port int) *Node {
	for _, n := range c.Nodes {
		if n.Port == port {
			return n
		}
	}
	return nil
}

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

// Kill kills the node with SIGKILL (a crash: no connection is closed cleanly) and waits
// until it is gone.
func (n *Node) Kill() {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return
	}
	if err := p.Kill(); err != nil {
		n.c.tb.Fatalf("kill %s: %v", n.Name, err)
	}
}

// Restart starts a killed node again and waits until it is back in the cluster.
func (n *Node) Restart() {
	n.c.tb.Helper()
	if n.Running() {
		n.c.tb.Fatalf("restart %s: still running", n.Name)
	}
	n.start()
	n.awaitAMQP()
	if err := n.c.awaitRunning(n.c.running()); err != nil {
		n.c.tb.Fatalf("%s did not rejoin the cluster: %v", n.Name, err)
	}
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.Exited()
}

// Ctl runs rabbitmqctl against the node.
func (n *Node) Ctl(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(n.c.bin, "rabbitmqctl"), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.c.env(n.Name)
	return cmd.CombinedOutput()
}

// LogTail is the end of the node's log, for failure messages.
func (n *Node) LogTail(lines int) string {
	return proc.Tail(filepath.Join(n.c.dir, "log", n.dirName(), n.Name+".log"), lines)
}

func (n *Node) dirName() string { return strconv.Itoa(n.index + 1) }

// writeConfig writes the node's rabbitmq.conf: its listener and, on every node but the
// first, the peers it joins at its first boot.
func (n *Node) writeConfig() {
	var b strings.Builder
	fmt.Fprintf(&b, "listeners.tcp.default = 127.0.0.1:%d\n", n.Port)
	if n.index > 0 {
		b.WriteString("cluster_formation.peer_discovery_backend = classic_config\n")
		for i, peer := range n.c.Nodes {
			fmt.Fprintf(&b, "cluster_formation.classic_config.nodes.%d = %s\n", i+1, peer.Name)
		}
		// Wait for the first node rather than boot alone: 120 tries, 500 ms apart.
		b.WriteString("cluster_formation.discovery_retry_limit = 120\n")
	}
	n.c.write("rabbitmq-"+n.dirName()+".conf", b.String(), 0o644)
}

func (n *Node) start() {
	c := n.c
	p, err := proc.Start(proc.Command{
		Name: "RabbitMQ node " + n.Name,
		Path: filepath.Join(c.bin, "rabbitmq-server"),
		Dir:  c.dir,
		Env: append(c.env(n.Name),
			"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(n.distPort),
			"RABBITMQ_CONFIG_FILE="+filepath.Join(c.dir, "rabbitmq-"+n.dirName()+".conf"),
			"RABBITMQ_CONF_ENV_FILE="+filepath.Join(c.dir, "rabbitmq-env.conf"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(c.dir, "enabled_plugins"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(c.dir, "mnesia", n.dirName()),
			"RABBITMQ_LOG_BASE="+filepath.Join(c.dir, "log", n.dirName()),
			// exec the VM in place of the script, so the child is the broker itself and
			// Kill is a crash of the node.
			"RABBITMQ_ALLOW_INPUT=1",
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-noinput -kernel inet_dist_use_interface {127,0,0,1}",
		),
		LogPath: filepath.Join(c.dir, "stdout-"+n.dirName()+".log"),
		Banner:  fmt.Sprintf("--- start %s at %s ---\n", n.Name, time.Now().Format(time.RFC3339Nano)),
	})
	if err != nil {
		c.tb.Fatalf("start %s: %v", n.Name, err)
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
}

// awaitAMQP waits until the node completes an AMQP handshake: it has booted, and joined the
// cluster if it was to (a node joins before it opens its listeners).
func (n *Node) awaitAMQP() {
	n.c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	err := p.AwaitReady(ctx, 200*time.Millisecond, func(context.Context) error {
		conn, err := amqp.DialConfig(n.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err != nil {
			return err
		}
		return conn.Close()
	})
	if err != nil {
		n.c.tb.Fatalf("%v\n%s\n%s", err, proc.Tail(p.LogPath(), 20), n.LogTail(30))
	}
}

// awaitRunning waits until the cluster reports want running nodes.
func (c *Cluster) awaitRunning(want int) error {
	deadline := time.Now().Add(bootTimeout)
	for {
		running, err := c.runningNodes()
		if err == nil && len(running) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("running nodes %v, want %d (%v)", running, want, err)
		}
		time.Sleep(time.Second) // each rabbitmqctl call boots an Erlang VM: poll slowly
	}
}

// runningNodes is the cluster's running nodes, as rabbitmqctl cluster_status sees them.
func (c *Cluster) runningNodes() ([]string, error) {
	out, err := c.Ctl("cluster_status", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var st struct {
		RunningNodes []string `json:"running_nodes"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("cluster_status: %w: %s", err, out)
	}
	slices.Sort(st.RunningNodes)
	return st.RunningNodes, nil
}

func (c *Cluster) running() int {
	n := 0
	for _, node := range c.Nodes {
		if node.Running() {
			n++
		}
	}
	return n
}

// kill kills every node; the files go with the temporary directory.
func (c *Cluster) kill() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// env is what a node and rabbitmqctl need: the shared HOME (and its cookie), the node name.
func (c *Cluster) env(node string) []string {
	return append(os.Environ(),
		"HOME="+c.dir,
		"RABBITMQ_NODENAME="+node,
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

func (c *Cluster) write(name, content string, mode os.FileMode) {
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		c.tb.Fatalf("write %s: %v", p, err)
	}
}

// distinctPort is brokertest.FreePort, not one of taken (ports chosen for nodes not yet
// listening), added to taken.
func distinctPort(tb testing.TB, from int, taken *[]int) int {
	for {
		p := brokertest.FreePort(tb, from)
		if !slices.Contains(*taken, p) {
			*taken = append(*taken, p)
			return p
		}
	}
}

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
	// The table format prints the pid as <node.N.N.N> (the JSON one does not).
	out, err := c.Ctl("list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	if err != nil {
		return nil, err
	}
	want := fmt.Sprintf(`{"connection_name",%q}`, name)
	var nodes []*Node
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || !strings.Contains(props, want) {
			continue
		}
		n := c.nodeOfPid(pid)
		if n == nil {
			return nil, fmt.Errorf("connection %s: pid %s is on no node of the cluster", name, pid)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
