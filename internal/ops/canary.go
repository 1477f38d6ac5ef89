package ops

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A canary replay replays a few dead letters first, waits for their outcomes, and replays the
// rest only if few enough failed again; it goes on judging what it replayed as it settles, and
// stops by itself when the failure ratio crosses the threshold. So a replay into a destination
// that is still broken costs the canary, not every dead letter. The job runs it (package
// jobs); the API checks its settings and reads a replayed item's outcome for it.

// Canary replay defaults and bounds.
const (
	// DefaultMaxFailureRatio stops a canary replay when half of what it judged failed again.
	DefaultMaxFailureRatio = 0.5
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

// baseline is what a replayed item looked like when its retry was sent: a newer attempt, or
// a later reset, tells what happened since.
type baseline struct {
	id       string
	attempts int
	resets   int
}

// outcome of a replayed item.
type outcome int

const (
	pending outcome = iota
	delivered
	failedAgain
)

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
		if closedStatus(info) == workflows.StatusDelivered {
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
