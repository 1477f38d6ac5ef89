package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// StartPlan is how a new run for a first report can start: Delay is its first retry's delay,
// waited as the workflow's start delay (so its first workflow task is the republish), and
// SearchAttributes are what that first task would have upserted.
type StartPlan struct {
	Delay            time.Duration
	SearchAttributes temporal.SearchAttributes
}

// PlanStart is the decision a new run will take on report r, the first of workflow id, when
// it is a retry after a delay: the run can then be started with that delay. Only for a report
// that starts the count (retry_count 0): a later one may continue an earlier run's story,
// which the run looks up before it decides. now is the caller's clock.
func PlanStart(id string, r message.FailureReport, now time.Time) (StartPlan, bool) {
	d, ok := firstDelay(id, r, now)
	if !ok {
		return StartPlan{}, false
	}
	sa := temporal.NewSearchAttributes(searchAttributeUpdates(&State{
		Status: StatusScheduled, Message: r.Message, Policy: r.Policy, TenantID: r.Message.TenantID,
		Category: string(d.Category), NextRetryAt: now.Add(d.Delay),
	})...)
	return StartPlan{Delay: d.Delay, SearchAttributes: sa}, true
}

// firstDelay is the first decision of a new run on report r, and whether it is a retry after
// a delay.
func firstDelay(id string, r message.FailureReport, now time.Time) (policy.Decision, bool) {
	if r.RetryCount != 0 || r.Poison != nil {
		return policy.Decision{}, false
	}
	s := State{WorkflowID: id, Policy: r.Policy, MaxRetries: r.MaxRetries, FirstFailureAt: now}
	d := decide(&s, r, now, currentRules)
	return d, d.Retry && d.Delay > 0
}
