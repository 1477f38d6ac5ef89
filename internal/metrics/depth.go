package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Visibility is what the depth poller needs from Temporal; a client.Client has both methods.
type Visibility interface {
	CountWorkflow(ctx context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// DepthConfig configures a DepthPoller.
type DepthConfig struct {
	// Client answers the visibility queries. Required.
	Client Visibility
	// TaskQueue limits the counts to RetryWorkflows of this task queue, so that deployments
	// sharing a namespace count apart. Defaults to "" (every task queue).
	TaskQueue string
	// Interval is the time between two polls. Defaults to DefaultDepthInterval.
	Interval time.Duration
	// Timeout bounds one poll (all its queries). Defaults to DefaultDepthTimeout.
	Timeout time.Duration
	// PageSize is the most dead letters one list call returns while finding the oldest.
	// Defaults to DefaultDepthPageSize.
	PageSize int
	// Logger logs failed polls. Nil discards them (they still count in
	// depth_poll_errors_total).
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Defaults of DepthConfig.
const (
	DefaultDepthInterval = 15 * time.Second
	DefaultDepthTimeout  = 10 * time.Second
	DefaultDepthPageSize = 100
)

func (c DepthConfig) withDefaults() DepthConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultDepthInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultDepthTimeout
	}
	if c.PageSize <= 0 {
		c.PageSize = DefaultDepthPageSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// deadStatuses are the statuses dead_letter_depth counts; retry_queue_depth counts
// visibility.RetryQueueStatuses.
var deadStatuses = []workflows.Status{workflows.StatusDead}

// DepthPoller sets the depth gauges from Temporal visibility counts on an interval. One
// process per deployment is enough (service runs it where the bridge runs); with several,
// each exports the same values, so aggregate the gauges with max, not sum.
type DepthPoller struct {
	cfg DepthConfig
	vis counter

	depth, due, deadDepth, oldestAge, lastSuccess prometheus.Gauge
	errors                                        prometheus.Counter
	breakerState, held                            *prometheus.GaugeVec

	// oldest is the DeadAt of the oldest dead letter at the last poll; zero when none.
	oldest time.Time
	// heldBy is the held count of each destination with a breaker at the last poll.
	heldBy map[string]int64
	// queues bounds the destinations exported: a gauge cannot share a series among queues, so
	// one past the ceiling is left out.
	queues *labels.QueueLimiter
}

// NewDepthPoller registers the gauges on reg and returns the poller; Run it.
func NewDepthPoller(cfg DepthConfig, reg prometheus.Registerer) *DepthPoller {
	cfg = cfg.withDefaults()
	gauge := func(name, help string) prometheus.Gauge {
		return promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
	}
	return &DepthPoller{
		cfg: cfg,
		vis: &temporalVisibility{
			client:      cfg.Client,
			base:        visibility.RetryWorkflows(visibility.Running, cfg.TaskQueue),
			breakerBase: visibility.BreakerWorkflows(visibility.Running, cfg.TaskQueue),
		},
		depth: gauge("retry_queue_depth",
			"Messages waiting for a retry: RetryWorkflows scheduled, republishing or awaiting-outcome, from visibility counts."),
		due: gauge("retry_due",
			"Retries past their NextRetryTime and not republished yet, from visibility counts."),
		deadDepth: gauge("dead_letter_depth",
			"Dead letters parked for an operator (RetryStatus dead), from visibility counts."),
		oldestAge: gauge("dead_letter_oldest_age_seconds",
			"Age of the oldest parked dead letter (now minus its DeadAt); 0 when there is none."),
		lastSuccess: gauge("depth_poll_last_success_timestamp_seconds",
			"Unix time of the last poll whose every query succeeded; the depth gauges are as of then."),
		errors: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "depth_poll_errors_total",
			Help: "Depth polls with a failed visibility query (the gauges keep their last values).",
		})),
		breakerState: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breaker_state",
			Help: "State of each destination's circuit breaker: 1 for its current state (closed, open, half-open, paused), 0 for the others, from visibility.",
		}, []string{"queue", "state"})),
		held: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retries_held",
			Help: "Retries held by their destination's circuit breaker (RetryStatus held), by destination, from visibility counts.",
		}, []string{"queue"})),
		heldBy: map[string]int64{},
		queues: labels.Queues(reg),
	}
}

