//go:build integration

package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// datedOutcomes reports outcomes in dated buckets, with their totals, as a counter does.
func (b *breakerRig) datedOutcomes(buckets ...workflows.BreakerBucket) {
	b.t.Helper()
	o := workflows.BreakerOutcomes{Buckets: buckets, Settings: b.settings}
	for _, bk := range buckets {
		o.Republished += bk.Republished
		o.Failed += bk.Failed
	}
	b.send(o)
}

// send signals o, starting the breaker if need be.
func (b *breakerRig) send(o workflows.BreakerOutcomes) {
	b.t.Helper()
	_, err := b.c.SignalWithStartWorkflow(b.ctx, b.id, workflows.SignalBreakerOutcomes, o,
		client.StartWorkflowOptions{ID: b.id, TaskQueue: b.tq}, workflows.BreakerWorkflowName,
		workflows.BreakerInput{Queue: b.queue, Settings: b.settings})
	require.NoError(b.t, err)
}

// windowTotals are the counts a breaker's window holds.
func windowTotals(st workflows.BreakerState) (republished, failed int) {
	for _, bk := range st.Window {
		republished += bk.Republished
		failed += bk.Failed
	}
	return republished, failed
}

// A breaker on a real server places dated outcomes by their dates: failures dated before its
// window (a report that waited behind a backlog) are dropped, failures dated at republishes
// the window holds open it however late they come, and a signal without dates (a process
// from before them) counts at its arrival. Then it cools down, closes with nothing held to
// probe, and ends idle. Its history is breaker-dated-outcomes-opened-ended.
func TestBreakerCountsOutcomesByDateOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	b := startBreaker(t, srv.DialForTest(t), "dated")
	// A window long enough that the test's steps stay within it on any machine.
	b.settings = policy.Breaker{Window: 10 * time.Minute, Cooldown: time.Second, IdleEnd: 2 * time.Second}.WithDefaults()

	wentOut := time.Now().UTC().Add(-2 * time.Second)
	b.send(workflows.BreakerOutcomes{Republished: 2, Settings: b.settings}) // undated: at arrival
	b.datedOutcomes(workflows.BreakerBucket{At: wentOut, Republished: 20})
	b.datedOutcomes(
		workflows.BreakerBucket{At: wentOut.Add(-time.Hour), Failed: 15}, // older than the window
		workflows.BreakerBucket{At: time.Now().UTC(), Failed: 2},
	)
	var st workflows.BreakerState
	require.Eventually(t, func() bool {
		st = b.state()
		_, failed := windowTotals(st)
		return failed > 0
	}, time.Minute, 20*time.Millisecond, "the breaker counts the third report")
	require.Equal(t, workflows.BreakerClosed, st.Mode)
	rep, failed := windowTotals(st)
	require.Equal(t, 22, rep)
	require.Equal(t, 2, failed, "the failures older than the window are dropped")

	b.datedOutcomes(workflows.BreakerBucket{At: wentOut, Failed: 10}) // answering the 20
	b.awaitEnd()
	st = b.state() // the ended run, replayed
	require.Equal(t, []workflows.BreakerEvent{
		{To: workflows.BreakerOpen, Actor: workflows.ReleasedBy, Detail: "12 of 22 republishes failed within 10m0s"},
		{To: workflows.BreakerClosed, Actor: workflows.ReleasedBy, Detail: "no held retry to probe"},
	}, lastEvents(st, 2))
	require.Len(t, st.Events, 2)
	_, err := historytest.Record(b.ctx, b.c, b.id, "breaker-dated-outcomes-opened-ended")
	require.NoError(t, err)
}
