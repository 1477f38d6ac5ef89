package ops

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The retry queue shows the retries a message really gets: a message whose latest failure is
// unknown is held to its policy's unknown-error cap, as the workflow decides, whatever its
// policy's or its own maximum.
func TestRetryQueueMaxRetriesKeepsTheUnknownCap(t *testing.T) {
	withPolicy := func(id, category string, own int) workflows.State {
		s := item("orders", id, workflows.StatusScheduled, t0, "")
		s.Category = category
		s.Policy.MaxRetries, s.Policy.UnknownMaxRetries = 5, 2
		s.MaxRetries = own
		return s
	}
	h := newHarness(t,
		withPolicy("transient", string(policy.Transient), 0),
		withPolicy("unknown", string(policy.Unknown), 0),
		withPolicy("unknown-own-max", string(policy.Unknown), 8),
		withPolicy("transient-own-max", string(policy.Transient), 8),
	)
	code, out := h.do("v", "GET", "/api/retry-queue", "")
	require.Equal(t, 200, code, out)
	got := map[string]float64{}
	for _, it := range out["items"].([]any) {
		m := it.(map[string]any)
		got[m["message_id"].(string)] = m["max_retries"].(float64)
	}
	assert.Equal(t, map[string]float64{"transient": 5, "unknown": 2, "unknown-own-max": 2, "transient-own-max": 8}, got)
}
