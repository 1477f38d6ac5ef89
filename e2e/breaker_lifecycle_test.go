//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A breaker's life, quick: its policy trips at two republishes, cools down for a second and
// judges one probe over a second, so it opens, probes and closes within seconds.
const breakerLifecyclePolicyFile = `
policies:
  e2e-flaky:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 10
    quiet_window: 2s
    breaker: {window: 10s, min_republishes: 2, failure_ratio: 0.5, cooldown: 1s, cooldown_max: 2s, probes: 1, probe_window: 1s, release_rate: 20}
  e2e-idle:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 3
    quiet_window: 2s
    breaker: {min_republishes: 100, idle_end: 3s}
routes:
  - queue: "e2e-*.flaky*"
    policy: e2e-flaky
  - queue: "e2e-*.idle*"
    policy: e2e-idle
`

// flakyMessages: a few messages into a consumer that is down until the breaker opens.
const flakyMessages = 4

// flakyDestination runs the scenario: flakyMessages reported to a consumer that fails every
// delivery until its destination's breaker has opened (an event, not a span of time: a 4 s
// outage once ended, on a loaded machine, before the first republish), then takes them;
// every one ends delivered. It returns the queue and the breaker's state then.
func (s *stack) flakyDestination(t *testing.T, name string) (string, workflows.BreakerState) {
	t.Helper()
	q := s.queue(s.prefix+"."+name, nil)
	var opened atomic.Bool
	dst := s.destination(q, func(time.Time) bool { return !opened.Load() })
	s.onBreakerOpen(q, func() { opened.Store(true) })
	ids := s.failMessages(q, name, flakyMessages)
	for _, id := range ids {
		r := s.workflowResult(message.WorkflowID(q, id), patience)
		require.Equal(t, workflows.StatusDelivered, r.Status, id)
	}
	_, err := dst.seen()
	require.NoError(t, err)
	// The breaker closed and released every held retry (they are delivered): it settles
	// closed, releasing nothing.
	var st workflows.BreakerState
	require.Eventually(t, func() bool {
		st, err = s.breakerState(q)
		return err == nil && st.Mode == workflows.BreakerClosed && !st.Releasing
	}, patience, 100*time.Millisecond, "breaker of %s never settled closed: %+v, %v", q, st, err)
	return q, st
}

// onBreakerOpen calls f once queue's breaker is first queried open (or holding otherwise),
// polling it until then or the test's end.
func (s *stack) onBreakerOpen(queue string, f func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if st, err := s.breakerState(queue); err == nil && st.Mode.Holds() {
				f()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// TestBreakerOpensProbesAndCloses drives one destination's breaker through open, half-open
// and closed, and records its history (breaker-open-probe-closed).
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	s := newStack(t)
	require.NoError(t, os.WriteFile(s.cfg.PolicyFile, []byte(breakerLifecyclePolicyFile), 0o600))
	s.run("all")

	q, st := s.flakyDestination(t, "flaky-orders")

	var modes []workflows.BreakerMode
	for _, e := range st.Events {
		modes = append(modes, e.To)
	}
	require.Contains(t, modes, workflows.BreakerOpen, "events: %s", describeEvents(st.Events, time.Time{}))
	// It probes a held retry (half-open) when its cooldown ends; on a loaded machine the
	// probe's visibility list may find none held yet, and it closes at once instead, saying
	// so (the held retries are then released: every message was delivered above).
	probed := slices.Contains(modes, workflows.BreakerHalfOpen)
	closedEmpty := false
	for _, e := range st.Events {
		closedEmpty = closedEmpty || (e.To == workflows.BreakerClosed && strings.Contains(e.Detail, "no held retry to probe"))
	}
	assert.True(t, probed || closedEmpty, "neither probed nor closed for want of a held retry: %s", describeEvents(st.Events, time.Time{}))
	assert.Equal(t, workflows.BreakerClosed, modes[len(modes)-1])
	s.recordHistory(message.BreakerWorkflowID(q), "breaker-open-probe-closed")
	fmt.Println("breaker events:", describeEvents(st.Events, time.Time{}))
}

// failsFirstRepublish consumes queue, failing each message's first republish (reporting it
// as a consumer integrated with the scheduler does) and taking the second: one failed retry
// per message, counted by the destination's breaker.
func (s *stack) failsFirstRepublish(queue string) *consumer {
	return s.consume(queue, func(d amqp.Delivery) {
		n, _ := message.HeaderInt64(d.Headers["x-retry-count"])
		if n < 2 {
			key, _ := d.Headers["x-retry-key"].(string)
			at, _ := message.HeaderInt64(d.Headers[message.HeaderRetryRepublishedAt])
			_ = s.sendRetry(message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: queue,
				ErrorReason: "503 from downstream", HTTPStatus: 503, RetryCount: int(n), RetryKey: key, RepublishedAtMs: at})
		}
		_ = d.Ack(false)
	})
}

// breakerRun describes the latest run of queue's breaker: its run id and status.
func (s *stack) breakerRun(queue string) (string, enumspb.WorkflowExecutionStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	d, err := s.tc.DescribeWorkflow(ctx, message.BreakerWorkflowID(queue), "")
	if err != nil {
		return "", 0, err
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	return info.GetExecution().GetRunId(), info.GetStatus(), nil
}

// TestIdleBreakerEndsAndStartsAgain: a destination's breaker, closed with nothing reported
// for its policy's idle_end (3 s here), ends; the next failed retry for the destination
// starts it again. Records the ended run's history (breaker-idle-ended).
func TestIdleBreakerEndsAndStartsAgain(t *testing.T) {
	s := newStack(t)
	require.NoError(t, os.WriteFile(s.cfg.PolicyFile, []byte(breakerLifecyclePolicyFile), 0o600))
	s.run("all")
	q := s.queue(s.prefix+".idle-orders", nil)
	s.failsFirstRepublish(q)

	s.failMessages(q, "first", 1)
	r := s.workflowResult(message.WorkflowID(q, "first-0"), patience)
	require.Equal(t, workflows.StatusDelivered, r.Status)

	var firstRun string
	require.Eventually(t, func() bool {
		run, status, err := s.breakerRun(q)
		firstRun = run
		return err == nil && status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, patience, 100*time.Millisecond, "the idle breaker of %s did not end", q)
	s.recordHistory(message.BreakerWorkflowID(q), "breaker-idle-ended")

	s.failMessages(q, "second", 1)
	r = s.workflowResult(message.WorkflowID(q, "second-0"), patience)
	require.Equal(t, workflows.StatusDelivered, r.Status)
	run, status, err := s.breakerRun(q)
	require.NoError(t, err)
	assert.NotEqual(t, firstRun, run, "a new run of the breaker")
	assert.Contains(t, []enumspb.WorkflowExecutionStatus{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}, status)
	st, err := s.breakerState(q)
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		require.NoError(t, err)
		assert.Equal(t, workflows.BreakerClosed, st.Mode)
	}
}
