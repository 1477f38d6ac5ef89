package brokertest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/proc"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

// TLSNode is a private RabbitMQ node with only an AMQPS listener on 127.0.0.1, whose server
// certificate is signed by a CA the test made. It runs next to the shared broker (own node
// name, ports, data directory and cookie), so the shared broker is never reconfigured.
type TLSNode struct {
	// Files are the CA, server and client certificates (in the node's directory).
	Files Files
	// CA signed every certificate in Files.
	CA *CA
	// Port is the AMQPS port; URL is amqps://guest:guest@localhost:<Port>/.
	Port int
	URL  string
	// Name is the Erlang node name, for rabbitmqctl -n.
	Name string

	dir, bin string
}

// startupTimeout bounds the node's boot (a few seconds on the project's machines).
const startupTimeout = 90 * time.Second

// StartTLSNode starts a TLS-only RabbitMQ node for the test and stops it (rabbitmqctl stop,
// then SIGKILL if needed) in tb.Cleanup. The node requires a client certificate signed by the
// CA (verify_peer, fail_if_no_peer_cert). Without RabbitMQ installed it skips the test, or
// fails it under CI=true (testenv.Missing).
//
// The broker runs in the foreground as the test's child under proc's supervision: a test
// killed mid-way leaves no node behind.
func StartTLSNode(tb testing.TB) *TLSNode {
	tb.Helper()
	bin := RabbitBinDir()
	if bin == "" {
		testenv.Missing(tb, "RabbitMQ is not installed (no rabbitmq-server and rabbitmqctl)")
	}
	dir, err := os.MkdirTemp("", "rabbitmq-tls-test-")
	if err != nil {
		tb.Fatalf("tls node dir: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The broker may drop privileges; let it read its files.
	_ = os.Chmod(dir, 0o755)

	ca := NewCA(tb, "retry-scheduler-test-ca")
	n := &TLSNode{CA: ca, Files: ca.WriteFiles(tb, dir), dir: dir, bin: bin}
	n.Port = FreePort(tb, 0)
	distPort := FreePort(tb, 21000) // rabbitmqctl uses distPort+10000..+10010: stay below 55525
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	n.Name = "retry-tls-test-" + hex.EncodeToString(suffix) + "@localhost"
	n.URL = fmt.Sprintf("amqps://guest:guest@localhost:%d/", n.Port)

	conf := fmt.Sprintf(`listeners.tcp = none
listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
`, n.Port, n.Files.CA, n.Files.ServerCert, n.Files.ServerKey)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatalf("write %s: %v", p, err)
		}
		return p
	}
	confFile := write("rabbitmq.conf", conf)
	envFile := write("rabbitmq-env.conf", "")
	pluginsFile := write("enabled_plugins", "[].\n")

	logFile := filepath.Join(dir, "stdout.log")
	p, err := proc.Start(proc.Command{
		Name: "RabbitMQ TLS node " + n.Name,
		Path: filepath.Join(bin, "rabbitmq-server"),
		Dir:  dir,
		Env: append(n.env(),
			"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
			"RABBITMQ_CONFIG_FILE="+confFile,
			"RABBITMQ_CONF_ENV_FILE="+envFile,
			"RABBITMQ_ENABLED_PLUGINS_FILE="+pluginsFile,
			"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
			// exec the VM in place of the script, so the child is the broker itself.
			"RABBITMQ_ALLOW_INPUT=1",
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-noinput -kernel inet_dist_use_interface {127,0,0,1}",
		),
		LogPath: logFile,
	})
	if err != nil {
		tb.Fatalf("start rabbitmq-server: %v", err)
	}
	tb.Cleanup(func() { n.stop(tb, p) })

	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	if err := p.AwaitReady(ctx, 250*time.Millisecond, n.handshake); err != nil {
		tb.Fatalf("%v\n%s", err, proc.Tail(logFile, 40))
	}
	return n
}

// env is what both the server and rabbitmqctl need to find the node.
func (n *TLSNode) env() []string {
	return append(os.Environ(),
		"HOME="+n.dir, // the Erlang cookie lives here, away from the shared broker's
		"RABBITMQ_NODENAME="+n.Name,
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

// TLSConfig is a client configuration trusting the node's CA and presenting the client
// certificate.
func (n *TLSNode) TLSConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	pair, err := tls.LoadX509KeyPair(n.Files.ClientCert, n.Files.ClientKey)
	if err != nil {
		tb.Fatalf("client certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(n.CA.Cert)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// Ctl runs rabbitmqctl against the node.
func (n *TLSNode) Ctl(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(n.bin, "rabbitmqctl"), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env()
	return cmd.CombinedOutput()
}

// handshake is the node's readiness probe: a TLS handshake with the client certificate
// succeeds on the port.
func (n *TLSNode) handshake(ctx context.Context) error {
	pair, err := tls.LoadX509KeyPair(n.Files.ClientCert, n.Files.ClientKey)
	if err != nil {
		return proc.Permanent(err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "localhost", Certificates: []tls.Certificate{pair}, RootCAs: x509.NewCertPool()}
	cfg.RootCAs.AddCert(n.CA.Cert)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: cfg}
	c, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(n.Port))
	if err != nil {
		return fmt.Errorf("no TLS listener on port %d: %w", n.Port, err)
	}
	return c.Close()
}

// stopGrace is how long the node gets to stop after `rabbitmqctl stop` before SIGKILL.
const stopGrace = 30 * time.Second

func (n *TLSNode) stop(tb testing.TB, p *proc.Process) {
	if out, err := n.Ctl("stop"); err != nil {
		tb.Logf("rabbitmqctl -n %s stop: %v: %s", n.Name, err, out)
	}
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.Done():
		return
	case <-timer.C:
	}
	tb.Logf("RabbitMQ TLS node %s did not stop; killing pid %d", n.Name, p.Pid())
	_ = p.Kill()
}

// RabbitBinDir finds the directory holding the real rabbitmq-server and rabbitmqctl scripts
// (Debian's /usr/sbin wrappers switch to the rabbitmq user, which the test does not want).
func RabbitBinDir() string {
	dirs := []string{"/usr/lib/rabbitmq/bin"}
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isFile(filepath.Join(d, "rabbitmq-server")) && isFile(filepath.Join(d, "rabbitmqctl")) {
			return d
		}
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// FreePort returns a free loopback port; from > 0 searches upwards from it (for Erlang
// distribution ports, which must leave room above them for rabbitmqctl).
func FreePort(tb testing.TB, from int) int {
	tb.Helper()
	p, err := freeport.From(from)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
