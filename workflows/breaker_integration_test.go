//go:build integration

package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// listedHeld lists one held retry for every destination.
type listedHeld struct{ id string }

func (l listedHeld) ListHeld(context.Context, string, int) ([]string, error) {
	return []string{l.id}, nil
}

// A breaker on a real server opens, releases its probe when the cooldown ends, and reopens
// when the probe's run reports the probe failed; failures the processes count while it is
// half-open do not reopen it. The probe's run is a workflow on a task queue nobody polls,
// so that the release stays as sent. With RECORD_HISTORIES set, the breaker's history is
// written there for the replay tests.
func TestBreakerJudgesItsProbeOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)

	taskQueue := devserver.UniqueName("breaker")
	queue := taskQueue + ".orders"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probeID := message.WorkflowID(queue, "probe")
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: probeID, TaskQueue: taskQueue + "-unpolled"}, workflows.RetryWorkflowName, workflows.Input{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), probeID, "", "test over") })

	acts := &activities.Activities{Held: listedHeld{probeID}, Logger: discardLogger()}
	defer startWorker(t, c, taskQueue, acts)()

	settings := policy.Breaker{
		Window: 30 * time.Second, MinRepublishes: 2, FailureRatio: 0.5,
		Cooldown: time.Second, CooldownMax: time.Minute,
		Probes: 1, ProbeWindow: time.Minute, ReleaseRate: 10,
	}.WithDefaults()
	id := message.BreakerWorkflowID(queue)
	outcomes := func(republished, failed int) {
		_, err := c.SignalWithStartWorkflow(ctx, id, workflows.SignalBreakerOutcomes,
			workflows.BreakerOutcomes{Republished: republished, Failed: failed, Settings: settings},
			client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, workflows.BreakerWorkflowName,
			workflows.BreakerInput{Queue: queue, Settings: settings})
		require.NoError(t, err)
	}
	state := func() workflows.BreakerState {
		return queryAs[workflows.BreakerState](t, ctx, c, id, workflows.QueryBreakerState)
	}
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), id, "", "test over") })

	outcomes(4, 4)
	require.Eventually(t, func() bool { return state().Mode == workflows.BreakerHalfOpen }, time.Minute, 20*time.Millisecond,
		"half-open once the cooldown ended")
	outcomes(0, 3) // an older retry's failures, counted by a process
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalBreakerProbeFailed, workflows.ProbeFailure{WorkflowID: probeID, RetryKey: "probe:1"}))
	var st workflows.BreakerState
	require.Eventually(t, func() bool { st = state(); return st.Mode == workflows.BreakerOpen && st.Opens == 2 }, time.Minute, 20*time.Millisecond,
		"reopened by the probe's failure")
	require.Equal(t, "1 of 1 probes failed within the probe window", st.Events[len(st.Events)-1].Detail)
	require.Equal(t, []string{probeID}, st.LastProbe.Failures)

	_, err = historytest.Record(ctx, c, id, "breaker-probe-failed-reopened")
	require.NoError(t, err)
}
