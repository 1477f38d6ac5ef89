//go:build integration

package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/workflows"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// With default settings a message on the default policy is a run from its first report on:
// its first wait is a timer of that run, so "retry now" and "skip" act during it, as during
// any later wait. The default policy's first delay is raised from 2 s to 8 s (BASE_DELAY_MS)
// only to leave the test time to act; its shape stays the default's (exponential, additive
// jitter), and 8 s is within what the former default START_DELAY_MAX (10 s) waited as a
// workflow start delay, during which an operator's Update was refused.
func TestOperatorActsDuringTheFirstWait(t *testing.T) {
	s := newStack(t)
	s.cfg.BaseDelay = 8 * time.Second
	api := s.runWithOps()
	// Not under the stack's "e2e-*" routes: the queue gets the default policy.
	q := s.queue("default-policy."+s.prefix, nil)
	c := s.consume(q, nil)
	dlq := s.consume(s.dlq, nil)

	now, skip := message.WorkflowID(q, "first-now"), message.WorkflowID(q, "first-skip")
	published := time.Now()
	for _, id := range []string{"first-now", "first-skip"} {
		s.publishRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte(id), OriginalQueue: q, ErrorReason: "503"})
	}
	for _, id := range []string{now, skip} {
		s.waitQueriedStatus(t, id, workflows.StatusScheduled, 20*time.Second)
	}

	out := api.must(200, opToken, "POST", msgPath(now)+"/retry", map[string]string{"reason": "consumer fixed"})
	assert.Equal(t, true, out["applied"], "%v", out)
	d := c.next(t, 5*time.Second)
	assert.Equal(t, "first-now", d.MessageId)
	assert.EqualValues(t, 1, d.Headers[message.HeaderRetryCount])
	assert.Less(t, time.Since(published), 8*time.Second, "republished by the operator, before the policy's first delay")

	out = api.must(200, opToken, "POST", msgPath(skip)+"/skip", map[string]string{"reason": "not needed"})
	assert.Equal(t, true, out["applied"], "%v", out)
	assert.Equal(t, "dead", out["state"].(map[string]any)["status"])
	var e message.Envelope
	require.NoError(t, json.Unmarshal(dlq.next(t, 10*time.Second).Body, &e))
	assert.Equal(t, "first-skip", e.MessageID)
	// Dead items stay open for the retention, for an operator's retry.
	st, err := s.state(skip)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusDead, st.Status)
	assert.Zero(t, st.RetryCount, "never republished")
}
