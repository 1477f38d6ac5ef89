//go:build integration

package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The poller's queries against a real server's visibility (the dev server's SQLite: no ORDER
// BY, text comparison of Datetime values). The RetryWorkflows here are started on a task
// queue no worker polls, with the search attributes set at start, so they stay as made.
func TestDepthPollerAgainstTemporal(t *testing.T) {
	srv := devserver.StartForTest(t)
	tc := srv.DialForTest(t)

	tq := devserver.UniqueName("depth")
	now := time.Now()
	ctx := context.Background()
	n := 0
	start := func(status workflows.Status, sa ...temporal.SearchAttributeUpdate) string {
		n++
		id := fmt.Sprintf("%s/%d", tq, n)
		sa = append(sa, workflows.SAStatus.ValueSet(string(status)))
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: tq, TypedSearchAttributes: temporal.NewSearchAttributes(sa...),
		}, workflows.RetryWorkflowName, workflows.Input{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), id, "", "test over") })
		return id
	}
	// Live: two due (one whose due time ends in a round millisecond, the case the SQLite text
	// comparison gets wrong without the half-millisecond bound), one not yet; one republishing; one awaiting.
	start(workflows.StatusScheduled, workflows.SANextRetryTime.ValueSet(now.Add(-time.Minute).Truncate(time.Second)))
	start(workflows.StatusScheduled, workflows.SANextRetryTime.ValueSet(now.Add(-time.Second)))
	start(workflows.StatusScheduled, workflows.SANextRetryTime.ValueSet(now.Add(time.Hour)))
	start(workflows.StatusRepublishing)
	start(workflows.StatusAwaitingOutcome)
	// Dead: oldest 49 h ago on a whole second, then a spread.
	oldest := now.Add(-49 * time.Hour).Truncate(time.Second)
	start(workflows.StatusDead, workflows.SADeadAt.ValueSet(oldest))
	for _, age := range []time.Duration{30 * time.Hour, 3 * time.Hour, time.Hour, 10 * time.Minute, time.Second} {
		start(workflows.StatusDead, workflows.SADeadAt.ValueSet(now.Add(-age)))
	}
	// Closed and delivered: not counted.
	gone := start(workflows.StatusScheduled, workflows.SANextRetryTime.ValueSet(now.Add(-time.Hour)))
	require.NoError(t, tc.TerminateWorkflow(ctx, gone, "", "terminated while scheduled"))
	start(workflows.StatusDelivered)

	reg := prometheus.NewRegistry()
	p := NewDepthPoller(DepthConfig{
		Client: tc, TaskQueue: tq, PageSize: 2, // forces the counting search
		Now:    func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, reg)
	want := map[string]float64{"depth": 5, "due": 2, "dead": 6, "oldest": now.Sub(oldest).Seconds(), "errors": 0}
	// Visibility is eventually consistent: poll until it has every workflow.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, p.Poll(ctx))
		assert.Equal(c, want, gauges(t, p))
	}, 20*time.Second, 100*time.Millisecond)

	// "DeadAt <= t" where t is exactly a dead letter's DeadAt on a whole second: SQLite
	// compares "…:05.000+00:00" with "…:05+00:00" as text, which the half-millisecond bound works around.
	at, err := p.vis.count(ctx, filter{statuses: deadStatuses, deadBy: oldest})
	require.NoError(t, err)
	require.EqualValues(t, 1, at)
}
