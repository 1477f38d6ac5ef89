//go:build integration

package devserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

func TestDevServer(t *testing.T) {
	s := StartOwnedForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	require.NoError(t, CheckHealth(ctx, s.Address, s.Namespace))
	assert.Empty(t, s.UIAddress, "headless")

	c, err := s.Dial(ctx)
	require.NoError(t, err)
	defer c.Close()

	assertSearchAttributes(ctx, t, c, s.Namespace)

	// A workflow of a type no worker runs stays open; after a crash and a restart on
	// the same DB file it must still be there.
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                 "devserver-survives-restart",
		TaskQueue:          "devserver-test-no-worker",
		WorkflowRunTimeout: time.Hour,
	}, "NoSuchWorkflow", "arg")
	require.NoError(t, err)
	c.Close()

	killAndRestart(ctx, t, s)
	c, err = s.Dial(ctx)
	require.NoError(t, err)
	defer c.Close()
	assertStillOpen(ctx, t, c, "devserver-survives-restart", run.GetRunID())
	assertSearchAttributes(ctx, t, c, s.Namespace)

	assertStopIsFinal(ctx, t, s)
}

// assertSearchAttributes checks that namespace has every one of SearchAttributeKeys, with its
// type.
func assertSearchAttributes(ctx context.Context, t *testing.T, c client.Client, namespace string) {
	t.Helper()
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	require.NoError(t, err)
	for _, k := range SearchAttributeKeys {
		typ, ok := resp.GetCustomAttributes()[k.GetName()]
		if assert.True(t, ok, "search attribute %s registered", k.GetName()) {
			assert.Equal(t, k.GetValueType(), typ, k.GetName())
		}
	}
}

// killAndRestart SIGKILLs s, checks that it no longer answers, and starts it again on the
// same data as a new process.
func killAndRestart(ctx context.Context, t *testing.T, s *Server) {
	t.Helper()
	pid := s.Pid()
	require.NoError(t, s.Kill())
	<-s.Done()
	require.Error(t, CheckHealth(ctx, s.Address, s.Namespace), "killed")

	began := time.Now()
	require.NoError(t, s.Restart(ctx))
	t.Logf("restarted in %s", time.Since(began).Round(time.Millisecond))
	assert.NotEqual(t, pid, s.Pid())
}

// assertStillOpen checks that run runID of workflow id, a NoSuchWorkflow no worker runs, is
// still open.
func assertStillOpen(ctx context.Context, t *testing.T, c client.Client, id, runID string) {
	t.Helper()
	desc, err := c.DescribeWorkflow(ctx, id, runID)
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.RawResponse.GetWorkflowExecutionInfo().GetStatus())
	assert.Equal(t, "NoSuchWorkflow", desc.RawResponse.GetWorkflowExecutionInfo().GetType().GetName())
}

// assertStopIsFinal checks that Stop is graceful, final and idempotent.
func assertStopIsFinal(ctx context.Context, t *testing.T, s *Server) {
	t.Helper()
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop())
	require.Error(t, CheckHealth(ctx, s.Address, s.Namespace))
}

func TestDevServerWithUI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Namespace: "other"})
	require.NoError(t, err)
	defer s.Stop()
	require.NotEmpty(t, s.UIAddress)
	require.NoError(t, CheckHealth(ctx, s.Address, "other"))
	require.NoError(t, CheckHealth(ctx, s.Address, "default"), "default always exists")
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + s.UIAddress + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 200*time.Millisecond, "Web UI answers at %s", s.UIAddress)
}

// A database whose task queues had start-dev's four partitions may hold workflow tasks in the
// backlogs of partitions 1-3. Started again here, it must still hand them to a worker: with
// one read partition they are never read (seen: this test fails within its minute then).
func TestFourPartitionDatabaseKeepsItsTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "temporal.db")
	four := []string{
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=4",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=4",
		"--dynamic-config-value", `history.transferProcessorUpdateAckInterval="1s"`,
	}
	old, err := Start(ctx, Options{UIPort: -1, DBFile: db, ExtraArgs: four})
	require.NoError(t, err)
	c, err := old.Dial(ctx)
	require.NoError(t, err)
	// No worker yet: each first workflow task goes to the backlog of a random partition of
	// four; with 12 of them, all on the first one has odds of 1 in 16 million.
	const n, taskQueue, wfType = 12, "devserver-four-partitions", "Done"
	var runs []client.WorkflowRun
	for i := range n {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("four-partitions-%d", i), TaskQueue: taskQueue}, wfType)
		require.NoError(t, err)
		runs = append(runs, run)
	}
	c.Close()
	// History re-sends the tasks after its persisted transfer-queue ack level on a restart,
	// which would put them on the one partition and hide the loss: let it persist the level
	// past them (every 1 s here). Nothing outside the server observes that write, so this
	// waits five intervals; a slower write only makes the test pass without proving much.
	time.Sleep(5 * time.Second)
	require.NoError(t, old.Stop())
	_, err = os.Stat(db + onePartitionMark)
	require.True(t, os.IsNotExist(err), "a start with four partitions leaves no one-partition mark")

	s, err := Start(ctx, Options{UIPort: -1, DBFile: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	assert.Contains(t, strings.Join(s.Args(), " "), "matching.numTaskqueueReadPartitions=4")
	c, err = s.Dial(ctx)
	require.NoError(t, err)
	defer c.Close()
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: wfType})
	require.NoError(t, w.Start())
	defer w.Stop()
	for _, run := range runs {
		getCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err := c.GetWorkflow(getCtx, run.GetID(), run.GetRunID()).Get(getCtx, nil)
		cancel()
		require.NoError(t, err, "workflow %s completed after the restart", run.GetID())
	}
}
