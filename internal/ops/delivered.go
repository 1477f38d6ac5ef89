package ops

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// enrichDelivered adds each delivered row's result (the retry that succeeded, how many
// deliveries it took) from its workflow's close event, enrichParallel rows at a time; a row whose history
// cannot be read keeps its visibility fields and says why in DetailError. The close event is
// one event: no query, so no worker has to replay a closed run.
func (a *API) enrichDelivered(ctx context.Context, items []Item) {
	readEach(ctx, len(items), enrichTimeout, func(hctx context.Context, i int) {
		it := &items[i]
		res, err := a.result(hctx, it.ID, it.RunID)
		if err != nil {
			it.DetailError = err.Error()
			it.SucceededOnRetry = int(it.RetryCount)
			return
		}
		it.SucceededOnRetry = res.RetryCount
		it.Deliveries = res.Sequence + 1
	})
}

// result reads a completed run's Result from its close event.
func (a *API) result(ctx context.Context, id, runID string) (workflows.Result, error) {
	it := a.cfg.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return workflows.Result{}, fmt.Errorf("close event of %s: %w", id, err)
		}
		attrs := ev.GetWorkflowExecutionCompletedEventAttributes()
		if attrs == nil {
			continue
		}
		var res workflows.Result
		if err := a.cfg.DataConverter.FromPayloads(attrs.GetResult(), &res); err != nil {
			return workflows.Result{}, fmt.Errorf("decode the result of %s: %w", id, err)
		}
		return res, nil
	}
	return workflows.Result{}, errors.New("workflow " + id + " has no completion event")
}

// webUIURL links to id's workflow in the Temporal Web UI: its run's history when the run is
// known, else the workflow (the UI opens its latest run). Empty without WebUIURL. The UI's
// routes are /namespaces/<ns>/workflows/<workflow id>[/<run id>/history], each a single
// path segment: the workflow ID's slashes are percent-encoded.
func (a *API) webUIURL(id, runID string) string {
	return WorkflowUIURL(a.cfg.WebUIURL, a.cfg.Namespace, id, runID)
}

// WorkflowUIURL is the Temporal Web UI address (base, e.g. http://127.0.0.1:8233) of workflow
// id in namespace ns: its run's history when runID is set. Empty when base is.
func WorkflowUIURL(base, ns, id, runID string) string {
	if base == "" || id == "" {
		return ""
	}
	u := base + "/namespaces/" + url.PathEscape(ns) + "/workflows/" + url.PathEscape(id)
	if runID != "" {
		u += "/" + url.PathEscape(runID) + "/history"
	}
	return u
}
