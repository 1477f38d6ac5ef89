package visibility

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func TestRetryWorkflows(t *testing.T) {
	assert.Equal(t, `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs-prod'`,
		RetryWorkflows(Running, "rs-prod").String())
	assert.Equal(t, `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Completed'`,
		RetryWorkflows(Completed, "").String(), "no task queue: every task queue")
	assert.Equal(t, `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'it\'s \\ odd'`,
		RetryWorkflows(Running, `it's \ odd`).String())
	assert.Equal(t, `WorkflowId = 'retry/orders/it\'s' AND ExecutionStatus != 'Running'`,
		RunsOf("retry/orders/it's").NotEqual(ExecutionStatus, Running).String())
	assert.Equal(t, "", Query{}.String(), "the zero query: every execution")
}

func TestConditions(t *testing.T) {
	base := RetryWorkflows(Running, "tq")
	b := base.String()
	assert.Equal(t, b+` AND RetryStatus IN ('scheduled', 'held', 'republishing', 'awaiting-outcome')`,
		base.Statuses(RetryQueueStatuses...).String())
	assert.Equal(t, b+` AND RetryStatus = 'dead'`, base.Statuses(workflows.StatusDead).String(), "one status: =")
	assert.Equal(t, b, base.Statuses().Equal(workflows.SATenant, "").In(workflows.SAEventType).
		AtOrAfter(CloseTime, time.Time{}).Before(workflows.SADeadAt, time.Time{}).AtOrBeforeMilli(workflows.SADeadAt, time.Time{}).
		NotEqual(ExecutionStatus, "").String(), "zero values add nothing")

	cet := time.FixedZone("CET", 3600)
	assert.Equal(t, b+` AND OriginalQueue = 'orders' AND TenantId = 'acme' AND DeadAt >= '2025-12-31T23:00:00Z' AND DeadAt < '2026-01-02T00:00:00.25Z'`,
		base.Equal(workflows.SAOriginalQueue, "orders").Equal(workflows.SATenant, "acme").
			AtOrAfter(workflows.SADeadAt, time.Date(2026, 1, 1, 0, 0, 0, 0, cet)).
			Before(workflows.SADeadAt, time.Date(2026, 1, 2, 0, 0, 0, 250_000_000, time.UTC)).String())
	assert.Equal(t, b+` AND EventType IN ('a', 'b\'c')`, base.In(workflows.SAEventType, "a", "b'c").String())
	assert.Equal(t, b+` AND ConsumerService = 'billing' AND ErrorType = 'IOError' AND DeadLetterIds = 'retry/orders/m\'1#0'`,
		base.Equal(workflows.SAConsumerService, "billing").Equal(workflows.SAErrorType, "IOError").
			Equal(workflows.SADeadLetterIDs, "retry/orders/m'1#0").String(), "a keyword list matches when it holds the value")

	// <= a millisecond: half a millisecond past it (see milliBound).
	now := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, cet)
	assert.Equal(t, b+` AND NextRetryTime <= '2026-03-01T11:00:00.5005Z'`, base.AtOrBeforeMilli(workflows.SANextRetryTime, now).String())
	assert.Equal(t, b+` AND DeadAt <= '2026-03-01T11:00:00.0005Z'`,
		base.AtOrBeforeMilli(workflows.SADeadAt, now.Add(-499999*time.Microsecond)).String())
}

// A Query is a value: adding to one never changes another built from the same base.
func TestQueriesDoNotShareConditions(t *testing.T) {
	base := RetryWorkflows(Running, "tq")
	dead := base.Statuses(workflows.StatusDead)
	live := base.Statuses(RetryQueueStatuses...)
	_ = dead.Equal(workflows.SATenant, "acme")
	assert.Equal(t, base.String()+` AND RetryStatus = 'dead'`, dead.String())
	assert.NotContains(t, live.String(), "dead")
	assert.NotContains(t, base.String(), "RetryStatus")
}

func TestInRetryQueue(t *testing.T) {
	for _, s := range []workflows.Status{workflows.StatusScheduled, workflows.StatusHeld, workflows.StatusRepublishing, workflows.StatusAwaitingOutcome} {
		assert.True(t, InRetryQueue(s), s)
	}
	for _, s := range []workflows.Status{workflows.StatusDead, workflows.StatusDelivered, workflows.StatusResolved, workflows.StatusDiscarded, workflows.StatusExpired, "nonsense"} {
		assert.False(t, InRetryQueue(s), s)
	}
}
