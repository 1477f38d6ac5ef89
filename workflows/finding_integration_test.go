//go:build integration

package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// A dead message is found on a real server by its consuming service, its error type, and
// either id of its envelope; resolving it unsets the ids. With RECORD_HISTORIES set, the
// run's history is written there for the replay tests.
func TestDeadLetterIsFoundByItsFindingAttributesOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)

	taskQueue := devserver.UniqueName("finding")
	pub := &queuePublisher{}
	acts := &activities.Activities{Publisher: pub, Logger: discardLogger()}
	defer startWorker(t, c, taskQueue, acts)()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := message.WorkflowID("orders", taskQueue)
	reports := &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: time.Hour}
	require.NoError(t, reports.Report(ctx, message.FailureReport{
		Message:         message.Message{MessageID: taskQueue, Payload: []byte("x"), OriginalQueue: "orders"},
		Failure:         policy.Failure{Category: "permanent", Reason: "400 bad request"},
		ErrorType:       "ValidationError",
		Service:         "billing",
		Policy:          policy.Policy{Name: "none", MaxRetries: 0, Jitter: policy.Jitter{Mode: policy.NoJitter}},
		DeadLetterQueue: "dead",
	}))

	dlqID := id + "#0"
	mine := visibility.RetryWorkflows(visibility.Running, taskQueue)
	for _, q := range []visibility.Query{
		mine.Equal(workflows.SAConsumerService, "billing").Statuses(workflows.StatusDead),
		mine.Equal(workflows.SAErrorType, "ValidationError"),
		mine.Equal(workflows.SADeadLetterIDs, dlqID),
		mine.Equal(workflows.SADeadLetterIDs, message.DLQUUID(dlqID)),
	} {
		require.Equal(t, []string{id}, awaitList(ctx, t, c, q.String(), 1), q.String())
	}
	require.Len(t, pub.to("dead"), 1)

	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalResolve, workflows.OperatorAction{Actor: "test", Reason: "fixed by hand"}))
	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusResolved, res.Status)
	closed := visibility.RetryWorkflows(visibility.Completed, taskQueue).Equal(workflows.SAConsumerService, "billing").
		Statuses(workflows.StatusResolved)
	require.Equal(t, []string{id}, awaitList(ctx, t, c, closed.String(), 1))
	require.Empty(t, awaitList(ctx, t, c, visibility.Query{}.Equal(workflows.SADeadLetterIDs, dlqID).String(), 0),
		"a message no longer dead is not found by its envelope's id")

	_, err := historytest.Record(ctx, c, id, "dead-finding-attributes-resolved")
	require.NoError(t, err)
}

// awaitList polls visibility until query matches exactly n executions, and returns their
// workflow IDs; visibility is eventually consistent.
func awaitList(ctx context.Context, t *testing.T, c client.Client, query string, n int) []string {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(t, err, query)
		if len(resp.GetExecutions()) == n {
			ids := []string{}
			for _, e := range resp.GetExecutions() {
				ids = append(ids, e.GetExecution().GetWorkflowId())
			}
			return ids
		}
		select {
		case <-ctx.Done():
			t.Fatalf("visibility never listed %d executions for %s (last: %d)", n, query, len(resp.GetExecutions()))
		case <-tick.C:
		}
	}
}
