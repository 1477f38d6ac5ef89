package ops

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/retry-scheduler/retry-scheduler/config"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A canary replay replays a few dead letters first, waits for their outcomes, and replays the
// rest only if few enough failed again; it goes on judging what it replayed as it settles, and
// stops by itself when the failure ratio crosses the threshold. So a replay into a destination
// that is still broken costs the canary, not every dead letter.

// Canary replay defaults and bounds.
const (
	// DefaultMaxFailureRatio stops a canary replay when half of what it judged failed again.
	DefaultMaxFailureRatio = 0.5
	// canarySlack is added to the replayed items' longest quiet window for the default
	// canary_timeout: the republish, the consumer's failure and its report take some time.
	canarySlack = 30 * time.Second
	// maxCanaryTimeout bounds canary_timeout: the call stays open while it waits.
	maxCanaryTimeout = time.Hour
	// defaultSettleEvery is how often the outcomes of replayed items are read.
	defaultSettleEvery = time.Second
)

// canaryPlan is a replay's canary settings, checked.
type canaryPlan struct {
	// N is the canary's size; 0: no canary.
	N        int
	MaxRatio float64
	// Timeout is how long a replayed item may take to settle; 0: from the items' policies.
	Timeout time.Duration
}

// canaryOf reads the canary fields of a replay's body.
func canaryOf(b BulkFilter) (canaryPlan, error) {
	c := canaryPlan{N: b.Canary, MaxRatio: DefaultMaxFailureRatio}
	if b.Canary < 0 {
		return c, badf("canary %d must not be negative (0: no canary)", b.Canary)
	}
	if b.Canary == 0 && (b.MaxFailureRatio != nil || b.CanaryTimeout != "") {
		return c, badf("max_failure_ratio and canary_timeout apply to a canary replay: set canary (N > 0)")
	}
	if b.MaxFailureRatio != nil {
		if r := *b.MaxFailureRatio; r <= 0 || r > 1 {
			return c, badf("max_failure_ratio %v must be above 0 and at most 1", r)
		}
		c.MaxRatio = *b.MaxFailureRatio
	}
	if b.CanaryTimeout != "" {
		d, err := config.ParseDuration(b.CanaryTimeout)
		if err != nil || d <= 0 || d > maxCanaryTimeout {
			return c, badf("canary_timeout %q is not a duration from 1ms to 1h (e.g. 45s, 5m)", b.CanaryTimeout)
		}
		c.Timeout = d
	}
	return c, nil
}

// hasCanary says whether b asks for any canary setting.
func (b BulkFilter) hasCanary() bool {
	return b.Canary != 0 || b.MaxFailureRatio != nil || b.CanaryTimeout != ""
}