// Run polls now and then every Interval until ctx is done; it returns nil then. A failed poll
// is logged and counted, never fatal.
func (p *DepthPoller) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("depth poll failed; gauges keep their last values", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Poll runs one round of queries, within Timeout, and sets every gauge whose query
// succeeded. It returns the failures, joined; each failed poll counts once in
// depth_poll_errors_total (unless ctx itself ended).
func (p *DepthPoller) Poll(ctx context.Context) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	now := p.cfg.Now()

	var errs []error
	set := func(g prometheus.Gauge, what string, f filter) (int64, bool) {
		n, err := p.vis.count(ctx, f)
		if err != nil {
			errs = append(errs, fmt.Errorf("count %s: %w", what, err))
			return 0, false
		}
		g.Set(float64(n))
		return n, true
	}
	set(p.depth, "retry queue", filter{statuses: visibility.RetryQueueStatuses})
	set(p.due, "due retries", filter{statuses: []workflows.Status{workflows.StatusScheduled}, nextRetryBy: now})
	if dead, ok := set(p.deadDepth, "dead letters", filter{statuses: deadStatuses}); ok {
		oldest, err := p.oldestDeadAt(ctx, now, dead)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("find the oldest dead letter: %w", err))
		case oldest.IsZero():
			p.oldestAge.Set(0)
		default:
			p.oldestAge.Set(max(now.Sub(oldest), 0).Seconds())
		}
	}
	errs = append(errs, p.pollBreakers(ctx)...)
	if len(errs) > 0 {
		if parent.Err() == nil {
			p.errors.Inc()
		}
		return errors.Join(errs...)
	}
	p.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
	return nil
}

// breakerModes are every state a breaker_state series is exported for.
var breakerModes = append([]workflows.BreakerMode{workflows.BreakerClosed}, visibility.HoldingBreakerModes...)

// pollBreakers sets breaker_state from the list of running breakers, and retries_held by
// counting the held retries of each destination whose breaker holds or that had held ones at
// the last poll (a breaker that closed releases them over a while): one count per such
// destination, none for the closed rest, which hold none. Series of destinations whose
// breaker is gone are removed.
func (p *DepthPoller) pollBreakers(ctx context.Context) []error {
	rows, err := p.vis.breakers(ctx)
	if err != nil {
		return []error{fmt.Errorf("list breakers: %w", err)}
	}
	var errs []error
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		if r.queue == "" || !slices.Contains(breakerModes, r.mode) || seen[r.queue] || !p.queues.Admitted(r.queue) {
			continue
		}
		seen[r.queue] = true
		for _, m := range breakerModes {
			p.breakerState.WithLabelValues(r.queue, string(m)).Set(boolGauge(m == r.mode))
		}
		n := int64(0)
		if r.mode.Holds() || p.heldBy[r.queue] > 0 {
			if n, err = p.vis.count(ctx, filter{statuses: heldStatuses, queue: r.queue}); err != nil {
				errs = append(errs, fmt.Errorf("count held retries of %q: %w", r.queue, err))
				continue // its gauge keeps its last value
			}
		}
		p.heldBy[r.queue] = n
		p.held.WithLabelValues(r.queue).Set(float64(n))
	}
	for q := range p.heldBy {
		if !seen[q] {
			delete(p.heldBy, q)
			p.held.DeleteLabelValues(q)
			p.breakerState.DeletePartialMatch(prometheus.Labels{"queue": q})
		}
	}
	return errs
}

// heldStatuses are the statuses retries_held counts.
var heldStatuses = []workflows.Status{workflows.StatusHeld}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Bounds of the search for the oldest dead letter.
const (
	// searchFirstStep is how far before now the search first looks; each step back doubles,
	// up to searchMaxStep (a century: older DeadAts are not real).
	searchFirstStep = time.Minute
	searchMaxStep   = 100 * 365 * 24 * time.Hour
	// searchSkew is how far past now the search's first upper bound lies, so that a DeadAt
	// set by a worker whose clock runs ahead is still below it.
	searchSkew = time.Minute
	// searchMaxCounts bounds the counts of one search: doubling then bisecting to the
	// millisecond over a century takes well under a hundred.
	searchMaxCounts = 100
	// visibilityPrecision is the finest time difference visibility stores.
	visibilityPrecision = time.Millisecond
)

