package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// entry is one RetryWorkflow as the fake visibility store holds it.
type entry struct {
	status         workflows.Status
	queue          string
	next, deadAt   time.Time
	closed         bool
	otherTaskQueue bool
}

// fakeVis answers filters over entries with the store's millisecond precision.
type fakeVis struct {
	mu          sync.Mutex
	entries     []entry
	breakerRows []breakerRow
	err         error
	counts      int
	lists       int
}

func (f *fakeVis) match(e entry, flt filter) bool {
	ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond) }
	if e.closed || e.otherTaskQueue {
		return false
	}
	if len(flt.statuses) > 0 && !slices.Contains(flt.statuses, e.status) {
		return false
	}
	if flt.queue != "" && e.queue != flt.queue {
		return false
	}
	if !flt.nextRetryBy.IsZero() && (e.next.IsZero() || ms(e.next).After(ms(flt.nextRetryBy))) {
		return false
	}
	if !flt.deadBy.IsZero() && (e.deadAt.IsZero() || ms(e.deadAt).After(ms(flt.deadBy))) {
		return false
	}
	return true
}

func (f *fakeVis) count(_ context.Context, flt filter) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts++
	if f.err != nil {
		return 0, f.err
	}
	var n int64
	for _, e := range f.entries {
		if f.match(e, flt) {
			n++
		}
	}
	return n, nil
}

func (f *fakeVis) deadAts(_ context.Context, flt filter, limit int) ([]time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.err != nil {
		return nil, f.err
	}
	var out []time.Time
	for _, e := range f.entries {
		if f.match(e, flt) && len(out) < limit {
			out = append(out, e.deadAt)
		}
	}
	return out, nil
}

func (f *fakeVis) breakers(context.Context) ([]breakerRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.breakerRows), nil
}

func (f *fakeVis) calls() (counts, lists int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, l := f.counts, f.lists
	f.counts, f.lists = 0, 0
	return c, l
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestPoller(t *testing.T, vis counter, pageSize int) (*DepthPoller, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := NewDepthPoller(DepthConfig{
		PageSize: pageSize,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:      func() time.Time { return t0 },
	}, reg)
	p.vis = vis
	return p, reg
}

func gauges(t *testing.T, p *DepthPoller) map[string]float64 {
	t.Helper()
	return map[string]float64{
		"depth":  value(t, p.depth),
		"due":    value(t, p.due),
		"dead":   value(t, p.deadDepth),
		"oldest": value(t, p.oldestAge),
		"errors": value(t, p.errors),
	}
}

func TestPollSetsGauges(t *testing.T) {
	vis := &fakeVis{entries: []entry{
		{status: workflows.StatusScheduled, next: t0.Add(-time.Second)},        // due
		{status: workflows.StatusScheduled, next: t0},                          // due (<= now)
		{status: workflows.StatusScheduled, next: t0.Add(time.Minute)},         // not yet
		{status: workflows.StatusRepublishing, next: t0.Add(-2 * time.Second)}, // live, not scheduled
		{status: workflows.StatusAwaitingOutcome},
		{status: workflows.StatusScheduled, next: t0.Add(-time.Hour), closed: true},         // terminated: not counted
		{status: workflows.StatusScheduled, next: t0.Add(-time.Hour), otherTaskQueue: true}, // not ours
		{status: workflows.StatusDelivered},
		{status: workflows.StatusDead, deadAt: t0.Add(-49 * time.Hour)},
		{status: workflows.StatusDead, deadAt: t0.Add(-time.Minute)},
	}}
	p, reg := newTestPoller(t, vis, 100)
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, map[string]float64{"depth": 5, "due": 2, "dead": 2, "oldest": (49 * time.Hour).Seconds(), "errors": 0}, gauges(t, p))
	assert.Equal(t, float64(t0.Unix()), value(t, p.lastSuccess))

	var names []string
	for n := range families(t, reg) {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{"retry_queue_depth", "retry_due", "dead_letter_depth", "dead_letter_oldest_age_seconds",
		"depth_poll_last_success_timestamp_seconds", "depth_poll_errors_total", labels.OverflowMetric}, names)
}

func TestPollWithNoDeadLetters(t *testing.T) {
	p, _ := newTestPoller(t, &fakeVis{}, 100)
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, map[string]float64{"depth": 0, "due": 0, "dead": 0, "oldest": 0, "errors": 0}, gauges(t, p))
}

