package jobs

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/errgroup"
)

// The job's local activities: each is short (a batch is about a second's worth of items at the
// job's rate, applyParallel acted on at a time), so they run on the worker's local-activity slots,
// and the workflow keeps every bit of paging state between them. The rate is kept by the
// workflow, which waits between batches: a workflow busy in a local activity answers no query
// until it is done, an idle one at once.

// ItemTimeout bounds one item's action within a batch.
const ItemTimeout = 15 * time.Second

// outcomeParallel and outcomeTimeout bound the outcome reads of a canary's settle.
// applyParallel is how many items of a batch are acted on at a time: an item's action is a
// few calls to Temporal (a query of its state, then a signal or an update), and one item
// after the other a batch of a second's items took several seconds on a loaded server, so
// the job fell short of its rate and its progress query waited the whole batch.
const (
	applyParallel   = 8
	outcomeParallel = 8
	outcomeTimeout  = 3 * time.Second
)

// Activities are the job's activities over Items.
type Activities struct {
	Items Items
}

var errNoItems = errors.New("jobs: no Items configured on this worker")

// PageRequest asks for one visibility page.
type PageRequest struct {
	Query string `json:"query"`
	Token []byte `json:"token,omitempty"`
	Size  int    `json:"size"`
}

// PageResult is one visibility page; Next is nil on the last.
type PageResult struct {
	IDs  []string `json:"ids"`
	Next []byte   `json:"next,omitempty"`
}

// ApplyRequest acts on IDs.
type ApplyRequest struct {
	Target Target   `json:"target"`
	IDs    []string `json:"ids"`
}

// JobCount counts the items matching query.
func (a *Activities) JobCount(ctx context.Context, query string) (int64, error) {
	if a.Items == nil {
		return 0, errNoItems
	}
	return a.Items.Count(ctx, query)
}

// JobPage reads one page of the items matching a query.
func (a *Activities) JobPage(ctx context.Context, req PageRequest) (PageResult, error) {
	if a.Items == nil {
		return PageResult{}, errNoItems
	}
	ids, next, err := a.Items.Page(ctx, req.Query, req.Token, req.Size)
	return PageResult{IDs: ids, Next: next}, err
}

// JobApply acts on the ids, applyParallel at a time, and answers their results in the ids'
// order; an item's failure is its result, not the activity's.
func (a *Activities) JobApply(ctx context.Context, req ApplyRequest) ([]Applied, error) {
	if a.Items == nil {
		return nil, errNoItems
	}
	out := make([]Applied, len(req.IDs))
	for i, id := range req.IDs {
		out[i].ID = id
	}
	if err := a.applyEach(ctx, req.Target, out, func(Applied) bool { return true }); err != nil {
		return nil, err
	}
	// An item that failed before anything was sent to it (on a loaded server its state query
	// can outlast ItemTimeout) is tried once more, after the others, while the activity has
	// time left for it: it would otherwise count as failed, though nothing was wrong with it.
	again := func(r Applied) bool {
		dl, ok := ctx.Deadline()
		return r.Unsent && (!ok || time.Until(dl) >= 2*ItemTimeout)
	}
	if err := a.applyEach(ctx, req.Target, out, again); err != nil {
		return nil, err
	}
	return out, nil
}

// applyEach acts on each out[i] that want accepts when its turn comes, applyParallel at a
// time, and writes its result in place.
func (a *Activities) applyEach(ctx context.Context, t Target, out []Applied, want func(Applied) bool) error {
	var g errgroup.Group
	g.SetLimit(applyParallel)
	for i := range out {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if want(out[i]) {
				out[i] = a.applyOne(ctx, t, out[i].ID)
			}
			return nil
		})
	}
	return g.Wait()
}

// applyOne acts on id within ItemTimeout.
func (a *Activities) applyOne(ctx context.Context, t Target, id string) Applied {
	ictx, cancel := context.WithTimeout(ctx, ItemTimeout)
	defer cancel()
	r := a.Items.Apply(ictx, t, id)
	r.ID = id
	return r
}

// JobOutcomes reads the outcome of each replayed item, a few at a time.
func (a *Activities) JobOutcomes(ctx context.Context, bs []Baseline) ([]Outcome, error) {
	if a.Items == nil {
		return nil, errNoItems
	}
	out := make([]Outcome, len(bs))
	var g errgroup.Group
	g.SetLimit(outcomeParallel)
	for i, b := range bs {
		g.Go(func() error {
			octx, cancel := context.WithTimeout(ctx, outcomeTimeout)
			defer cancel()
			out[i] = a.Items.Outcome(octx, b)
			return nil
		})
	}
	_ = g.Wait()
	return out, nil
}
