package ops

import (
	"context"
	"net/url"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"golang.org/x/sync/errgroup"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// An operator's retry republishes a message; whether that worked is known only later: the
// message counts as delivered when its quiet window passes without a new failure report (its
// run completes as delivered), and as failed again when a report comes first. With ?wait the
// API reads the retried items from the ops side until each settles or the wait runs out, so
// the workflow itself does not change.

// Results of a retry, as the API names them.
const (
	ResultDelivered   = "delivered"
	ResultFailedAgain = "failed_again"
	ResultDead        = "dead"
	ResultClosed      = "closed"
	ResultPending     = "pending"
)

// maxOutcomeWait bounds ?wait on a retry: the call stays open while it waits.
const maxOutcomeWait = 60 * time.Second

// RetryOutcome is how a retried message fared: Result is delivered, failed_again (a new
// failure report; Error and Category are its), dead (it went to dead, with the failure that
// sent it there, if any), closed (its run ended otherwise: Status says how) or pending (the
// wait ran out first).
type RetryOutcome struct {
	Result   string           `json:"result"`
	Status   workflows.Status `json:"status,omitempty"`
	Error    string           `json:"error,omitempty"`
	Category string           `json:"category,omitempty"`
}

// retryMark is a retried item as read around its retry: an attempt beyond Attempts is a new
// failure. Sequence and Resets are from before the retry when it was signalled (the retry has
// been applied once either grows); applied says the mark was read after it (an update).
type retryMark struct {
	id       string
	attempts int
	sequence int
	resets   int
	applied  bool
}

// markAfter is the mark of an item whose retry the state st was read after.
func markAfter(id string, st workflows.State) retryMark {
	return retryMark{id: id, attempts: len(st.Attempts), sequence: st.Sequence, resets: st.Resets, applied: true}
}

// markBefore is the mark of an item read before its retry was signalled.
func markBefore(id string, st workflows.State) retryMark {
	m := markAfter(id, st)
	m.applied = false
	return m
}

// parseOutcomeWait reads a retry's ?wait: absent or 0 is no wait.
func parseOutcomeWait(q url.Values) (time.Duration, error) {
	v := q.Get(paramWait)
	if v == "" {
		return 0, nil
	}
	d, err := config.ParseDuration(v)
	if err != nil || d < 0 || d > maxOutcomeWait {
		return 0, badf("wait %q is not a duration from 0 to %s (e.g. 10s)", v, maxOutcomeWait)
	}
	return d, nil
}

// judgeRetry reads m's item once: its outcome, and its state when it could be read (nil for a
// closed run: reading it would make a worker replay the whole run). A read that fails is
// pending: the wait judges it.
func (a *API) judgeRetry(ctx context.Context, m retryMark) (RetryOutcome, *workflows.State) {
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, m.id, "")
	if err != nil {
		return RetryOutcome{Result: ResultPending}, nil
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return closedOutcome(info), nil
	}
	st, err := a.state(ctx, m.id, nil)
	if err != nil {
		return RetryOutcome{Result: ResultPending}, nil
	}
	out := RetryOutcome{Result: ResultPending, Status: st.Status}
	applied := m.applied || st.Sequence > m.sequence || st.Resets > m.resets
	if !applied {
		return out, &st
	}
	if len(st.Attempts) > m.attempts {
		last := st.Attempts[len(st.Attempts)-1]
		out.Result, out.Error, out.Category = ResultFailedAgain, last.Error, last.Category
	}
	if st.Status == workflows.StatusDead {
		out.Result = ResultDead
		if out.Error == "" {
			out.Error = st.DeadReason
		}
	}
	return out, &st
}

// closedOutcome is the outcome of a retried message whose run has closed: delivered, or
// closed otherwise.
func closedOutcome(info *workflowpb.WorkflowExecutionInfo) RetryOutcome {
	s := closedStatus(info)
	if s == workflows.StatusDelivered {
		return RetryOutcome{Result: ResultDelivered, Status: s}
	}
	return RetryOutcome{Result: ResultClosed, Status: s}
}

// closedStatus is a closed run's last status, from its search attribute.
func closedStatus(info *workflowpb.WorkflowExecutionInfo) workflows.Status {
	return workflows.Status(payloadString(info.GetSearchAttributes().GetIndexedFields(), workflows.SAStatus.GetName()))
}

// awaitRetry reads m's item every settleEvery until it settles or wait runs out; the outcome
// is pending then. st is the item's latest state read (it stays st when none could be).
func (a *API) awaitRetry(ctx context.Context, m retryMark, wait time.Duration, st workflows.State) (RetryOutcome, workflows.State) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(a.settleEvery)
	defer tick.Stop()
	for {
		out, now := a.judgeRetry(ctx, m)
		if now != nil {
			st = *now
		}
		if out.Result != ResultPending {
			if out.Status != "" {
				st.Status = out.Status
			}
			return out, st
		}
		select {
		case <-ctx.Done():
			return RetryOutcome{Result: ResultPending, Status: st.Status}, st
		case <-tick.C:
		}
	}
}

// awaitRetries reads the items of marks every settleEvery, a few at a time, until each has
// settled or wait runs out, and counts their outcomes.
func (a *API) awaitRetries(ctx context.Context, marks []retryMark, wait time.Duration) jobs.OutcomeCounts {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(a.settleEvery)
	defer tick.Stop()
	var c jobs.OutcomeCounts
	left := marks
	for len(left) > 0 {
		var mu sync.Mutex
		var still []retryMark
		var g errgroup.Group
		g.SetLimit(bulkParallel)
		for _, m := range left {
			g.Go(func() error {
				rctx, rcancel := context.WithTimeout(ctx, enrichTimeout)
				defer rcancel()
				out, _ := a.judgeRetry(rctx, m)
				mu.Lock()
				defer mu.Unlock()
				if !tally(&c, out) {
					still = append(still, m)
				}
				return nil
			})
		}
		_ = g.Wait()
		left = still
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			c.Pending += len(left)
			return c
		case <-tick.C:
		}
	}
	return c
}

// tally adds a settled outcome to c and says so; a pending one it leaves out.
func tally(c *jobs.OutcomeCounts, out RetryOutcome) bool {
	switch out.Result {
	case ResultDelivered:
		c.Succeeded++
	case ResultFailedAgain:
		c.FailedAgain++
	case ResultDead:
		c.Dead++
	case ResultClosed:
		c.Closed++
	default:
		return false
	}
	return true
}
