//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
)

// A worker whose namespace is deleted under it gets NamespaceNotFound from its polls; once
// they have failed for the SDK's grace (two minutes in v1.51.0) the SDK stops it on a fatal
// error. The process then answers 503 on /healthz and /readyz, naming the worker (it keeps
// answering for 3 s so that probes see it), and exits 1 within 30 s: a duration kept as an
// assertion, the product's guarantee that the process ends instead of hanging (its own stop
// takes about 3 s).
func TestFatalWorkerErrorEndsTheProcess(t *testing.T) {
	t.Parallel() // minutes of waiting, beside the other long waits (the package doc says why)
	s := newStack(t)
	bin := buildBinary(t)
	ns := s.prefix
	registerNamespace(t, s.temporal.Address, ns)
	tc, err := client.Dial(client.Options{HostPort: s.temporal.Address, Namespace: ns, Logger: nopLogger()})
	require.NoError(t, err)
	t.Cleanup(tc.Close)

	port, err := freeport.Get()
	require.NoError(t, err)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "worker",
		"-rabbitmq-url", brokertest.URL(),
		"-temporal-address", s.temporal.Address,
		"-namespace", ns,
		"-task-queue", s.prefix,
		"-retry-queue", s.ingress,
		"-manual-review-queue", s.dlq,
		"-http-addr", "127.0.0.1:"+strconv.Itoa(port),
	)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var exitedAt time.Time
	var waitErr error
	go func() { waitErr = cmd.Wait(); exitedAt = time.Now(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("worker output:\n%s", logs.String())
		}
	})

	// The worker polls the namespace's task queue, and says it is alive and ready.
	eventually(t, patience, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		d, err := tc.DescribeTaskQueue(ctx, s.prefix, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			return err
		}
		if len(d.GetPollers()) == 0 {
			return errors.New("no workflow poller yet")
		}
		return nil
	})
	code, body := getJSON(t, base+"/healthz")
	require.Equal(t, 200, code, body)
	assert.Equal(t, map[string]string{"status": "ok", "worker": "ok"}, body)
	code, body = getJSON(t, base+"/readyz")
	require.Equal(t, 200, code, body)
	assert.Equal(t, "ok", body["worker"])

	deletedAt := time.Now()
	deleteNamespace(t, tc, ns)

	// /healthz and then /readyz fail while the process is still up; the SDK's grace comes
	// first. (/readyz fails before, on Temporal's check, once the namespace is gone: it is
	// read once /healthz has failed, in the same round, so that both are seen within the 3 s
	// the process keeps answering, however slow the reads.)
	var flippedAt time.Time
	var health, ready map[string]string
	deadline := time.Now().Add(5 * time.Minute)
	for health == nil || ready == nil {
		select {
		case <-exited:
			t.Fatalf("the process exited (%v) before /healthz and /readyz both answered 503 (healthz %v, readyz %v)", waitErr, health, ready)
		default:
		}
		require.True(t, time.Now().Before(deadline), "/healthz or /readyz still 200 five minutes after the namespace was deleted")
		if code, body, err := tryJSON(base + "/healthz"); err == nil && code == 503 && health == nil {
			flippedAt, health = time.Now(), body
		}
		if health != nil {
			code, body, err := tryJSON(base + "/readyz")
			require.NoError(t, err, "the ops server keeps answering for a moment after the fatal error")
			require.Equal(t, 503, code, body)
			ready = body
		}
		if health == nil || ready == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	assert.Equal(t, "unhealthy", health["status"])
	assert.Contains(t, health["worker"], ns, "the error names the namespace")
	assert.Contains(t, health["worker"], "not found")
	assert.Contains(t, ready["worker"], "not found", "/readyz names the worker check")

	select {
	case <-exited:
	case <-time.After(patience):
		t.Fatalf("the process did not exit within %s of /healthz answering 503", patience)
	}
	var exitErr *exec.ExitError
	require.ErrorAs(t, waitErr, &exitErr, "the process exited 0")
	assert.Equal(t, 1, exitErr.ExitCode())

	fatalAt := logTime(t, logs.String(), "worker stopped on a fatal error; shutting down")
	stopped := logRecord(logs.String(), "stopped")
	require.NotNil(t, stopped, "no final log line")
	assert.Equal(t, "ERROR", stopped["level"])
	assert.Contains(t, stopped["error"], "stopped on a fatal error")
	assert.Contains(t, stopped["error"], ns)
	assert.Less(t, exitedAt.Sub(fatalAt), 30*time.Second)
	assert.False(t, flippedAt.Before(fatalAt.Add(-time.Second)), "503 before the fatal error was logged")
	failedAt := logTime(t, logs.String(), "Failed to poll for task.")
	t.Logf("namespace deleted → first failed poll %s → fatal error %s (the SDK's grace); fatal error → 503 seen %s, → exit %s (exit code %d)",
		failedAt.Sub(deletedAt).Round(time.Millisecond), fatalAt.Sub(failedAt).Round(time.Millisecond),
		flippedAt.Sub(fatalAt).Round(time.Millisecond), exitedAt.Sub(fatalAt).Round(time.Millisecond), exitErr.ExitCode())
}

// registerNamespace creates a namespace for the test and waits until the frontend knows it.
func registerNamespace(t *testing.T, address, ns string) {
	t.Helper()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: address, Logger: nopLogger()})
	require.NoError(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a loaded server is slow
	defer cancel()
	require.NoError(t, nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        ns,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}))
	eventually(t, patience, func() error {
		_, err := nc.Describe(ctx, ns)
		return err
	})
}

// deleteNamespace deletes ns at once (no delay before its data goes). The frontend answers
// when its system workflow has marked the namespace deleted; on a loaded server (CI on 2
// cores) that outlasted 30 s. So the call has two minutes, and when it fails anyway, the
// namespace's own state says whether it went: deleted, or renamed away (not found).
func deleteNamespace(t *testing.T, tc client.Client, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := tc.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{
		Namespace: ns, NamespaceDeleteDelay: durationpb.New(0),
	})
	var notFound *serviceerror.NamespaceNotFound
	if err == nil || errors.As(err, &notFound) {
		return
	}
	t.Logf("delete namespace %s: %v; waiting for its state", ns, err)
	eventuallyEvery(t, 3*time.Minute, time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
		switch {
		case errors.As(err, &notFound):
			return nil
		case err != nil:
			return err
		case d.GetNamespaceInfo().GetState() == enumspb.NAMESPACE_STATE_DELETED:
			return nil
		}
		return fmt.Errorf("namespace %s is %s", ns, d.GetNamespaceInfo().GetState())
	})
}

func getJSON(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	code, body, err := tryJSON(url)
	require.NoError(t, err)
	return code, body
}

func tryJSON(url string) (int, map[string]string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var body map[string]string
	if err := json.Unmarshal(b, &body); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, body, nil
}

// logRecord is the first JSON log record with the message, nil if none.
func logRecord(logs, msg string) map[string]any {
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	return nil
}

func logTime(t *testing.T, logs, msg string) time.Time {
	t.Helper()
	rec := logRecord(logs, msg)
	require.NotNil(t, rec, "no log line %q", msg)
	at, err := time.Parse(time.RFC3339Nano, rec["time"].(string))
	require.NoError(t, err)
	return at
}
