//go:build integration

package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// holdingGate holds every destination: only a release lets a retry go.
type holdingGate struct{}

func (holdingGate) Holds(string) (string, bool) { return string(workflows.BreakerOpen), true }

// heldPolicy retries 100 ms after each failure, at most 3 times, with a 2 s quiet window,
// under a breaker that probes one retry.
func heldPolicy() policy.Policy {
	return policy.Policy{
		Name:        "held",
		Backoff:     policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{100 * time.Millisecond}},
		Jitter:      policy.Jitter{Mode: policy.NoJitter},
		MaxRetries:  3,
		QuietWindow: 2 * time.Second,
		Breaker:     policy.Breaker{Probes: 1},
	}
}

// A retry due while its destination's breaker is open is held on a real server: nothing is
// published until the breaker's release, which goes out although the gate still holds. With
// RECORD_HISTORIES set, the run's history is written there for the replay tests.
func TestHeldRetryIsReleasedOnADevServer(t *testing.T) {
	h := startHeldRun(t, "held", "")
	ctx, c := h.ctx, h.c
	msgID, id, pub := h.msgID, h.id, h.pub
	h.report(0, "")

	waitForStatus(t, ctx, c, id, workflows.StatusHeld)
	require.Empty(t, pub.published(), "nothing goes out while held")
	held := h.state()
	require.Equal(t, workflows.StatusHeld, held.Status)
	require.Zero(t, held.Sequence)

	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalRelease, workflows.Release{Probe: true, By: workflows.ReleasedBy}))
	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, 1, res.RetryCount)
	require.Equal(t, []string{msgID + ":1"}, pub.published())

	_, err := historytest.Record(ctx, c, id, "held-released-delivered")
	require.NoError(t, err)
}

// waitForStatus waits until the workflow's history shows its search attributes upserted with
// status st. It long-polls the history, so each new event wakes it.
func waitForStatus(t *testing.T, ctx context.Context, c client.Client, id string, st workflows.Status) {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	it := c.GetWorkflowHistory(ctx, id, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err, "workflow %s: waiting for status %s", id, st)
		if e.GetEventType() != enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES {
			continue
		}
		p := e.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()[workflows.SAStatus.GetName()]
		var got string
		if p != nil && dc.FromPayload(p, &got) == nil && got == string(st) {
			return
		}
	}
	t.Fatalf("workflow %s closed without status %s", id, st)
}

// probeFailedHistory names the recorded history of TestFailedProbeOnADevServer.
const probeFailedHistory = "held-probe-failed-signals-breaker"

// A retry released as its breaker's probe fails on a real server: its run tells the breaker
// (a signal to the destination's breaker workflow, which here runs on a task queue nobody
// polls, so that the signal stays as sent), is held again, and a release delivers it. With
// RECORD_HISTORIES set, the run's history is written there for the replay tests.
func TestFailedProbeOnADevServer(t *testing.T) {
	h := startHeldRun(t, "probe", ".orders")
	ctx, c := h.ctx, h.c
	msgID, id, pub, report, state := h.msgID, h.id, h.pub, h.report, h.state

	breakerID := message.BreakerWorkflowID(h.queue)
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: breakerID, TaskQueue: h.reports.TaskQueue + "-unpolled"},
		workflows.BreakerWorkflowName, workflows.BreakerInput{Queue: h.queue})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), breakerID, "", "test over") })

	report(0, "")
	waitForStatus(t, ctx, c, id, workflows.StatusHeld)
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalRelease, workflows.Release{Probe: true, By: workflows.ReleasedBy}))
	require.Eventually(t, func() bool { return len(pub.published()) == 1 }, time.Minute, 10*time.Millisecond, "the probe went out")
	report(1, msgID+":1") // the probe failed
	require.Eventually(t, func() bool {
		st := state()
		return st.Status == workflows.StatusHeld && st.RetryCount == 1
	}, time.Minute, 10*time.Millisecond, "held again after the failed probe")
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalRelease, workflows.Release{By: workflows.ReleasedBy}))
	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, []string{msgID + ":1", msgID + ":2"}, pub.published())

	// The breaker got the probe's failure, once, naming the run and the probe's key.
	var got []workflows.ProbeFailure
	it := c.GetWorkflowHistory(ctx, breakerID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == workflows.SignalBreakerProbeFailed {
			var pf workflows.ProbeFailure
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &pf))
			got = append(got, pf)
		}
	}
	require.Equal(t, []workflows.ProbeFailure{{WorkflowID: id, RetryKey: msgID + ":1"}}, got)

	_, err = historytest.Record(ctx, c, id, probeFailedHistory)
	require.NoError(t, err)
}

