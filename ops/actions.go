package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"retry-scheduler/workflows"
)

// action is an operator action: the signal it sends and the statuses it is legal in (the
// workflow refuses the others too, but the API says so with a 409 instead of a silent no-op).
type action struct {
	// Name is the route's word and the log's: retry, skip, resolve, discard.
	Name    string
	Signal  string
	Allowed []workflows.Status
	// Expected describes the transition, for a 202 answer.
	Expected string
}

var (
	actionRetry = action{Name: "retry", Signal: workflows.SignalRetryNow,
		Allowed:  []workflows.Status{workflows.StatusScheduled, workflows.StatusDead},
		Expected: "scheduled → republishing now; dead → republishing with the count reset to 0"}
	actionSkip = action{Name: "skip", Signal: workflows.SignalSkip,
		Allowed: []workflows.Status{workflows.StatusScheduled}, Expected: "scheduled → dead"}
	actionResolve = action{Name: "resolve", Signal: workflows.SignalResolve,
		Allowed: []workflows.Status{workflows.StatusDead}, Expected: "dead → resolved"}
	actionDiscard = action{Name: "discard", Signal: workflows.SignalDiscard,
		Allowed: []workflows.Status{workflows.StatusDead}, Expected: "dead → discarded"}
)

var actionsByName = map[string]action{
	actionRetry.Name: actionRetry, actionSkip.Name: actionSkip,
	actionResolve.Name: actionResolve, actionDiscard.Name: actionDiscard,
}

func statusList(ss []workflows.Status) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, " or ")
}

func allowed(ss []workflows.Status, s workflows.Status) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// apply checks that act is legal for id now (and, when only is set, that id is in one of those
// statuses: a bulk action on the retry queue does not touch dead letters), then signals it
// with p as the actor. It returns the state read before the signal.
func (a *API) apply(ctx context.Context, p Principal, act action, id, reason string, only []workflows.Status) (workflows.State, error) {
	l, err := a.load(ctx, p, id)
	if err != nil {
		return workflows.State{}, err
	}
	cur := l.state.Status
	if !l.wf.Running {
		return l.state, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q is %s (its workflow is %s): %s is allowed only while %s", id, cur, l.wf.Status, act.Name, statusList(act.Allowed))}
	}
	if a.inStartDelay(l.wf.StartDelayUntil) {
		// Temporal does not end a start delay on a signal: it would wait, and a skip would
		// then come after the republish.
		return l.state, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q waits its first retry as its workflow's start delay, until %s: Temporal applies no signal before then; %s is possible after it",
				id, l.wf.StartDelayUntil.Format(time.RFC3339), act.Name)}
	}
	if !allowed(act.Allowed, cur) {
		return l.state, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q is %s: %s is allowed only while %s", id, cur, act.Name, statusList(act.Allowed))}
	}
	if act.Signal == workflows.SignalRetryNow && cur == workflows.StatusDead {
		if why := workflows.RetryRefusal(&l.state); why != "" {
			return l.state, &apiError{Status: http.StatusConflict, Current: cur, Msg: fmt.Sprintf("message %q: retry %s", id, why)}
		}
	}
	if only != nil && !allowed(only, cur) {
		return l.state, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q is %s, not %s", id, cur, statusList(only))}
	}
	err = a.cfg.Client.SignalWorkflow(ctx, id, "", act.Signal, workflows.OperatorAction{Actor: p.Name, Reason: reason})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return l.state, &apiError{Status: http.StatusConflict, Current: cur, Msg: fmt.Sprintf("message %q closed before the %s signal arrived", id, act.Name)}
	}
	if err != nil {
		return l.state, fmt.Errorf("signal %s to %s: %w", act.Signal, id, err)
	}
	return l.state, nil
}

