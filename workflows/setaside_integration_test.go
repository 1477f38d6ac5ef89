//go:build integration

package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A report that reaches a dead message's run in the same workflow task as the end of its
// retention is not lost unread with the run: it is set aside as run-ended, counted and shown.
// The worker is stopped while the retention ends, so the order is certain.
func TestReportPendingWhenTheRunEndsIsSetAside(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)

	taskQueue := devserver.UniqueName("run-ended")
	acts := &activities.Activities{Publisher: &memPublisher{}, Logger: discardLogger()}
	newWorker := func() func() { return startWorker(t, c, taskQueue, acts) }
	const retention = 3 * time.Second
	p := policy.Policy{Name: "run-ended", Backoff: policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{time.Second}},
		Jitter: policy.Jitter{Mode: policy.NoJitter}, MaxRetries: 0, QuietWindow: time.Second}
	rep := message.FailureReport{
		Message: message.Message{MessageID: taskQueue, Payload: []byte("x"), OriginalQueue: "orders"},
		Failure: policy.Failure{Category: "transient", Reason: "timeout"},
		Policy:  p, DeadLetterQueue: "dead",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := message.WorkflowID("orders", taskQueue)

	stop := newWorker()
	reports := &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: retention}
	require.NoError(t, reports.Report(ctx, rep)) // max_retries 0: dead at once

	// The retention timer is the run's only timer; it is a little shorter than retention
	// when the dead-letter publish took a workflow task of its own.
	waitForFirstTimer(t, ctx, c, id, false)
	stop()
	waitForFirstTimer(t, ctx, c, id, true)
	late := rep
	late.Failure.Reason = "late failure"
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalFailureReport, late))

	defer newWorker()()
	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusExpired, res.Status)
	st := queryAs[workflows.State](t, ctx, c, id, workflows.QueryState)
	require.Equal(t, map[string]int{workflows.SetAsideRunEnded: 1}, st.SetAside)
	require.Equal(t, 1, st.DuplicateReports)
	require.NotNil(t, st.LastSetAside)
	require.Contains(t, st.LastSetAside.Detail, "run ended expired")
	require.Contains(t, st.LastSetAside.Detail, "late failure")
}

// waitForFirstTimer waits until the workflow's history shows its first timer started (or,
// with fired, fired), long-polling the history.
func waitForFirstTimer(t *testing.T, ctx context.Context, c client.Client, id string, fired bool) {
	t.Helper()
	it := c.GetWorkflowHistory(ctx, id, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err, "workflow %s: waiting for its first timer (fired: %v)", id, fired)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			if !fired {
				return
			}
		case enumspb.EVENT_TYPE_TIMER_FIRED:
			return
		}
	}
	t.Fatalf("workflow %s closed without a timer (fired: %v)", id, fired)
}