// oldestDeadAt finds the smallest DeadAt among the dead letters. Temporal's SQL visibility
// (the dev server's SQLite, PostgreSQL, MySQL) refuses ORDER BY ("operation is not
// supported: 'order by' clause"), so it cannot be one sorted list call. Instead: while more
// than PageSize dead letters have DeadAt <= hi, move hi back (doubling steps, then
// bisection) using counts; then list those few and take the smallest. The answer is
// remembered: new dead letters are always newer, so the next poll only checks with two
// counts that it is still there and still the oldest.
func (p *DepthPoller) oldestDeadAt(ctx context.Context, now time.Time, dead int64) (time.Time, error) {
	if dead == 0 {
		p.oldest = time.Time{}
		return time.Time{}, nil
	}
	deadBy := func(t time.Time) (int64, error) {
		return p.vis.count(ctx, filter{statuses: deadStatuses, deadBy: t})
	}
	if !p.oldest.IsZero() {
		before, err := deadBy(p.oldest.Add(-visibilityPrecision))
		if err != nil {
			return time.Time{}, err
		}
		if before == 0 {
			at, err := deadBy(p.oldest.Add(visibilityPrecision))
			if err != nil {
				return time.Time{}, err
			}
			if at > 0 {
				return p.oldest, nil
			}
		}
	}

	// Invariant: count(DeadAt <= hi) = n > 0 (hi zero: no bound); count(DeadAt <= lo) = 0
	// (lo zero: not known yet).
	var lo, hi time.Time
	n := dead
	step := searchFirstStep
	for i := 0; n > int64(p.cfg.PageSize) && i < searchMaxCounts; i++ {
		upper := hi
		if upper.IsZero() {
			upper = now.Add(searchSkew)
		}
		var mid time.Time
		if lo.IsZero() {
			mid = upper.Add(-step)
			if step < searchMaxStep {
				step *= 2
			}
		} else {
			if upper.Sub(lo) <= visibilityPrecision {
				break // more than PageSize dead within one millisecond: any of them will do
			}
			mid = lo.Add(upper.Sub(lo) / 2)
		}
		c, err := deadBy(mid)
		if err != nil {
			return time.Time{}, err
		}
		if c == 0 {
			lo = mid
		} else {
			hi, n = mid, c
		}
	}
	ats, err := p.vis.deadAts(ctx, filter{statuses: deadStatuses, deadBy: hi}, p.cfg.PageSize)
	if err != nil {
		return time.Time{}, err
	}
	var oldest time.Time
	for _, t := range ats {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	p.oldest = oldest
	return oldest, nil
}

// filter selects RetryWorkflows; zero fields select everything.
type filter struct {
	statuses []workflows.Status
	// queue selects one OriginalQueue.
	queue string
	// nextRetryBy selects NextRetryTime <= it; deadBy selects DeadAt <= it (both to the
	// millisecond, the precision visibility stores).
	nextRetryBy, deadBy time.Time
}

// breakerRow is one running breaker: its destination and state.
type breakerRow struct {
	queue string
	mode  workflows.BreakerMode
}

// counter is the poller's view of Temporal: counts and DeadAt values by filter, and the
// running breakers.
type counter interface {
	count(ctx context.Context, f filter) (int64, error)
	deadAts(ctx context.Context, f filter, limit int) ([]time.Time, error)
	breakers(ctx context.Context) ([]breakerRow, error)
}

// temporalVisibility renders filters as visibility queries.
type temporalVisibility struct {
	client Visibility
	// base selects the running RetryWorkflows of the task queue: a terminated workflow keeps
	// the RetryStatus it had, so only running ones count.
	base visibility.Query
	// breakerBase selects the running BreakerWorkflows of the task queue.
	breakerBase visibility.Query
}

// query is f within base. Both time bounds are "at or before, to the millisecond".
func (f filter) query(base visibility.Query) string {
	return base.Statuses(f.statuses...).
		Equal(workflows.SAOriginalQueue, f.queue).
		AtOrBeforeMilli(workflows.SANextRetryTime, f.nextRetryBy).
		AtOrBeforeMilli(workflows.SADeadAt, f.deadBy).
		String()
}

func (v *temporalVisibility) count(ctx context.Context, f filter) (int64, error) {
	q := f.query(v.base)
	resp, err := v.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	return resp.GetCount(), nil
}

func (v *temporalVisibility) deadAts(ctx context.Context, f filter, limit int) ([]time.Time, error) {
	q := f.query(v.base)
	resp, err := v.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	dc := converter.GetDefaultDataConverter()
	out := make([]time.Time, 0, len(resp.GetExecutions()))
	for _, e := range resp.GetExecutions() {
		p, ok := e.GetSearchAttributes().GetIndexedFields()[workflows.SADeadAt.GetName()]
		if !ok {
			continue
		}
		var t time.Time
		if err := dc.FromPayload(p, &t); err != nil {
			return nil, fmt.Errorf("decode %s of %s: %w", workflows.SADeadAt.GetName(), e.GetExecution().GetWorkflowId(), err)
		}
		out = append(out, t)
	}
	return out, nil
}

// breakerPageSize is the most breakers one list call returns; listBreakerPages bounds the
// pages of one poll.
const (
	breakerPageSize  = 1000
	listBreakerPages = 100
)

func (v *temporalVisibility) breakers(ctx context.Context) ([]breakerRow, error) {
	q := v.breakerBase.String()
	var rows []breakerRow
	var token []byte
	for range listBreakerPages {
		resp, err := v.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: breakerPageSize, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		for _, e := range resp.GetExecutions() {
			rows = append(rows, breakerRow{
				queue: keyword(e, workflows.SAOriginalQueue),
				mode:  workflows.BreakerMode(keyword(e, workflows.SABreakerState)),
			})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return rows, nil
		}
	}
	return nil, fmt.Errorf("%s: more than %d pages", q, listBreakerPages)
}

// keyword is a Keyword search attribute of e; "" when unset or unreadable.
func keyword(e *workflowpb.WorkflowExecutionInfo, key temporal.SearchAttributeKeyKeyword) string {
	var v string
	if p, ok := e.GetSearchAttributes().GetIndexedFields()[key.GetName()]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
	}
	return v
}
