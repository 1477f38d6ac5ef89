//go:build integration

package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"retry-scheduler/message"
	"retry-scheduler/workflows"
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
routes:
  - queue: "e2e-*.flaky*"
    policy: e2e-flaky
`

// flakyMessages and flakyOutage: a few messages into a consumer down for a few seconds.
const (
	flakyMessages = 4
	flakyOutage   = 4 * time.Second
)

// flakyDestination runs the scenario: a consumer that fails for flakyOutage, flakyMessages
// reported; every one ends delivered. It returns the queue and the breaker's state then.
func (s *stack) flakyDestination(t *testing.T, name string) (string, workflows.BreakerState) {
	t.Helper()
	q := s.queue(s.prefix+"."+name, nil)
	recovered := time.Now().Add(flakyOutage)
	dst := s.destination(q, func(now time.Time) bool { return now.Before(recovered) })
	ids := s.failMessages(q, name, flakyMessages)
	for _, id := range ids {
		r := s.workflowResult(message.WorkflowID(q, id), 2*time.Minute)
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
	}, 30*time.Second, 100*time.Millisecond, "breaker of %s never settled closed: %+v, %v", q, st, err)
	return q, st
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
	assert.Contains(t, modes, workflows.BreakerOpen, "events: %s", describeEvents(st.Events, time.Time{}))
	assert.Contains(t, modes, workflows.BreakerHalfOpen)
	assert.Equal(t, workflows.BreakerClosed, modes[len(modes)-1])
	s.recordHistory(message.BreakerWorkflowID(q), "breaker-open-probe-closed")
	fmt.Println("breaker events:", describeEvents(st.Events, time.Time{}))
}
