//go:build integration

package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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

// memPublisher keeps what the activities publish.
type memPublisher struct {
	mu   sync.Mutex
	keys []string
}

func (p *memPublisher) Publish(_ context.Context, _, _ string, _ bool, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := msg.Headers[message.HeaderRetryKey].(string); ok {
		p.keys = append(p.keys, k)
	}
	return nil
}

func (p *memPublisher) published() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

// A failure report that reaches the workflow in the same workflow task as the firing of the
// quiet-window timer is a failure, not silence. It happens whenever a report is late by about
// the quiet window (the bridge was down, or cut off from Temporal): the server fires the timer,
// the report is signalled before a worker has handled that, and the next workflow task holds
// both. `make soak` found runs that then ended "delivered" with the report unread: the message
// was lost. Here the worker is stopped while the quiet window passes, so the order is certain.
func TestReportPendingWhenQuietWindowEndsIsApplied(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)

	taskQueue := devserver.UniqueName("quiet-race")
	msgID := taskQueue
	pub := &memPublisher{}
	acts := &activities.Activities{Publisher: pub, Logger: discardLogger()}
	newWorker := func() func() { return startWorker(t, c, taskQueue, acts) }

	p := policy.Policy{
		Name:        "quiet-race",
		Backoff:     policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{100 * time.Millisecond}},
		Jitter:      policy.Jitter{Mode: policy.NoJitter},
		MaxRetries:  3,
		QuietWindow: 2 * time.Second,
	}
	rep := func(n int) message.FailureReport {
		r := message.FailureReport{
			Message:    message.Message{MessageID: msgID, Payload: []byte("x"), OriginalQueue: "orders"},
			RetryCount: n,
			Failure:    policy.Failure{Category: "transient", Reason: "timeout"},
			Policy:     p, DeadLetterQueue: "dead",
		}
		if n > 0 {
			r.RetryKey = workflows.RetryKey(msgID, n)
		}
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := message.WorkflowID("orders", msgID)

	stop := newWorker()
	reports := &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: time.Minute}
	require.NoError(t, reports.Report(ctx, rep(0)))

	// Retry 1 is out and the quiet window's timer started: stop the worker.
	waitForTimer(t, ctx, c, id, p.QuietWindow, false)
	stop()
	// The server fires the quiet timer with no worker to run the task; then the report of
	// retry 1's failure arrives, late.
	waitForTimer(t, ctx, c, id, p.QuietWindow, true)
	require.NoError(t, c.SignalWorkflow(ctx, id, "", workflows.SignalFailureReport, rep(1)))

	defer newWorker()()
	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, []string{msgID + ":1", msgID + ":2"}, pub.published(), "the late failure of retry 1 gets retry 2")
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, 2, res.RetryCount)
}

// waitForTimer waits until the workflow's history shows a timer of duration d started (or,
// with fired, fired). It long-polls the history, so each new event wakes it.
func waitForTimer(t *testing.T, ctx context.Context, c client.Client, id string, d time.Duration, fired bool) {
	t.Helper()
	started := map[int64]bool{} // event ids of TimerStarted events for d
	it := c.GetWorkflowHistory(ctx, id, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err, "workflow %s: waiting for a %s timer (fired: %v)", id, d, fired)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			if e.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration() == d {
				started[e.GetEventId()] = true
				if !fired {
					return
				}
			}
		case enumspb.EVENT_TYPE_TIMER_FIRED:
			if fired && started[e.GetTimerFiredEventAttributes().GetStartedEventId()] {
				return
			}
		}
	}
	t.Fatalf("workflow %s closed without a %s timer (fired: %v)", id, d, fired)
}
