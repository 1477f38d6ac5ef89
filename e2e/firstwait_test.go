//go:build integration

package e2e

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// With default settings a message on the default policy is a run from its first report on:
// its first wait is a timer of that run, so "retry now" and "skip" act during it, as during
// any later wait (the former default START_DELAY_MAX, 10 s, waited a short first delay as the
// workflow's start delay, during which an operator's Update was refused; config's tests hold
// the default at 0). The default policy's first delay is raised to an hour (BASE_DELAY_MS)
// so that the test acts during it however slow the machine, and so that only the operator's
// retry can explain a republish; its shape stays the default's (exponential, additive jitter).
func TestOperatorActsDuringTheFirstWait(t *testing.T) {
	s := newStack(t)
	s.cfg.BaseDelay = time.Hour
	s.cfg.MaxDelay = max(s.cfg.MaxDelay, s.cfg.BaseDelay)
	api := s.runWithOps()
	// Not under the stack's "e2e-*" routes: the queue gets the default policy.
	q := s.queue("default-policy."+s.prefix, nil)
	c := s.consume(q, nil)
	dlq := s.consume(s.dlq, nil)

	now, skip := message.WorkflowID(q, "first-now"), message.WorkflowID(q, "first-skip")
	for _, id := range []string{"first-now", "first-skip"} {
		s.publishRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte(id), OriginalQueue: q, ErrorReason: "503"})
	}
	for _, id := range []string{now, skip} {
		s.waitQueriedStatus(t, id, workflows.StatusScheduled, patience)
	}

	out := api.must(200, opToken, "POST", msgPath(now)+"/retry", map[string]string{"reason": "consumer fixed"})
	assert.Equal(t, true, out["applied"], "%v", out)
	d := c.next(t, patience)
	assert.Equal(t, "first-now", d.MessageId)
	assert.EqualValues(t, 1, d.Headers[message.HeaderRetryCount])
	// Republished by the operator: the first delay is an hour, and the run's record says so.
	st, err := s.state(now)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Sequence, "one republish")
	assert.True(t, slices.ContainsFunc(st.Events, func(e workflows.Event) bool {
		return e.Kind == workflows.SignalRetryNow && e.Actor == "op" && e.Detail == "consumer fixed"
	}), "the operator's retry-now is in the run's record: %+v", st.Events)

	out = api.must(200, opToken, "POST", msgPath(skip)+"/skip", map[string]string{"reason": "not needed"})
	assert.Equal(t, true, out["applied"], "%v", out)
	assert.Equal(t, "dead", out["state"].(map[string]any)["status"])
	var e message.Envelope
	require.NoError(t, json.Unmarshal(dlq.next(t, patience).Body, &e))
	assert.Equal(t, "first-skip", e.MessageID)
	// Dead items stay open for the retention, for an operator's retry.
	st, err = s.state(skip)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusDead, st.Status)
	assert.Zero(t, st.RetryCount, "never republished")
}
