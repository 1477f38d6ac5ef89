//go:build integration

package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/worker"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A team with its own worker fleet registers the workflows and their activities on a worker it
// builds itself (worker.SDKOptions, worker.RegisterWorkflows, activities.Activities with its
// own publisher): the service's bridge alone starts the runs, and that worker retries them.
func TestWorkflowsRunOnAWorkerATeamBuildsItself(t *testing.T) {
	s := newStack(t)
	s.run("bridge")
	w := sdkworker.New(s.tc, s.cfg.TaskQueue, worker.SDKOptions(worker.Options{}))
	worker.RegisterWorkflows(w)
	w.RegisterActivity(&activities.Activities{Publisher: s.pub, Logger: discard()})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)
	s.publishRetry(message.RetryMessage{MessageID: "own-1", OriginalPayload: []byte("p-own-1"), OriginalQueue: orders,
		ErrorReason: "503 from payments", HTTPStatus: 503})
	d := c.next(t, patience)
	require.Equal(t, "p-own-1", string(d.Body))
	require.EqualValues(t, 1, d.Headers["x-retry-count"])
	require.Equal(t, "own-1:1", d.Headers["x-retry-key"])
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(message.WorkflowID(orders, "own-1"), patience).Status)
}
