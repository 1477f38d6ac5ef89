package visibility

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func TestHeldRetries(t *testing.T) {
	assert.Equal(t, `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'tq' AND RetryStatus = 'held' AND OriginalQueue = 'it\'s'`,
		HeldRetries("tq", "it's").String())
	assert.Equal(t, `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND RetryStatus = 'held'`,
		HeldRetries("", "").String(), "every destination, every task queue")
}

func TestBreakerWorkflows(t *testing.T) {
	assert.Equal(t, `WorkflowType = 'BreakerWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs' AND BreakerState IN ('open', 'half-open', 'paused')`,
		BreakerWorkflows(Running, "rs").BreakerModes(HoldingBreakerModes...).String())
	assert.Equal(t, `WorkflowType = 'BreakerWorkflow' AND ExecutionStatus = 'Running'`,
		BreakerWorkflows(Running, "").BreakerModes().String(), "no task queue, no modes: no conditions")
	for _, m := range []workflows.BreakerMode{workflows.BreakerClosed, workflows.BreakerOpen, workflows.BreakerHalfOpen, workflows.BreakerPaused} {
		assert.Equal(t, m.Holds(), slices.Contains(HoldingBreakerModes, m), "HoldingBreakerModes agrees with Holds: %s", m)
	}
}
