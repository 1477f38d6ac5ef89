//go:build integration

package devserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
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

	assertSearchAttributes := func() {
		t.Helper()
		resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace})
		require.NoError(t, err)
		for _, k := range SearchAttributeKeys {
			typ, ok := resp.GetCustomAttributes()[k.GetName()]
			if assert.True(t, ok, "search attribute %s registered", k.GetName()) {
				assert.Equal(t, k.GetValueType(), typ, k.GetName())
			}
		}
	}
	assertSearchAttributes()

	// A workflow of a type no worker runs stays open; after a crash and a restart on
	// the same DB file it must still be there.
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                 "devserver-survives-restart",
		TaskQueue:          "devserver-test-no-worker",
		WorkflowRunTimeout: time.Hour,
	}, "NoSuchWorkflow", "arg")
	require.NoError(t, err)
	c.Close()

	pid := s.Pid()
	require.NoError(t, s.Kill())
	<-s.Done()
	require.Error(t, CheckHealth(ctx, s.Address, s.Namespace), "killed")

	require.NoError(t, s.Restart(ctx))
	assert.NotEqual(t, pid, s.Pid())
	c, err = s.Dial(ctx)
	require.NoError(t, err)
	defer c.Close()
	desc, err := c.DescribeWorkflowExecution(ctx, "devserver-survives-restart", run.GetRunID())
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus())
	assert.Equal(t, "NoSuchWorkflow", desc.GetWorkflowExecutionInfo().GetType().GetName())
	assertSearchAttributes()

	// Stop is graceful, final and idempotent.
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
