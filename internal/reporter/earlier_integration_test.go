//go:build integration

package reporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// On a real server, a report that continues a count hands the run it starts the earlier run
// the server's record names, with no wait on visibility: none for a message without runs;
// the run just closed (terminated here, so that no worker is needed: the runs' task queue is
// the test's own, which nothing polls); nothing when a run is running, which takes the
// report as a signal. In both reporting modes.
func TestLaterReportHandsTheEarlierRunOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, eager := range []bool{false, true} {
		taskQueue := devserver.UniqueName("earlier")
		p := &Reporter{Client: c, TaskQueue: taskQueue, Retention: time.Hour, Eager: eager}
		rep := func(retryCount int) message.FailureReport {
			return message.FailureReport{
				Message:    message.Message{MessageID: taskQueue, Payload: []byte("x"), OriginalQueue: "orders"},
				RetryCount: retryCount, RetryKey: workflows.RetryKey(taskQueue, retryCount),
				Failure: policy.Failure{Category: "transient", Reason: "503"}, Policy: policy.Default(3, time.Hour, time.Hour),
				DeadLetterQueue: "dead",
			}
		}
		id := message.WorkflowID("orders", taskQueue)
		t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), id, "", "test over") })

		// No run yet: the report says there is none.
		require.NoError(t, p.Report(ctx, rep(1)))
		first := describe(t, ctx, c, id)
		got := reportsOf(t, ctx, c, id, first.RunID)
		require.Len(t, got, 1)
		require.NotNil(t, got[0].Earlier, "eager %v: the bridge looked", eager)
		assert.Empty(t, got[0].Earlier.RunID, "eager %v: no earlier run", eager)

		// That run is running: the next report is its signal, handing nothing.
		require.NoError(t, p.Report(ctx, rep(2)))
		got = reportsOf(t, ctx, c, id, first.RunID)
		require.Len(t, got, 2, "eager %v: the running run took it", eager)
		assert.Nil(t, got[1].Earlier, "eager %v", eager)

		// Closed at once: the next report's new run is handed it, read without visibility.
		require.NoError(t, c.TerminateWorkflow(ctx, id, first.RunID, "closed for the test"))
		require.NoError(t, p.Report(ctx, rep(3)))
		second := describe(t, ctx, c, id)
		require.NotEqual(t, first.RunID, second.RunID, "eager %v: a new run", eager)
		got = reportsOf(t, ctx, c, id, second.RunID)
		require.Len(t, got, 1)
		assert.Equal(t, &message.EarlierRun{RunID: first.RunID}, got[0].Earlier, "eager %v", eager)
	}
}

// describe is the latest run of workflow id, which must be running.
func describe(t *testing.T, ctx context.Context, c client.Client, id string) workflow.Execution {
	t.Helper()
	d, err := c.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.Status)
	return d.WorkflowExecution
}

// reportsOf are the failure reports run runID of workflow id was given, in order: its
// input's, then its signals'.
func reportsOf(t *testing.T, ctx context.Context, c client.Client, id, runID string) []message.FailureReport {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	var out []message.FailureReport
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			var in workflows.Input
			require.NoError(t, dc.FromPayloads(a.GetInput(), &in))
			if in.Report != nil {
				out = append(out, *in.Report)
			}
		}
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == workflows.SignalFailureReport {
			var r message.FailureReport
			require.NoError(t, dc.FromPayloads(a.GetInput(), &r))
			out = append(out, r)
		}
	}
	return out
}
