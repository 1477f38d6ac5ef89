package breaker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"golang.org/x/sync/errgroup"

	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// GateClient lists workflows by a visibility query and describes one; a client.Client is one.
type GateClient interface {
	Lister
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// GateConfig configures a Gate.
type GateConfig struct {
	// Client answers the visibility query and the describes. Required.
	Client GateClient
	// TaskQueue selects the breakers of this service (deployments may share a namespace).
	TaskQueue string
	// Interval is the time between two refreshes. Defaults to DefaultRefresh.
	Interval time.Duration
	// Timeout bounds one refresh. Defaults to DefaultRefreshTimeout.
	Timeout time.Duration
	// Logger logs failed refreshes. Nil discards them.
	Logger *slog.Logger
}

// DefaultRefreshTimeout bounds one refresh of a Gate.
const DefaultRefreshTimeout = 5 * time.Second

// Watched destinations: a destination a retry asked about within watchFor has its breaker
// described on every refresh, at most maxDescribed of them (the latest asked) and
// describeConcurrency at a time.
const (
	watchFor            = 10 * time.Second
	maxDescribed        = 32
	describeConcurrency = 8
)

// Gate answers whether a destination's breaker holds its retries, from memory refreshed
// every Interval: one visibility query per process and interval lists the breakers that
// hold, however many retries ask, and the breakers of the destinations retries asked about
// lately are described, which reads the breaker's own state instead of visibility's copy.
// Visibility is eventually consistent: under load it lists a transition seconds late, and
// every retry due meanwhile would go out into an open breaker; a describe shows it within
// the interval. A retry republished just before its breaker's opening shows is counted by the
// breaker like any other. When a refresh fails the last answers stand. Safe for concurrent
// use.
type Gate struct {
	cfg   GateConfig
	log   *slog.Logger
	query string

	mu   sync.RWMutex
	held map[string]workflows.BreakerMode

	askMu sync.Mutex
	asked map[string]time.Time // destination → when a retry last asked about it

	// failing is whether the last refresh failed: a failure is logged when it starts, not on
	// every refresh of an outage.
	failing bool
}

// NewGate returns a Gate that holds nothing until its first Refresh; Run it.
func NewGate(cfg GateConfig) *Gate {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultRefresh
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRefreshTimeout
	}
	return &Gate{
		cfg:   cfg,
		log:   orDiscard(cfg.Logger),
		query: visibility.BreakerWorkflows(visibility.Running, cfg.TaskQueue).BreakerModes(visibility.HoldingBreakerModes...).String(),
		held:  map[string]workflows.BreakerMode{},
		asked: map[string]time.Time{},
	}
}

// Holds reports the mode of queue's breaker and whether it holds the queue's retries
// (activities.BreakerGate).
func (g *Gate) Holds(queue string) (string, bool) {
	g.askMu.Lock()
	g.asked[queue] = time.Now()
	g.askMu.Unlock()
	g.mu.RLock()
	defer g.mu.RUnlock()
	m, ok := g.held[queue]
	if !ok {
		return string(workflows.BreakerClosed), false
	}
	return string(m), true
}

// Run refreshes now and then every Interval until ctx is done; it returns nil then.
func (g *Gate) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		g.refreshLogged(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// refreshLogged refreshes, logging when refreshes start failing and when they recover.
func (g *Gate) refreshLogged(ctx context.Context) {
	err := g.Refresh(ctx)
	switch {
	case ctx.Err() != nil:
	case err != nil && !g.failing:
		g.failing = true
		g.log.Warn("breaker gate refresh failed; holding by the last list until it recovers", "error", err)
	case err == nil && g.failing:
		g.failing = false
		g.log.Info("breaker gate refresh recovered")
	}
}

// Refresh lists the breakers that hold now and describes the watched destinations'
// breakers, within Timeout, and answers Holds by what it read: a describe wins over the list.
// When the list fails the previous answers stand, updated by the describes that succeeded.
func (g *Gate) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	held := map[string]workflows.BreakerMode{}
	err := listAll(ctx, g.cfg.Client, g.query, func(e *workflowpb.WorkflowExecutionInfo) error {
		mode := workflows.BreakerMode(keyword(e, workflows.SABreakerState))
		if q := queueOf(e); q != "" && mode.Holds() {
			held[q] = mode
		}
		return nil
	})
	described := g.describeWatched(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		held = maps.Clone(g.held)
	}
	for q, mode := range described {
		if mode.Holds() {
			held[q] = mode
		} else {
			delete(held, q)
		}
	}
	g.held = held
	return err
}

// watched is the destinations retries asked about within watchFor, the latest asked first, at
// most maxDescribed; it forgets the older ones.
func (g *Gate) watched() []string {
	g.askMu.Lock()
	defer g.askMu.Unlock()
	since := time.Now().Add(-watchFor)
	for q, at := range g.asked {
		if at.Before(since) {
			delete(g.asked, q)
		}
	}
	qs := slices.SortedFunc(maps.Keys(g.asked), func(a, b string) int { return g.asked[b].Compare(g.asked[a]) })
	return qs[:min(len(qs), maxDescribed)]
}

// describeWatched describes the watched destinations' breakers and returns the mode of each
// it could read (closed for a destination without a running breaker).
func (g *Gate) describeWatched(ctx context.Context) map[string]workflows.BreakerMode {
	out := map[string]workflows.BreakerMode{}
	var (
		mu sync.Mutex
		eg errgroup.Group
	)
	eg.SetLimit(describeConcurrency)
	for _, q := range g.watched() {
		eg.Go(func() error {
			if mode, ok := g.describe(ctx, q); ok {
				mu.Lock()
				out[q] = mode
				mu.Unlock()
			}
			return nil
		})
	}
	_ = eg.Wait()
	return out
}

// describe reads the mode of queue's breaker from its workflow; ok is false when it could not
// (an error, or a breaker of another task queue), and the list's answer stands.
func (g *Gate) describe(ctx context.Context, queue string) (mode workflows.BreakerMode, ok bool) {
	resp, err := g.cfg.Client.DescribeWorkflowExecution(ctx, message.BreakerWorkflowID(queue), "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return workflows.BreakerClosed, true // no breaker: nothing holds
	case err != nil:
		return "", false
	}
	info := resp.GetWorkflowExecutionInfo()
	if g.cfg.TaskQueue != "" && info.GetTaskQueue() != g.cfg.TaskQueue {
		return "", false
	}
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return workflows.BreakerClosed, true
	}
	mode = workflows.BreakerMode(keyword(info, workflows.SABreakerState))
	if !mode.Holds() {
		mode = workflows.BreakerClosed
	}
	return mode, true
}