// heldKeyReportHistory names the recorded history of TestReportWithTheHeldRetrysKeyOnADevServer.
const heldKeyReportHistory = "held-report-with-held-key-counts"

// A report that carries the key of the retry a run holds, on a real server: the retry went out
// in a workflow task its worker never completed, so the report is that retry's failure. The
// run ends the hold, schedules the next retry (held again), and its release sends the next key,
// not the one the consumer already had. With RECORD_HISTORIES set, the run's history is written
// there for the replay tests.
func TestReportWithTheHeldRetrysKeyOnADevServer(t *testing.T) {
	h := startHeldRun(t, "heldkey", "")
	ctx, c := h.ctx, h.c
	msgID, id, pub, report, state := h.msgID, h.id, h.pub, h.report, h.state

	report(0, "")
	waitForStatus(t, ctx, c, id, workflows.StatusHeld)
	report(1, msgID+":1")
	require.Eventually(t, func() bool {
		st := state()
		return st.Status == workflows.StatusHeld && st.RetryCount == 1
	}, time.Minute, 10*time.Millisecond, "retry 1's failure counted, retry 2 held")
	st := state()
	require.Empty(t, st.SetAside)
	require.Equal(t, 1, st.Sequence)
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalRelease, workflows.Release{By: workflows.ReleasedBy}))
	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, 2, res.RetryCount)
	require.Equal(t, []string{msgID + ":2"}, pub.published())

	_, err := historytest.Record(ctx, c, id, heldKeyReportHistory)
	require.NoError(t, err)
}

// heldRun drives one message's run under a gate that holds every retry: reports of it, and its
// state.
type heldRun struct {
	t       *testing.T
	ctx     context.Context
	c       client.Client
	msgID   string
	id      string
	queue   string
	reports *reporter.Reporter
	pub     *memPublisher
	policy  policy.Policy
}

// startHeldRun starts a dev server and a worker on a task queue of its own (named from prefix)
// whose gate holds every destination, for one message of queue (the task queue's name +
// suffix); the test has two minutes.
func startHeldRun(t *testing.T, prefix, suffix string) *heldRun {
	t.Helper()
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	taskQueue := devserver.UniqueName(prefix)
	h := &heldRun{t: t, ctx: ctx, c: c, msgID: taskQueue, queue: taskQueue + suffix, pub: &memPublisher{}, policy: heldPolicy(),
		reports: &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: time.Minute}}
	h.id = message.WorkflowID(h.queue, h.msgID)
	acts := &activities.Activities{Publisher: h.pub, Gate: holdingGate{}, Logger: discardLogger()}
	t.Cleanup(startWorker(t, c, taskQueue, acts))
	return h
}

// report reports a failure of the delivery with retry count count and retry key key.
func (h *heldRun) report(count int, key string) {
	h.t.Helper()
	require.NoError(h.t, h.reports.Report(h.ctx, message.FailureReport{
		Message:         message.Message{MessageID: h.msgID, Payload: []byte("x"), OriginalQueue: h.queue},
		Failure:         policy.Failure{Category: "transient", Reason: "503"},
		Policy:          h.policy,
		DeadLetterQueue: "dead",
		RetryCount:      count,
		RetryKey:        key,
	}))
}

// state queries the run's state.
func (h *heldRun) state() workflows.State {
	h.t.Helper()
	return queryAs[workflows.State](h.t, h.ctx, h.c, h.id, workflows.QueryState)
}
