//go:build integration

package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// The lag source against a real server: DescribeTaskQueue with ReportStats answers for the
// workflow and activity types of a task queue, and reads a backlog that exists: workflows
// started on a task queue no worker polls, whose first workflow tasks wait. The server's
// stats are approximate and refreshed in the background, so the reading is awaited.
func TestEngineLagAgainstTemporal(t *testing.T) {
	srv := devserver.StartForTest(t)
	tc := srv.DialForTest(t)
	tq := devserver.UniqueName("admission")
	ctx := context.Background()
	c := New(Config{Service: ServiceOf(tc), Namespace: srv.Namespace, TaskQueue: tq, Bound: time.Second, Interval: time.Second})

	r := c.Step(ctx)
	require.NoError(t, r.StatsErr, "the server answers the stats call")
	assert.Zero(t, r.BacklogCount, "a task queue nothing was sent to")
	assert.Zero(t, r.BacklogAge)

	const n = 5
	for i := range n {
		id := fmt.Sprintf("%s/%d", tq, i)
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, "AdmissionBacklogWorkflow")
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), id, "", "test over") })
	}

	// Minutes, not seconds: a loaded machine refreshes the stats late.
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r = c.Step(ctx)
		require.NoError(t, r.StatsErr)
		if r.BacklogCount >= n && r.BacklogAge > time.Second {
			break
		}
		require.True(t, time.Now().Before(deadline), "no backlog of %d tasks older than 1 s read within 3 minutes; last reading %+v", n, r)
		<-tick.C
	}
	t.Logf("reading: backlog %d tasks, oldest %s, dispatch %.2f/s", r.BacklogCount, r.BacklogAge, r.DispatchRate)
	assert.GreaterOrEqual(t, r.Lag, r.BacklogAge)
	st := c.Status()
	assert.True(t, st.IntakeLimited, "a backlog older than the 1 s bound limits the intake")
	assert.Equal(t, r.BacklogCount, st.BacklogCount)
}
