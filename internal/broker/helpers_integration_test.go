//go:build integration

package broker

import (
	"fmt"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

var nameSeq atomic.Int64

// uniqueName gives each test its own queues and connection names, so tests of other packages
// running against the same broker never see each other's messages.
func uniqueName(t *testing.T, what string) string {
	return fmt.Sprintf("test.broker.%s.%s.%d.%d", strings.ReplaceAll(t.Name(), "/", "."), what,
		time.Now().UnixNano(), nameSeq.Add(1))
}

// testConn is the test's own connection, for declaring and consuming.
func testConn(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := Dial(Config{URL: brokertest.URL(), ConnectionName: uniqueName(t, "observer")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// tempQueue declares a queue deleted at the end of the test (x-expires is the safety net for a
// test killed before its cleanup).
func tempQueue(t *testing.T, conn *amqp.Connection, args amqp.Table) string {
	t.Helper()
	name := uniqueName(t, "q")
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	a := amqp.Table{"x-expires": int32(10 * 60 * 1000)}
	for k, v := range args {
		a[k] = v
	}
	_, err = ch.QueueDeclare(name, false, false, false, false, a)
	require.NoError(t, err)
	t.Cleanup(func() { deleteQueue(t, name) })
	return name
}

func deleteQueue(t *testing.T, name string) {
	conn, err := Dial(Config{URL: brokertest.URL(), ConnectionName: uniqueName(t, "cleanup")})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	if _, err := ch.QueueDelete(name, false, false, false); err != nil {
		t.Logf("cleanup: delete %s: %v", name, err)
	}
}

// consume returns the queue's deliveries (auto-ack).
func consume(t *testing.T, conn *amqp.Connection, queue string) <-chan amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	d, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	return d
}

// closeConnectionByName makes the broker close the connection named name, the way an operator
// (or a broker node going down) would: rabbitmqctl close_connection. Only this test's own
// connection is closed; close_all_connections would break other tests sharing the broker.
func closeConnectionByName(t *testing.T, name string) {
	t.Helper()
	testenv.LookPath(t, "rabbitmqctl", "RabbitMQ's own CLI, installed with rabbitmq-server")
	// The table format prints the pid as close_connection wants it (the JSON one does not).
	out, err := exec.Command("rabbitmqctl", "list_connections", "pid", "client_properties", "-q", "--no-table-headers").Output()
	if err != nil {
		testenv.Missing(t, "rabbitmqctl list_connections: %v (not root?)", err)
	}
	want := fmt.Sprintf(`{"connection_name",%q}`, name)
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && strings.Contains(props, want) {
			out, err := exec.Command("rabbitmqctl", "close_connection", pid, "test").CombinedOutput()
			require.NoError(t, err, "%s", out)
			return
		}
	}
	t.Fatalf("connection %q not listed by the broker: %s", name, out)
}

// waitGoroutines waits until at most n goroutines run: the client's reader and heartbeater
// end shortly after Close returns, on their own schedule.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines still running, want at most %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
