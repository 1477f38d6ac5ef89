package ops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A bulk retry job counts the retries it sent; how the retried messages fared is read here,
// from the items, when the API shows the job, so the job's workflow stays as it is. An item
// counts once the job's retry is in its event log (a retry-now event by the job's actor, at
// or after the job's start); the failures reported after that event are the retry's.

const (
	// jobOutcomesEvery is how often one job's unsettled items are read again: the page polls
	// a job every second, and each read is a describe and a query per item.
	jobOutcomesEvery = 2 * time.Second
	// jobOutcomesBudget bounds the reads of one answer; an item not read within it counts as
	// pending.
	jobOutcomesBudget = 5 * time.Second
	// maxOutcomeJobs bounds the jobs whose settled items the API remembers.
	maxOutcomeJobs = 64
)

// jobOutcomes is what the API remembers of one job's items: the ids it acts on, the settled
// outcomes (they do not change), and the latest counts.
type jobOutcomes struct {
	mu      sync.Mutex
	ids     []string
	settled map[string]RetryOutcome
	counts  jobs.OutcomeCounts
	at      time.Time
}

// outcomeCache holds the jobOutcomes of recently shown jobs.
type outcomeCache struct {
	mu   sync.Mutex
	jobs map[string]*jobOutcomes
}

// entry is job id's jobOutcomes, new if none; the oldest is forgotten beyond maxOutcomeJobs.
func (c *outcomeCache) entry(id string) *jobOutcomes {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]*jobOutcomes{}
	}
	if e, ok := c.jobs[id]; ok {
		return e
	}
	if len(c.jobs) >= maxOutcomeJobs {
		forgetOldest(c.jobs, func(e *jobOutcomes) time.Time { return e.at })
	}
	e := &jobOutcomes{settled: map[string]RetryOutcome{}}
	c.jobs[id] = e
	return e
}

// jobOutcomes counts the outcomes of the retries bulk retry job sent so far. It reads the
// unsettled items at most every jobOutcomesEvery; between reads it answers the last counts.
func (a *API) jobOutcomes(ctx context.Context, job jobs.Progress) (jobs.OutcomeCounts, error) {
	e := a.outcomes.entry(job.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if !e.at.IsZero() && now.Sub(e.at) < jobOutcomesEvery {
		return e.counts, nil
	}
	if e.ids == nil {
		ids, err := a.jobIDs(ctx, job.ID)
		if err != nil {
			return jobs.OutcomeCounts{}, err
		}
		e.ids = ids
	}
	ctx, cancel := context.WithTimeout(ctx, jobOutcomesBudget)
	defer cancel()
	var c jobs.OutcomeCounts
	var open []string
	for _, id := range e.ids {
		if out, ok := e.settled[id]; ok {
			tally(&c, out)
		} else {
			open = append(open, id)
		}
	}
	var mu sync.Mutex
	readEach(ctx, len(open), enrichTimeout, func(ictx context.Context, i int) {
		id := open[i]
		out, sent := a.judgeJobItem(ictx, id, job.Actor, job.StartedAt)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !sent:
		case tally(&c, out):
			e.settled[id] = out
		default:
			c.Pending++
		}
	})
	e.counts, e.at = c, now
	return c, nil
}

// jobIDs reads the ids a job acts on from its run's input (each run of a job carries them).
func (a *API) jobIDs(ctx context.Context, id string) ([]string, error) {
	it := a.cfg.Client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return nil, errors.New("job " + id + " has no history")
	}
	ev, err := it.Next()
	if err != nil {
		return nil, fmt.Errorf("first event of job %s: %w", id, err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return nil, errors.New("job " + id + " does not start with its input")
	}
	var in jobs.Input
	if err := a.cfg.DataConverter.FromPayloads(attrs.GetInput(), &in); err != nil {
		return nil, fmt.Errorf("decode the input of job %s: %w", id, err)
	}
	return in.IDs, nil
}

// judgeJobItem reads how item id fared after the retry actor sent it at or after since:
// sent is false when no such retry is in its event log (refused, or not sent yet). An item
// that cannot be read is pending.
func (a *API) judgeJobItem(ctx context.Context, id, actor string, since time.Time) (out RetryOutcome, sent bool) {
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return RetryOutcome{Result: ResultPending}, true
	}
	st, err := a.state(ctx, id, nil)
	if err != nil {
		return RetryOutcome{Result: ResultPending}, true
	}
	at, ok := retrySentAt(st, actor, since)
	if !ok {
		return RetryOutcome{}, false
	}
	out = RetryOutcome{Result: ResultPending, Status: st.Status}
	for _, f := range st.Attempts {
		if f.Timestamp.After(at) {
			out.Result, out.Error, out.Category = ResultFailedAgain, f.Error, f.Category
		}
	}
	switch {
	case st.Status == workflows.StatusDead:
		out.Result = ResultDead
	case out.Result == ResultFailedAgain:
	case d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return closedOutcome(d.GetWorkflowExecutionInfo()), true
	case st.Status == workflows.StatusDelivered:
		// Decided: the run is completing.
		out.Result = ResultDelivered
	}
	return out, true
}

// retrySentAt is when the latest retry-now by actor at or after since entered st's event log.
func retrySentAt(st workflows.State, actor string, since time.Time) (time.Time, bool) {
	for i := len(st.Events) - 1; i >= 0; i-- {
		ev := st.Events[i]
		if ev.Kind == workflows.SignalRetryNow && ev.Actor == actor && !ev.At.Before(since) {
			return ev.At, true
		}
	}
	return time.Time{}, false
}
