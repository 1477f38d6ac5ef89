//go:build integration

package visibility

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Literal and CheckMatchable against a real server: every value CheckMatchable accepts,
// hostile ones included, selects exactly its own workflow; every value it refuses would
// select none (the filter would silently miss it). The RetryWorkflows are started on a task
// queue no worker polls, with their search attributes set at start, so they stay as made.
func TestLiteralsAgainstTemporal(t *testing.T) {
	srv := devserver.StartForTest(t)
	tc := srv.DialForTest(t)

	tq := devserver.UniqueName("literal")
	ctx := context.Background()

	matchable := []string{
		"orders", "it's", "a''b", `x' OR RetryStatus != 'y`, `x') OR ('1'='1`, "ünïcödé ✓", "a\x01b",
		"with space", "%_*", "-- comment", "a;b", "`tick`",
	}
	unmatchable := []string{`a"b`, `a\b`, `a\'b`, "a\tb", "line\nbreak", "'lead", "trail'"}
	for _, v := range matchable {
		require.NoError(t, CheckMatchable(v), "%q", v)
	}
	for _, v := range unmatchable {
		require.ErrorIs(t, CheckMatchable(v), ErrUnmatchable, "%q", v)
	}
	all := append(append([]string{}, matchable...), unmatchable...)
	for i, v := range all {
		id := fmt.Sprintf("%s/%d", tq, i)
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: tq, TypedSearchAttributes: temporal.NewSearchAttributes(
				workflows.SAStatus.ValueSet(string(workflows.StatusDead)), workflows.SAOriginalQueue.ValueSet(v)),
		}, workflows.RetryWorkflowName, workflows.Input{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), id, "", "test over") })
	}
	ours := RetryWorkflows(Running, tq)
	count := func(q Query) (int64, error) {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: srv.Namespace, Query: q.String()})
		return resp.GetCount(), err
	}
	// Visibility is eventually consistent: wait until it lists every workflow.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := count(ours.Statuses(workflows.StatusDead))
		require.NoError(c, err)
		assert.EqualValues(c, len(all), n)
	}, 20*time.Second, 100*time.Millisecond)

	for _, v := range matchable {
		q := ours.Equal(workflows.SAOriginalQueue, v)
		n, err := count(q)
		require.NoError(t, err, "%s", q)
		assert.EqualValues(t, 1, n, "%s", q)
	}
	n, err := count(ours.In(workflows.SAOriginalQueue, matchable...))
	require.NoError(t, err)
	assert.EqualValues(t, len(matchable), n, "IN takes the same literals")
	for _, v := range unmatchable {
		q := ours.Equal(workflows.SAOriginalQueue, v)
		n, err := count(q)
		require.NoError(t, err, "%s: quoted safely, the query is valid", q)
		assert.EqualValues(t, 0, n, "%s: the server does not match it, which is why CheckMatchable refuses it", q)
	}
}