// CanaryResult answers a canary replay.
type CanaryResult struct {
	// Count is how many dead letters matched.
	Count           int64   `json:"count"`
	Canary          int     `json:"canary"`
	MaxFailureRatio float64 `json:"max_failure_ratio"`
	// CanaryTimeout is how long each replayed item was given to settle.
	CanaryTimeout string `json:"canary_timeout"`
	// Replayed counts the dead letters retried; Refused those the retry could not be sent to
	// (Errors says why).
	Replayed int `json:"replayed"`
	Refused  int `json:"refused"`
	// Delivered, Failed and Unknown judge what was replayed: delivered (the quiet window
	// passed), failed again (a newer failure, or dead again), not settled within the timeout
	// (counted as a failure). Pending were still settling when a stop ended the call.
	Delivered int `json:"delivered"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
	Pending   int `json:"pending"`
	// Stopped says the replay stopped before replaying every match, and Reason why.
	Stopped bool              `json:"stopped"`
	Reason  string            `json:"reason,omitempty"`
	Errors  map[string]string `json:"errors,omitempty"`
	// Truncated is set when more than MaxScan matched; run again for the rest.
	Truncated bool `json:"truncated,omitempty"`
}

// baseline is what a replayed item looked like when its retry was sent: a newer attempt, or
// a later reset, tells what happened since.
type baseline struct {
	id       string
	attempts int
	resets   int
	// at is when its retry was sent.
	at time.Time
}

// outcome of a replayed item.
type outcome int

const (
	pending outcome = iota
	delivered
	failedAgain
)

// canaryRun is one canary replay: what it replayed and how that went.
type canaryRun struct {
	a       *API
	plan    canaryPlan
	res     CanaryResult
	pending []baseline
	// quiet is the longest quiet window of the items replayed so far.
	quiet time.Duration
	// settled is when settle last read the pending items' outcomes.
	settled time.Time
}

// judged is how many replayed items have an outcome; failures counts the failed and unknown.
func (c *canaryRun) judged() int   { return c.res.Delivered + c.res.Failed + c.res.Unknown }
func (c *canaryRun) failures() int { return c.res.Failed + c.res.Unknown }

// timeout is how long a replayed item has to settle: the plan's, else the longest quiet
// window seen plus canarySlack.
func (c *canaryRun) timeout() time.Duration {
	if c.plan.Timeout > 0 {
		return c.plan.Timeout
	}
	return c.quiet + canarySlack
}

// tooMany says whether the failures of what was judged reach the threshold, once at least
// the canary's size (or everything replayed, when fewer) has been judged.
func (c *canaryRun) tooMany() bool {
	need := min(c.plan.N, c.res.Replayed)
	return need > 0 && c.judged() >= need && float64(c.failures()) >= c.plan.MaxRatio*float64(c.judged())
}

func (c *canaryRun) ratio() string {
	return fmt.Sprintf("%d of %d judged failed again (%.2f ≥ %.2f)", c.failures(), c.judged(),
		float64(c.failures())/float64(max(c.judged(), 1)), c.plan.MaxRatio)
}

// replay retries one item and keeps its baseline.
func (c *canaryRun) replay(ctx context.Context, p Principal, id, reason string) {
	actx, cancel := context.WithTimeout(ctx, filteredItemTimeout)
	l, err := c.a.applyLoaded(actx, p, actionRetry, id, reason, []workflows.Status{workflows.StatusDead})
	cancel()
	if err != nil {
		c.res.Refused++
		if len(c.res.Errors) < maxReportedErrors {
			c.res.Errors[id] = err.Error()
		}
		return
	}
	c.res.Replayed++
	c.quiet = max(c.quiet, l.state.Policy.QuietWindow)
	// Its timeout counts from now; timeout() may grow with later items' quiet windows, so it
	// is applied when the item is judged (settle).
	c.pending = append(c.pending, baseline{id: id, attempts: len(l.state.Attempts), resets: l.state.Resets, at: time.Now()})
}

// settle reads the outcome of every pending item once, enrichParallel at a time, at most
// once per settleEvery (a long replay has many items settling at once); an item past its
// timeout is unknown.
func (c *canaryRun) settle(ctx context.Context) {
	if time.Since(c.settled) < c.a.settleEvery {
		return
	}
	defer func() { c.settled = time.Now() }()
	outcomes := make([]outcome, len(c.pending))
	var g errgroup.Group
	g.SetLimit(enrichParallel)
	for i, b := range c.pending {
		g.Go(func() error {
			rctx, cancel := context.WithTimeout(ctx, enrichTimeout)
			defer cancel()
			outcomes[i] = c.a.outcome(rctx, b)
			return nil
		})
	}
	_ = g.Wait()
	left := c.pending[:0]
	for i, b := range c.pending {
		o := outcomes[i]
		switch {
		case o == delivered:
			c.res.Delivered++
		case o == failedAgain:
			c.res.Failed++
		case time.Since(b.at) >= c.timeout():
			c.res.Unknown++
		default:
			left = append(left, b)
		}
	}
	c.pending = left
}

// wait settles until nothing is pending, or, when stopEarly, until the failures reach the
// threshold; it reports whether ctx ended first.
func (c *canaryRun) wait(ctx context.Context, stopEarly bool) bool {
	for {
		c.settle(ctx)
		if len(c.pending) == 0 || (stopEarly && c.tooMany()) {
			return false
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(c.a.settleEvery):
		}
	}
}

// outcome reads how a replayed item is doing: delivered when its run completed as delivered,
// failed again when it has a newer attempt or is dead again after the retry applied, pending
// otherwise (the retry not applied yet, republishing, awaiting its outcome, or held). A read
// that fails is pending: the timeout judges it.
func (a *API) outcome(ctx context.Context, b baseline) outcome {
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, b.id, "")
	if err != nil {
		return pending
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		var s string
		if p, ok := info.GetSearchAttributes().GetIndexedFields()[workflows.SAStatus.GetName()]; ok {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &s)
		}
		if workflows.Status(s) == workflows.StatusDelivered {
			return delivered
		}
		return failedAgain
	}
	st, err := a.state(ctx, b.id, nil)
	switch {
	case err != nil, st.Resets <= b.resets:
		return pending
	case len(st.Attempts) > b.attempts, st.Status == workflows.StatusDead:
		return failedAgain
	}
	return pending
}

// canaryReplay replays items (dead letters matching a filter) with a canary: the first
// plan.N at ReplayRate, then waits for their outcomes and stops when too many failed again;
// else replays the rest at ReplayRate, judging what it replayed as it settles, and stops by
// itself when the failure ratio reaches the threshold. At the end it waits for the last
// replayed items to settle.
func (a *API) canaryReplay(ctx context.Context, p Principal, plan canaryPlan, ids []string, reason string) CanaryResult {
	c := &canaryRun{a: a, plan: plan, res: CanaryResult{Count: int64(len(ids)), Canary: plan.N, MaxFailureRatio: plan.MaxRatio, Errors: map[string]string{}}}
	lim := rate.NewLimiter(rate.Limit(a.cfg.ReplayRate), 1)
	stop := func(why string) CanaryResult {
		c.res.Stopped, c.res.Reason, c.res.Pending = true, why, len(c.pending)
		c.res.CanaryTimeout = c.timeout().String()
		return c.res
	}
	next := 0
	for ; next < len(ids) && c.res.Replayed < plan.N; next++ {
		if lim.Wait(ctx) != nil {
			return stop("the call ended during the canary")
		}
		c.replay(ctx, p, ids[next], reason)
	}
	if c.res.Replayed == 0 && next < len(ids) {
		return stop("no dead letter of the canary could be replayed")
	}
	if c.wait(ctx, false) {
		return stop("the call ended while waiting for the canary's outcomes")
	}
	if c.tooMany() {
		return stop(fmt.Sprintf("the canary failed: %s; %d not replayed", c.ratio(), len(ids)-next))
	}
	for ; next < len(ids); next++ {
		if lim.Wait(ctx) != nil {
			return stop("the call ended during the replay")
		}
		c.settle(ctx)
		if c.tooMany() {
			return stop(fmt.Sprintf("the failure ratio crossed the threshold: %s; %d not replayed", c.ratio(), len(ids)-next))
		}
		c.replay(ctx, p, ids[next], reason)
	}
	if c.wait(ctx, true) {
		return stop("the call ended while waiting for the last outcomes")
	}
	if c.tooMany() {
		// Everything was replayed: nothing is left to stop, but the outcome is said all the same.
		c.res.Reason = "the failure ratio reached the threshold after every match was replayed: " + c.ratio()
	}
	c.res.Pending = len(c.pending)
	c.res.CanaryTimeout = c.timeout().String()
	return c.res
}