func TestPollErrorIsCountedAndKeepsGauges(t *testing.T) {
	vis := &fakeVis{entries: []entry{{status: workflows.StatusAwaitingOutcome}, {status: workflows.StatusDead, deadAt: t0.Add(-time.Hour)}}}
	p, _ := newTestPoller(t, vis, 100)
	require.NoError(t, p.Poll(context.Background()))
	last := value(t, p.lastSuccess)

	vis.err = errors.New("visibility unavailable")
	err := p.Poll(context.Background())
	require.ErrorContains(t, err, "visibility unavailable")
	assert.Equal(t, map[string]float64{"depth": 1, "due": 0, "dead": 1, "oldest": 3600, "errors": 1}, gauges(t, p))
	assert.Equal(t, last, value(t, p.lastSuccess))

	// A poll cut short by shutdown is not an error to count.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, p.Poll(ctx))
	assert.Equal(t, 1.0, value(t, p.errors))
}

func TestRunPollsUntilCancelled(t *testing.T) {
	vis := &fakeVis{entries: []entry{{status: workflows.StatusScheduled, next: t0.Add(time.Hour)}}}
	p, _ := newTestPoller(t, vis, 100)
	p.cfg.Interval = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	require.Eventually(t, func() bool {
		vis.mu.Lock()
		defer vis.mu.Unlock()
		return vis.counts >= 9 // three polls
	}, 5*time.Second, time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.Equal(t, 1.0, value(t, p.depth))
}

// With more dead letters than a list page, the oldest is found by counting, then kept.
func TestOldestDeadLetterSearch(t *testing.T) {
	vis := &fakeVis{}
	oldest := t0.Add(-60*time.Hour - 1234567*time.Microsecond)
	for i := range 500 {
		vis.entries = append(vis.entries, entry{status: workflows.StatusDead, deadAt: t0.Add(-time.Duration(i) * 7 * time.Minute)})
	}
	vis.entries = append(vis.entries, entry{status: workflows.StatusDead, deadAt: oldest})
	slices.Reverse(vis.entries) // the oldest first in "storage", not that it matters
	p, _ := newTestPoller(t, vis, 10)

	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, t0.Sub(oldest).Seconds(), value(t, p.oldestAge))
	counts, lists := vis.calls()
	assert.Equal(t, 1, lists)
	assert.Less(t, counts, 40, "a search of a few dozen counts")

	// Unchanged: two counts to confirm, no list.
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, t0.Sub(oldest).Seconds(), value(t, p.oldestAge))
	counts, lists = vis.calls()
	assert.Equal(t, 3+2, counts)
	assert.Equal(t, 0, lists)

	// The oldest is resolved: the next oldest (499 × 7 min) is found.
	vis.entries = vis.entries[1:]
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, (499 * 7 * time.Minute).Seconds(), value(t, p.oldestAge))

	// A dead letter with an older DeadAt shows up late in visibility: found too.
	older := t0.Add(-72 * time.Hour)
	vis.entries = append(vis.entries, entry{status: workflows.StatusDead, deadAt: older})
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, (72 * time.Hour).Seconds(), value(t, p.oldestAge))

	// All gone.
	vis.entries = nil
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, 0.0, value(t, p.oldestAge))
}

// Many dead letters within one millisecond: the search stops at the millisecond.
func TestOldestDeadLetterSearchSameMillisecond(t *testing.T) {
	vis := &fakeVis{}
	at := t0.Add(-3 * time.Hour)
	for range 50 {
		vis.entries = append(vis.entries, entry{status: workflows.StatusDead, deadAt: at})
	}
	vis.entries = append(vis.entries, entry{status: workflows.StatusDead, deadAt: t0.Add(-time.Second)})
	p, _ := newTestPoller(t, vis, 10)
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, (3 * time.Hour).Seconds(), value(t, p.oldestAge))
}