// awaitApplied polls the state until the workflow has recorded actor's signal as applied or
// refused (each operator signal adds an event), or until ActionWait passes.
func (a *API) awaitApplied(ctx context.Context, id string, act action, actor string, before int) (st workflows.State, applied bool, refused string, err error) {
	deadline := time.Now().Add(a.cfg.ActionWait)
	for {
		st, err = a.state(ctx, id, nil) // apply refuses a run in its start delay
		if err != nil {
			return st, false, "", err
		}
		for _, e := range st.Events[min(before, len(st.Events)):] {
			if e.Actor != actor {
				continue
			}
			if e.Kind == act.Signal {
				return st, true, "", nil
			}
			if e.Kind == "refused" && strings.HasPrefix(e.Detail, act.Signal+" ") {
				return st, false, e.Detail, nil
			}
		}
		if time.Now().After(deadline) {
			return st, false, "", nil
		}
		select {
		case <-ctx.Done():
			return st, false, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ActionRequest is the optional body of a single action.
type ActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ActionResponse answers a single action: 200 with Applied and the new state once the
// workflow has applied the signal, or 202 with Expected when it has not within ActionWait.
type ActionResponse struct {
	ID       string          `json:"id"`
	Action   string          `json:"action"`
	Applied  bool            `json:"applied"`
	Expected string          `json:"expected,omitempty"`
	State    workflows.State `json:"state"`
}

func (a *API) postMessageAction(w http.ResponseWriter, r *http.Request) {
	rest := r.PathValue("rest")
	i := strings.LastIndex(rest, "/")
	if i <= 0 {
		writeError(w, http.StatusNotFound, "want POST /api/messages/{id}/{retry|skip|resolve|discard}")
		return
	}
	act, ok := actionsByName[rest[i+1:]]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown action %q (want retry, skip, resolve or discard)", rest[i+1:]))
		return
	}
	a.single(w, r, act, rest[:i])
}

// deleteDeadLetter is seed 003's DELETE of a dead letter: discard.
func (a *API) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	a.single(w, r, actionDiscard, r.PathValue("id"))
}

func (a *API) single(w http.ResponseWriter, r *http.Request, act action, id string) {
	p := principalOf(r.Context())
	var req ActionRequest
	if err := readJSON(w, r, &req, true); err != nil {
		fail(w, err)
		return
	}
	if err := checkReason(req.Reason); err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second+a.cfg.ActionWait)
	defer cancel()
	before, err := a.apply(ctx, p, act, id, req.Reason, nil)
	if err != nil {
		a.audit(p, act.Name, []string{id}, req.Reason, "refused", "error", err.Error())
		fail(w, err)
		return
	}
	st, applied, refused, err := a.awaitApplied(ctx, id, act, p.Name, len(before.Events))
	switch {
	case err != nil:
		a.audit(p, act.Name, []string{id}, req.Reason, "signalled", "error", err.Error())
		writeJSON(w, http.StatusAccepted, ActionResponse{ID: id, Action: act.Name, Expected: act.Expected, State: before})
	case refused != "":
		a.audit(p, act.Name, []string{id}, req.Reason, "refused by workflow", "detail", refused)
		fail(w, &apiError{Status: http.StatusConflict, Current: st.Status, Msg: fmt.Sprintf("message %q: the workflow refused it: %s", id, refused)})
	case applied:
		a.audit(p, act.Name, []string{id}, req.Reason, "applied", "status", string(st.Status))
		writeJSON(w, http.StatusOK, ActionResponse{ID: id, Action: act.Name, Applied: true, State: st})
	default:
		a.audit(p, act.Name, []string{id}, req.Reason, "signalled")
		writeJSON(w, http.StatusAccepted, ActionResponse{ID: id, Action: act.Name, Expected: act.Expected, State: st})
	}
}

// audit logs one mutating call: who, what, which ids, the result. Never the token.
func (a *API) audit(p Principal, what string, ids []string, reason, result string, kv ...any) {
	const maxIDs = 1000
	attrs := []any{"actor", p.Name, "role", p.Role.String(), "action", what, "result", result, "reason", reason, "count", len(ids)}
	if p.Tenant != "" {
		attrs = append(attrs, "tenant", p.Tenant)
	}
	if len(ids) > maxIDs {
		attrs = append(attrs, "ids", ids[:maxIDs], "ids_truncated", true)
	} else {
		attrs = append(attrs, "ids", ids)
	}
	a.log.Info("operator action", append(attrs, kv...)...)
}

// BulkRequest is the body of the bulk routes.
type BulkRequest struct {
	IDs    []string `json:"ids"`
	Reason string   `json:"reason,omitempty"`
}

// BulkResult counts a bulk action's outcomes; Errors says why each failed id failed.
type BulkResult struct {
	Succeeded int               `json:"succeeded"`
	Failed    int               `json:"failed"`
	Errors    map[string]string `json:"errors"`
}

// maxBulkIDs bounds one bulk call.
const maxBulkIDs = 1000

