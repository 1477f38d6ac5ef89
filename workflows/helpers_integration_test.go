//go:build integration

package workflows_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/worker"
)

// discardLogger is the activities' logger in these tests: their logs would only be noise.
func discardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startWorker starts a worker of acts on taskQueue and returns its Stop.
func startWorker(t *testing.T, c client.Client, taskQueue string, acts *activities.Activities) func() {
	t.Helper()
	w := worker.New(c, worker.Options{TaskQueue: taskQueue, StopTimeout: time.Second}, acts)
	require.NoError(t, w.Start())
	return w.Stop
}

// queryAs answers query name of workflow id's latest run as a T.
func queryAs[T any](t *testing.T, ctx context.Context, c client.Client, id, name string) T {
	t.Helper()
	v, err := c.QueryWorkflow(ctx, id, "", name)
	require.NoError(t, err, "query %s of %s", name, id)
	var out T
	require.NoError(t, v.Get(&out), "decode query %s of %s", name, id)
	return out
}
