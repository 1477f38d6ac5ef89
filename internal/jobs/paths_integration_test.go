//go:build integration

package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/worker"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// sentItems acts on every item it is given by remembering it: a job's items without the
// RetryWorkflows behind them.
type sentItems struct {
	mu   sync.Mutex
	sent []string
}

func (s *sentItems) Count(context.Context, string) (int64, error) { return 0, nil }

func (s *sentItems) Page(context.Context, string, []byte, int) ([]string, []byte, error) {
	return nil, nil, nil
}

func (s *sentItems) Apply(_ context.Context, _ jobs.Target, id string) jobs.Applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, id)
	return jobs.Applied{ID: id}
}

func (s *sentItems) Outcome(context.Context, jobs.Baseline) jobs.Outcome { return jobs.Delivered }

func (s *sentItems) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// continueAfter is the job's MaxHistory in TestJobContinuesAsNewOnADevServer: a run takes
// two one-item batches (about 16 events) before it continues as new, so three items take two
// runs.
const continueAfter = 15

// A bulk retry of three listed items at one a second continues as new after two, carrying
// its progress, and its next run acts on the third and completes: every item acted on once, in
// order, over two runs. The run that continued is recorded as job-bulk-retry-continued-as-new,
// the one it started as job-bulk-retry-completed-after-continue-as-new.
func TestJobContinuesAsNewOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	taskQueue := devserver.UniqueName("jobcan")
	items := &sentItems{}
	w := worker.New(c, worker.Options{TaskQueue: taskQueue, StopTimeout: time.Second, Jobs: &jobs.Activities{Items: items}},
		&activities.Activities{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, w.Start())
	defer w.Stop()

	ids := []string{taskQueue + "/a", taskQueue + "/b", taskQueue + "/c"}
	id := jobs.IDPrefix + jobs.KindBulkRetry + "/" + taskQueue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, jobs.WorkflowName, jobs.Input{
		Kind:       jobs.KindBulkRetry,
		Target:     jobs.Target{Action: "retry", Actor: "op", Reason: "path test"},
		IDs:        ids,
		Rate:       1,
		MaxHistory: continueAfter,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), id, "", "test over") })
	first := run.GetRunID() // before Get, which follows the run to the one it continued as

	var p jobs.Progress
	require.NoError(t, run.Get(ctx, &p), "the job's last run answers its progress")
	require.Equal(t, jobs.StateCompleted, p.State)
	require.Equal(t, 2, p.Runs, "one continue-as-new")
	require.EqualValues(t, len(ids), p.Total)
	require.Equal(t, len(ids), p.Done)
	require.Zero(t, p.Failed)
	require.Zero(t, p.Remaining)
	require.Equal(t, ids, items.all(), "every item acted on once, in order")

	desc, err := c.DescribeWorkflow(ctx, id, first)
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, desc.RawResponse.GetWorkflowExecutionInfo().GetStatus())
	desc, err = c.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	last := desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	require.NotEqual(t, first, last)

	_, err = historytest.RecordRun(ctx, c, id, first, "job-bulk-retry-continued-as-new")
	require.NoError(t, err)
	_, err = historytest.RecordRun(ctx, c, id, last, "job-bulk-retry-completed-after-continue-as-new")
	require.NoError(t, err)
}