func TestQueries(t *testing.T) {
	base := visibility.RetryWorkflows(visibility.Running, "rs-prod")
	b := `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs-prod'`
	now := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.FixedZone("CET", 3600))
	assert.Equal(t, b+` AND RetryStatus IN ('scheduled', 'held', 'republishing', 'awaiting-outcome')`,
		filter{statuses: visibility.RetryQueueStatuses}.query(base))
	assert.Equal(t, b+` AND RetryStatus = 'held' AND OriginalQueue = 'it\'s'`,
		filter{statuses: heldStatuses, queue: "it's"}.query(base))
	assert.Equal(t, b+` AND RetryStatus = 'scheduled' AND NextRetryTime <= '2026-03-01T11:00:00.5005Z'`,
		filter{statuses: []workflows.Status{workflows.StatusScheduled}, nextRetryBy: now}.query(base))
	assert.Equal(t, b+` AND RetryStatus = 'dead' AND DeadAt <= '2026-03-01T11:00:00.0005Z'`,
		filter{statuses: deadStatuses, deadBy: now.Add(-499999 * time.Microsecond)}.query(base))
}

// fakeClient records the requests and answers with canned executions.
type fakeClient struct {
	queries []string
	pages   []int32
	execs   []*workflowpb.WorkflowExecutionInfo
}

func (c *fakeClient) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	c.queries = append(c.queries, req.GetQuery())
	return &workflowservice.CountWorkflowExecutionsResponse{Count: 7}, nil
}

func (c *fakeClient) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	c.queries = append(c.queries, req.GetQuery())
	c.pages = append(c.pages, req.GetPageSize())
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: c.execs}, nil
}

func TestTemporalVisibility(t *testing.T) {
	deadAt := time.Date(2026, 2, 27, 11, 0, 0, 123456789, time.UTC)
	p, err := converter.GetDefaultDataConverter().ToPayload(deadAt)
	require.NoError(t, err)
	fc := &fakeClient{execs: []*workflowpb.WorkflowExecutionInfo{
		{SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{"DeadAt": p}}},
		{SearchAttributes: &commonpb.SearchAttributes{}}, // DeadAt unset in the meantime
	}}
	v := &temporalVisibility{client: fc, base: visibility.RetryWorkflows(visibility.Running, "")}
	n, err := v.count(context.Background(), filter{statuses: deadStatuses})
	require.NoError(t, err)
	assert.EqualValues(t, 7, n)
	ats, err := v.deadAts(context.Background(), filter{statuses: deadStatuses}, 25)
	require.NoError(t, err)
	require.Len(t, ats, 1)
	assert.True(t, deadAt.Equal(ats[0]), "got %s", ats[0])
	assert.Equal(t, []int32{25}, fc.pages)
	assert.Equal(t, []string{
		`WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND RetryStatus = 'dead'`,
		`WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND RetryStatus = 'dead'`,
	}, fc.queries)
}

// The poller never logs through the process-wide default logger: a nil Logger discards.
func TestNilLoggerDiscards(t *testing.T) {
	p := NewDepthPoller(DepthConfig{Client: &fakeClient{}}, prometheus.NewRegistry())
	require.NotNil(t, p.cfg.Logger)
	assert.NotSame(t, slog.Default(), p.cfg.Logger)
	assert.False(t, p.cfg.Logger.Enabled(context.Background(), slog.LevelError))
}