// bulk applies act to each listed id that is in status from (the table the call is made
// on), a few at a time, without waiting for the workflows to apply the signals.
func (a *API) bulk(act action, from workflows.Status) http.HandlerFunc {
	name := "bulk-" + act.Name
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r.Context())
		var req BulkRequest
		if err := readJSON(w, r, &req, false); err != nil {
			fail(w, err)
			return
		}
		if err := checkBulk(req); err != nil {
			fail(w, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
		defer cancel()
		res := BulkResult{Errors: map[string]string{}}
		var mu sync.Mutex
		var g errgroup.Group
		g.SetLimit(8)
		for _, id := range req.IDs {
			g.Go(func() error {
				_, err := a.apply(ctx, p, act, id, req.Reason, []workflows.Status{from})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					res.Failed++
					res.Errors[id] = err.Error()
				} else {
					res.Succeeded++
				}
				return nil
			})
		}
		_ = g.Wait()
		a.audit(p, name, req.IDs, req.Reason, "done", "succeeded", res.Succeeded, "failed", res.Failed)
		writeJSON(w, http.StatusOK, res)
	}
}

func checkBulk(req BulkRequest) error {
	if len(req.IDs) == 0 {
		return badf(`ids is empty: send {"ids": ["retry/<queue>/<message id>", ...]}`)
	}
	if len(req.IDs) > maxBulkIDs {
		return badf("%d ids: at most %d per call", len(req.IDs), maxBulkIDs)
	}
	seen := map[string]bool{}
	for _, id := range req.IDs {
		if strings.TrimSpace(id) == "" {
			return badf("ids holds an empty id")
		}
		if seen[id] {
			return badf("id %q is listed twice", id)
		}
		seen[id] = true
	}
	return checkReason(req.Reason)
}

// FilteredResult answers replay and purge. A dry run sets Count only.
type FilteredResult struct {
	DryRun    bool              `json:"dry_run"`
	Count     int64             `json:"count"`
	Succeeded int               `json:"succeeded"`
	Failed    int               `json:"failed"`
	Errors    map[string]string `json:"errors,omitempty"`
	// Truncated is set when more than MaxScan matched; run again for the rest.
	Truncated bool `json:"truncated,omitempty"`
}

// maxReportedErrors bounds the errors a replay or purge lists.
const maxReportedErrors = 100

// filtered sends act to every item in status from matching the body's filter, at ReplayRate
// signals per second; with dry_run it only counts them. It is the dead letters' replay (retry)
// and purge (discard), and the retry queue's retry-matching (retry of scheduled items).
func (a *API) filtered(act action, from workflows.Status) http.HandlerFunc {
	name := "retry-matching"
	if from == workflows.StatusDead {
		name = map[string]string{actionRetry.Name: "replay", actionDiscard.Name: "purge"}[act.Name]
	}
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r.Context())
		var req BulkFilter
		if err := readJSON(w, r, &req, false); err != nil {
			fail(w, err)
			return
		}
		if err := checkReason(req.Reason); err != nil {
			fail(w, err)
			return
		}
		f, err := req.filter(a.cfg.Now(), from)
		if err == nil {
			err = tenantScope(p, &f)
		}
		if err != nil {
			fail(w, err)
			return
		}
		query := a.scope.Query(f)
		if req.DryRun {
			ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
			defer cancel()
			c, err := a.cfg.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: a.cfg.Namespace, Query: query})
			if err != nil {
				fail(w, fmt.Errorf("count workflows: %w", err))
				return
			}
			writeJSON(w, http.StatusOK, FilteredResult{DryRun: true, Count: c.GetCount()})
			return
		}
		scanCtx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		items, truncated, err := a.scan(scanCtx, query)
		cancel()
		if err != nil {
			fail(w, err)
			return
		}
		// The request's own context: a long replay runs as long as the caller waits.
		ctx := r.Context()
		lim := rate.NewLimiter(rate.Limit(a.cfg.ReplayRate), 1)
		res := FilteredResult{Count: int64(len(items)), Errors: map[string]string{}, Truncated: truncated}
		ids := make([]string, len(items))
		for i, it := range items {
			ids[i] = it.ID
			err := lim.Wait(ctx)
			if err == nil {
				actx, cancel := context.WithTimeout(ctx, 15*time.Second)
				_, err = a.apply(actx, p, act, it.ID, req.Reason, []workflows.Status{from})
				cancel()
			}
			if err != nil {
				res.Failed++
				if len(res.Errors) < maxReportedErrors {
					res.Errors[it.ID] = err.Error()
				}
				continue
			}
			res.Succeeded++
		}
		a.audit(p, name, ids, req.Reason, "done", "succeeded", res.Succeeded, "failed", res.Failed,
			"queue", f.Queue, "category", f.Category, "tenant_filter", f.Tenant, "event_type", f.EventType, "older_than", req.OlderThan)
		writeJSON(w, http.StatusOK, res)
	}
}
