// Package rabbitcluster runs a private RabbitMQ cluster for a test or a soak: several nodes
// of the machine's rabbitmq-server on free loopback ports, each with its own data, log and
// config files under a temporary directory and one Erlang cookie, so the shared broker is
// never touched. Its user can kill a node (SIGKILL, a crash) and start it again.
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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/proc"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

// Cluster is a running cluster.
type Cluster struct {
	// Nodes are the cluster's nodes; Nodes[0] booted first.
	Nodes []*Node

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

// ErrNotInstalled is New's error when the machine has no rabbitmq-server and rabbitmqctl.
var ErrNotInstalled = errors.New("RabbitMQ is not installed (no rabbitmq-server and rabbitmqctl)")

// Start starts a cluster of n nodes for the test and kills it, removing its files, in
// tb.Cleanup. Without RabbitMQ installed it skips the test, or fails it under CI=true.
func Start(tb testing.TB, n int) *Cluster {
	tb.Helper()
	c, err := New(n, tb.Logf)
	if errors.Is(err, ErrNotInstalled) {
		testenv.Missing(tb, "%v", err)
	}
	if err != nil {
		tb.Fatalf("RabbitMQ cluster: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// New starts a cluster of n nodes, which runs until Close. On an error it leaves nothing
// behind: no node, no file. logf, if not nil, is told how long the cluster took to form.
func New(n int, logf func(format string, args ...any)) (_ *Cluster, err error) {
	if n < 1 {
		return nil, fmt.Errorf("a cluster of %d nodes", n)
	}
	bin := brokertest.RabbitBinDir()
	if bin == "" {
		return nil, ErrNotInstalled
	}
	dir, err := os.MkdirTemp("", "rabbitmq-cluster-")
	if err != nil {
		return nil, fmt.Errorf("cluster dir: %w", err)
	}
	c := &Cluster{dir: dir, bin: bin}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	_ = os.Chmod(dir, 0o755) // the broker may drop privileges; let it read its files

	// One cookie for every node and rabbitmqctl, in the HOME they share.
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	if err := errors.Join(
		c.write(".erlang.cookie", strings.ToUpper(hex.EncodeToString(cookie)), 0o400),
		c.write("enabled_plugins", "[].\n", 0o644),
		c.write("rabbitmq-env.conf", "", 0o644),
	); err != nil {
		return nil, err
	}

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	prefix := "rc-" + hex.EncodeToString(suffix)
	var taken []int
	for i := range n {
		node := &Node{c: c, index: i, Name: fmt.Sprintf("%s-%d@localhost", prefix, i+1)}
		if node.Port, err = distinctPort(0, &taken); err != nil {
			return nil, err
		}
		// rabbitmqctl uses distPort+10000..+10010: stay below 55525.
		if node.distPort, err = distinctPort(21000, &taken); err != nil {
			return nil, err
		}
		node.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", node.Port)
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		if err := node.writeConfig(); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	if err := c.Nodes[0].start(); err != nil {
		return nil, err
	}
	if err := c.Nodes[0].awaitAMQP(); err != nil {
		return nil, err
	}
	for _, node := range c.Nodes[1:] {
		if err := node.start(); err != nil {
			return nil, err
		}
	}
	for _, node := range c.Nodes[1:] {
		if err := node.awaitAMQP(); err != nil {
			return nil, err
		}
	}
	if err := c.awaitRunning(len(c.Nodes)); err != nil {
		return nil, fmt.Errorf("cluster did not form: %w", err)
	}
	if logf != nil {
		logf("RabbitMQ cluster of %d nodes up in %s", n, time.Since(start).Round(100*time.Millisecond))
	}
	return c, nil
}

// Close kills every node and removes the cluster's files. Closing again does nothing.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		// A failed SIGKILL leaves a node whose parent-death signal still ends it with us.
		_ = n.Kill()
	}
	_ = os.RemoveAll(c.dir)
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

// Kill kills the node with SIGKILL (a crash: no connection is closed cleanly) and waits
// until it is gone. Killing a node that is not running does nothing.
func (n *Node) Kill() error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", n.Name, err)
	}
	return nil
}

// Restart starts a killed node again and waits until it is back in the cluster.
func (n *Node) Restart() error {
	if n.Running() {
		return fmt.Errorf("restart %s: still running", n.Name)
	}
	if err := n.start(); err != nil {
		return err
	}
	if err := n.awaitAMQP(); err != nil {
		// Down again, so that a caller may try Restart once more.
		return errors.Join(fmt.Errorf("restart: %w", err), n.Kill())
	}
	if err := n.c.awaitRunning(n.c.running()); err != nil {
		return fmt.Errorf("%s did not rejoin the cluster: %w", n.Name, err)
	}
	return nil
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.Exited()
}

// LogTail is the end of the node's log, for failure messages.
func (n *Node) LogTail(lines int) string {
	return proc.Tail(filepath.Join(n.c.dir, "log", n.dirName(), n.Name+".log"), lines)
}

func (n *Node) dirName() string { return strconv.Itoa(n.index + 1) }

// writeConfig writes the node's rabbitmq.conf: its listener and, on every node but the
// first, the peers it joins at its first boot.
func (n *Node) writeConfig() error {
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
	return n.c.write("rabbitmq-"+n.dirName()+".conf", b.String(), 0o644)
}

func (n *Node) start() error {
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
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return nil
}

// awaitAMQP waits until the node completes an AMQP handshake: it has booted, and joined the
// cluster if it was to (a node joins before it opens its listeners).
func (n *Node) awaitAMQP() error {
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
		return fmt.Errorf("%w\n%s\n%s", err, proc.Tail(p.LogPath(), 20), n.LogTail(30))
	}
	return nil
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

// env is what a node and rabbitmqctl need: the shared HOME (and its cookie), the node name.
func (c *Cluster) env(node string) []string {
	return append(os.Environ(),
		"HOME="+c.dir,
		"RABBITMQ_NODENAME="+node,
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

func (c *Cluster) write(name, content string, mode os.FileMode) error {
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		return fmt.Errorf("cluster file: %w", err)
	}
	return nil
}

// distinctPort is freeport.From, not one of taken (ports chosen for nodes not yet
// listening), added to taken.
func distinctPort(from int, taken *[]int) (int, error) {
	for {
		p, err := freeport.From(from)
		if err != nil {
			return 0, err
		}
		if !slices.Contains(*taken, p) {
			*taken = append(*taken, p)
			return p, nil
		}
	}
}
