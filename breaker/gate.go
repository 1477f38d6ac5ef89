package breaker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/retry-scheduler/retry-scheduler/visibility"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// GateConfig configures a Gate.
type GateConfig struct {
	// Client answers the visibility query. Required.
	Client Lister
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

// Gate answers whether a destination's breaker holds its retries, from a list of the
// breakers that hold refreshed every Interval: one visibility query per process and
// interval, however many retries ask. It is as fresh as visibility (eventually consistent)
// and the interval make it; a retry republished just before its breaker's opening shows is
// counted by the breaker like any other. When a refresh fails the last list stands. Safe for
// concurrent use.
type Gate struct {
	cfg   GateConfig
	log   *slog.Logger
	query string

	mu   sync.RWMutex
	held map[string]workflows.BreakerMode

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
	}
}

// Holds reports the mode of queue's breaker and whether it holds the queue's retries
// (activities.BreakerGate).
func (g *Gate) Holds(queue string) (string, bool) {
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

// Refresh lists the breakers that hold now, within Timeout, and answers Holds by that list.
// On error the previous list stands.
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
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.held = held
	g.mu.Unlock()
	return nil
}