// breakerGauges is every breaker_state and retries_held series, as "name{labels}" → value.
func breakerGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	fams := families(t, reg)
	for _, name := range []string{"breaker_state", "retries_held"} {
		for _, m := range fams[name].GetMetric() {
			key := name + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			out[key+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

// breaker_state has one series per state of each destination's breaker, 1 for its current
// one; retries_held counts held retries where a breaker holds, or held some at the last
// poll; a destination whose breaker is gone loses its series.
func TestPollBreakerGauges(t *testing.T) {
	held := func(q string) entry { return entry{status: workflows.StatusHeld, queue: q} }
	vis := &fakeVis{
		entries: []entry{held("orders"), held("orders"), held("payments"), {status: workflows.StatusScheduled, queue: "orders"},
			{status: workflows.StatusHeld, queue: "orders", closed: true}},
		breakerRows: []breakerRow{
			{queue: "orders", mode: workflows.BreakerOpen},
			{queue: "payments", mode: workflows.BreakerPaused},
			{queue: "audit", mode: workflows.BreakerClosed},
			{queue: "", mode: workflows.BreakerOpen},       // no queue yet: skipped
			{queue: "odd", mode: "sideways"},               // not a state: skipped
			{queue: "orders", mode: workflows.BreakerOpen}, // listed twice by paging
		},
	}
	p, reg := newTestPoller(t, vis, 100)
	require.NoError(t, p.Poll(context.Background()))
	counts, _ := vis.calls()
	assert.Equal(t, 3+2, counts, "the three depth counts (no dead letters), and one held count per breaker that holds")
	assert.Equal(t, map[string]float64{
		"breaker_state{queue=audit,state=closed}":       1,
		"breaker_state{queue=audit,state=half-open}":    0,
		"breaker_state{queue=audit,state=open}":         0,
		"breaker_state{queue=audit,state=paused}":       0,
		"breaker_state{queue=orders,state=closed}":      0,
		"breaker_state{queue=orders,state=half-open}":   0,
		"breaker_state{queue=orders,state=open}":        1,
		"breaker_state{queue=orders,state=paused}":      0,
		"breaker_state{queue=payments,state=closed}":    0,
		"breaker_state{queue=payments,state=half-open}": 0,
		"breaker_state{queue=payments,state=open}":      0,
		"breaker_state{queue=payments,state=paused}":    1,
		"retries_held{queue=audit}":                     0,
		"retries_held{queue=orders}":                    2,
		"retries_held{queue=payments}":                  1,
	}, breakerGauges(t, reg))
	assert.Equal(t, 4.0, value(t, p.depth), "held retries are in the retry queue")

	// orders closes and releases one; payments' breaker is gone.
	vis.entries = vis.entries[1:]
	vis.breakerRows = []breakerRow{{queue: "orders", mode: workflows.BreakerClosed}, {queue: "audit", mode: workflows.BreakerClosed}}
	require.NoError(t, p.Poll(context.Background()))
	g := breakerGauges(t, reg)
	assert.Equal(t, 1.0, g["retries_held{queue=orders}"], "closed, still releasing: counted")
	assert.Equal(t, 1.0, g["breaker_state{queue=orders,state=closed}"])
	assert.Equal(t, 0.0, g["breaker_state{queue=orders,state=open}"])
	assert.NotContains(t, g, "retries_held{queue=payments}")
	assert.NotContains(t, g, "breaker_state{queue=payments,state=paused}")
	assert.Len(t, g, 2*4+2)

	// Released: counted once more at 0, then no more counts for a closed breaker.
	vis.entries = vis.entries[1:]
	require.NoError(t, p.Poll(context.Background()))
	assert.Equal(t, 0.0, breakerGauges(t, reg)["retries_held{queue=orders}"])
	vis.calls()
	require.NoError(t, p.Poll(context.Background()))
	counts, _ = vis.calls()
	assert.Equal(t, 3, counts, "closed breakers holding none: no held counts")
}

// A failed list of breakers fails the poll and keeps the breaker gauges.
func TestPollBreakerListFails(t *testing.T) {
	vis := &fakeVis{breakerRows: []breakerRow{{queue: "orders", mode: workflows.BreakerOpen}}, entries: []entry{{status: workflows.StatusHeld, queue: "orders"}}}
	p, reg := newTestPoller(t, vis, 100)
	require.NoError(t, p.Poll(context.Background()))
	before := breakerGauges(t, reg)
	vis.err = errors.New("visibility unavailable")
	require.ErrorContains(t, p.Poll(context.Background()), "list breakers")
	assert.Equal(t, before, breakerGauges(t, reg))
	assert.Equal(t, 1.0, value(t, p.errors))
}

func TestTemporalVisibilityBreakers(t *testing.T) {
	kw := func(v string) *commonpb.Payload {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		return p
	}
	fc := &fakeClient{execs: []*workflowpb.WorkflowExecutionInfo{
		{SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			"OriginalQueue": kw("orders"), "BreakerState": kw("half-open"),
		}}},
		{SearchAttributes: &commonpb.SearchAttributes{}},
	}}
	v := &temporalVisibility{client: fc, breakerBase: visibility.BreakerWorkflows(visibility.Running, "rs")}
	rows, err := v.breakers(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []breakerRow{{queue: "orders", mode: workflows.BreakerHalfOpen}, {}}, rows)
	assert.Equal(t, []string{`WorkflowType = 'BreakerWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'rs'`}, fc.queries)
}
