package visibility

import "github.com/retry-scheduler/retry-scheduler/workflows"

// HeldRetries selects the running RetryWorkflows of one task queue held by the breaker of
// queue (every destination's when queue is empty).
func HeldRetries(taskQueue, queue string) Query {
	return RetryWorkflows(Running, taskQueue).Statuses(workflows.StatusHeld).Equal(workflows.SAOriginalQueue, queue)
}

// BreakerWorkflows selects destinations' BreakerWorkflows in one execution status, of one
// task queue when taskQueue is set.
func BreakerWorkflows(executionStatus, taskQueue string) Query {
	return Query{}.
		Equal(WorkflowType, workflows.BreakerWorkflowName).
		Equal(ExecutionStatus, executionStatus).
		Equal(TaskQueue, taskQueue)
}

// HoldingBreakerModes are the breaker states that hold a destination's retries (see
// workflows.BreakerMode.Holds); the processes' gates list the breakers in them.
var HoldingBreakerModes = []workflows.BreakerMode{workflows.BreakerOpen, workflows.BreakerHalfOpen, workflows.BreakerPaused}

// BreakerModes adds BreakerState IN (ms…): any of them.
func (q Query) BreakerModes(ms ...workflows.BreakerMode) Query {
	vs := make([]string, len(ms))
	for i, m := range ms {
		vs[i] = string(m)
	}
	return q.In(workflows.SABreakerState, vs...)
}
