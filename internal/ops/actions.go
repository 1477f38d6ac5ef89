package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// action is an operator action: the route's word, and the workflow's signal and update for it.
// Which action is legal when is workflows.LegalActions, the workflow's own table.
type action struct {
	// Name is the route's word and the log's: retry, skip, resolve, discard.
	Name   string
	Signal string
	Update string
}

var (
	actionRetry   = action{Name: "retry", Signal: workflows.SignalRetryNow, Update: workflows.UpdateRetryNow}
	actionSkip    = action{Name: "skip", Signal: workflows.SignalSkip, Update: workflows.UpdateSkip}
	actionResolve = action{Name: "resolve", Signal: workflows.SignalResolve, Update: workflows.UpdateResolve}
	actionDiscard = action{Name: "discard", Signal: workflows.SignalDiscard, Update: workflows.UpdateDiscard}
)

var actionsByName = map[string]action{
	actionRetry.Name: actionRetry, actionSkip.Name: actionSkip,
	actionResolve.Name: actionResolve, actionDiscard.Name: actionDiscard,
}

// legal is the workflow's table row of act.
func (act action) legal() workflows.LegalAction {
	for _, la := range workflows.LegalActions {
		if la.Signal == act.Signal {
			return la
		}
	}
	panic("ops: action " + act.Name + " has no row in workflows.LegalActions")
}

// inList is the statuses act is legal in, for messages.
func (act action) inList() string {
	if act == actionSnooze {
		return "scheduled or dead" // workflows.SnoozeRefusal
	}
	return act.legal().InList()
}

// statusNames lists ss for a message, separated by sep.
func statusNames(ss []workflows.Status, sep string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, sep)
}

// reachable loads id for p and refuses what no workflow can answer: a closed run, or a run in
// its start delay (Temporal holds signals and updates alike until the delay ends).
func (a *API) reachable(ctx context.Context, p Principal, act action, id string) (loaded, error) {
	l, err := a.load(ctx, p, id)
	if err != nil {
		return l, err
	}
	cur := l.state.Status
	if !l.wf.Running {
		return l, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q is %s (its workflow is %s): %s is allowed only while %s", id, cur, l.wf.Status, act.Name, act.inList())}
	}
	if a.inStartDelay(l.wf.StartDelayUntil) {
		// Temporal does not end a start delay on a signal or an update: it holds them until the
		// first workflow task, so a skip would come after the republish, and an update's caller
		// would wait the whole delay.
		return l, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q waits its first retry as its workflow's start delay, until %s: Temporal applies no signal or update before then; %s is possible after it",
				id, l.wf.StartDelayUntil.Format(time.RFC3339), act.Name)}
	}
	return l, nil
}

// applyLoaded checks that act is legal for id now by the workflow's table (and, when only is
// set, that id is in one of those statuses: a bulk action on the retry queue does not touch
// dead letters), then signals it with p as the actor, without waiting for the workflow, and
// returns the item as it was read before the signal. The bulk routes and the jobs use it; a
// single action is an update (single).
func (a *API) applyLoaded(ctx context.Context, p Principal, act action, id, reason string, only []workflows.Status) (loaded, error) {
	l, err := a.reachable(ctx, p, act, id)
	if err != nil {
		return l, err
	}
	cur := l.state.Status
	if why := workflows.ActionRefusal(act.Signal, &l.state); why != "" {
		return l, &apiError{Status: http.StatusConflict, Current: cur, Msg: fmt.Sprintf("message %q: %s", id, why)}
	}
	if only != nil && !slices.Contains(only, cur) {
		return l, &apiError{Status: http.StatusConflict, Current: cur,
			Msg: fmt.Sprintf("message %q is %s, not %s", id, cur, statusNames(only, " or "))}
	}
	err = a.cfg.Client.SignalWorkflow(ctx, id, "", act.Signal, workflows.OperatorAction{Actor: p.Name, Reason: reason})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return l, &apiError{Status: http.StatusConflict, Current: cur, Msg: fmt.Sprintf("message %q closed before the %s signal arrived", id, act.Name)}
	}
	if err != nil {
		return l, fmt.Errorf("signal %s to %s: %w", act.Signal, id, err)
	}
	return l, nil
}

// update sends act to id as a Temporal Update and returns the state after it. The workflow's
// validator refuses an illegal action before it enters the history: a 409 with its reason.
func (a *API) update(ctx context.Context, p Principal, act action, id, reason string) (workflows.State, error) {
	return a.updateItem(ctx, p, act, id, act.Update, workflows.OperatorAction{Actor: p.Name, Reason: reason}, nil)
}

// updateItem sends update name with arg to id, for act, after check (when set) passed on the
// item as read, and returns the state after it. A refusal of the item's status is a 409, a
// refusal of what the update asks a 400.
func (a *API) updateItem(ctx context.Context, p Principal, act action, id, name string, arg any, check func(workflows.State) error) (workflows.State, error) {
	l, err := a.reachable(ctx, p, act, id)
	if err != nil {
		return l.state, err
	}
	cur := l.state.Status
	if check != nil {
		if err := check(l.state); err != nil {
			return l.state, err
		}
	}
	var st workflows.State
	h, err := a.cfg.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &st)
	}
	var appErr *temporal.ApplicationError
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &appErr) && appErr.Type() == workflows.ErrTypeIllegalAction:
		return st, &apiError{Status: http.StatusConflict, Current: cur, Msg: fmt.Sprintf("message %q: %s", id, appErr.Message())}
	case errors.As(err, &appErr) && appErr.Type() == workflows.ErrTypeInvalidInput:
		return st, invalidInput(id, appErr.Message(), cur)
	case errors.As(err, &nf):
		return st, &apiError{Status: http.StatusConflict, Current: cur, Msg: fmt.Sprintf("message %q closed before the %s update arrived", id, act.Name)}
	case err != nil:
		return st, fmt.Errorf("update %s of %s: %w", name, id, err)
	}
	return st, nil
}

// ActionRequest is the optional body of a single action.
type ActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ActionResponse answers a single action: 200 with the state after it, Applied true. A retry
// with ?wait carries its Outcome, and State is the latest read.
//
// While Temporal lags (APIConfig.Lagging) the action is sent as a signal and answered 202:
// Applied false, Queued true, State as read before it; the run applies it, or refuses it if
// its status changed meanwhile, at its next workflow task.
type ActionResponse struct {
	ID      string          `json:"id"`
	Action  string          `json:"action"`
	Applied bool            `json:"applied"`
	Queued  bool            `json:"queued,omitempty"`
	State   workflows.State `json:"state"`
	Outcome *RetryOutcome   `json:"outcome,omitempty"`
}

func (a *API) postMessageAction(w http.ResponseWriter, r *http.Request) {
	id, name, ok := splitAction(w, r, "POST /api/messages/{id}/{retry|skip|resolve|discard|snooze}")
	if !ok {
		return
	}
	if name == actionSnooze.Name {
		a.snooze(w, r, id)
		return
	}
	act, ok := actionsByName[name]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown action %q (want retry, skip, resolve, discard or snooze)", name))
		return
	}
	a.single(w, r, act, id)
}

// splitAction splits the path's {rest} into its target and its last segment, the action;
// without both it answers 404 naming the route's shape (want).
func splitAction(w http.ResponseWriter, r *http.Request, want string) (target, action string, ok bool) {
	rest := r.PathValue("rest")
	i := strings.LastIndex(rest, "/")
	if i <= 0 {
		writeError(w, http.StatusNotFound, "want "+want)
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// deleteDeadLetter is DELETE of a dead letter: it discards it.
func (a *API) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	a.single(w, r, actionDiscard, r.PathValue("id"))
}

func (a *API) single(w http.ResponseWriter, r *http.Request, act action, id string) {
	p := principalOf(r.Context())
	wait, err := a.actionWait(r, act)
	if err != nil {
		fail(w, err)
		return
	}
	// A retry's body may edit the message first (RetryRequest); the others' is a reason.
	var req RetryRequest
	var ok bool
	if act == actionRetry {
		req, ok = a.readRetry(w, r)
	} else {
		req.Reason, ok = readReason(w, r)
	}
	if !ok {
		return
	}
	reason, name := req.Reason, act.Name
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+a.cfg.ActionWait)
	defer cancel()
	if !req.edits() && a.cfg.Lagging != nil && a.cfg.Lagging() {
		a.queue(ctx, w, p, act, id, reason)
		return
	}
	var st workflows.State
	if req.edits() {
		name = actionEdit
		var e workflows.EditRetry
		if e, err = a.editOf(p, req); err == nil {
			st, err = a.editRetry(ctx, p, id, e)
		}
	} else {
		st, err = a.update(ctx, p, act, id, reason)
	}
	if err != nil {
		a.audit(p, name, []string{id}, reason, "refused", "error", err.Error())
		fail(w, err)
		return
	}
	a.audit(p, name, []string{id}, reason, "applied", append([]any{"status", string(st.Status)}, auditEdit(st)...)...)
	resp := ActionResponse{ID: id, Action: name, Applied: true, State: st}
	if wait > 0 {
		out, now := a.awaitRetry(r.Context(), markAfter(id, st), wait, st)
		resp.Outcome, resp.State = &out, now
		a.log.Info("operator retry outcome", "actor", p.Name, "ids", []string{id}, "outcome", out.Result, "status", string(out.Status))
	}
	writeJSON(w, http.StatusOK, resp)
}

// queue sends act to id as a signal and answers 202 with the state it was checked against
// (ActionResponse): the answer does not wait for the run's next workflow task. A retry's
// ?wait is not waited: its outcome is for the caller to follow.
func (a *API) queue(ctx context.Context, w http.ResponseWriter, p Principal, act action, id, reason string) {
	l, err := a.applyLoaded(ctx, p, act, id, reason, nil)
	if err != nil {
		a.audit(p, act.Name, []string{id}, reason, "refused", "error", err.Error())
		fail(w, err)
		return
	}
	a.audit(p, act.Name, []string{id}, reason, "queued", "status", string(l.state.Status))
	writeJSON(w, http.StatusAccepted, ActionResponse{ID: id, Action: act.Name, Queued: true, State: l.state})
}

// actionWait reads a single action's ?wait: how long a retry waits for its outcome. Only a
// retry has one to wait for: a skip, resolve or discard is done when it is applied.
func (a *API) actionWait(r *http.Request, act action) (time.Duration, error) {
	if err := knownParams(r.URL.Query(), paramWait); err != nil {
		return 0, err
	}
	wait, err := parseOutcomeWait(r.URL.Query())
	if err == nil && wait > 0 && act != actionRetry {
		err = badf("wait applies to a retry only: a %s has no later outcome", act.Name)
	}
	return wait, err
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

// BulkResult counts a bulk action's results: Succeeded ids were sent the action, Failed were
// refused or errored (Errors says why). A bulk retry that waited for outcomes counts them in
// Outcomes, over the Succeeded ids.
type BulkResult struct {
	Succeeded int                 `json:"succeeded"`
	Failed    int                 `json:"failed"`
	Errors    map[string]string   `json:"errors"`
	Outcomes  *jobs.OutcomeCounts `json:"outcomes,omitempty"`
}

// maxBulkIDs bounds one bulk call.
const maxBulkIDs = 1000

// bulk starts a job that applies act to each listed id that is in one of the statuses from
// (the table the call is made on), and answers 202 with it. With ?wait=true and at most
// maxSyncBulk ids it acts in the call instead, a few at a time, and answers 200 with the
// counts: a small selection in the page finishes well within a request.
func (a *API) bulk(act action, from ...workflows.Status) http.HandlerFunc {
	name := "bulk-" + act.Name
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r.Context())
		if err := knownParams(r.URL.Query(), paramWait); err != nil {
			fail(w, err)
			return
		}
		var req BulkRequest
		if err := readJSON(w, r, &req, false); err != nil {
			fail(w, err)
			return
		}
		if err := checkBulk(req); err != nil {
			fail(w, err)
			return
		}
		inCall, wait, err := bulkWait(r.URL.Query().Get(paramWait), act, len(req.IDs))
		if err != nil {
			fail(w, err)
			return
		}
		if !inCall {
			a.startJob(w, r, p, jobs.Input{Kind: name, Target: target(p, act, req.Reason, from), IDs: req.IDs, Rate: a.cfg.ReplayRate}, req.IDs)
			return
		}
		// The outcomes are awaited within the call's bound too.
		ctx, cancel := context.WithTimeout(r.Context(), bulkTimeout)
		defer cancel()
		res, marks := a.bulkApply(ctx, p, act, req, from)
		auditKV := []any{"succeeded", res.Succeeded, "failed", res.Failed}
		if wait > 0 {
			c := a.awaitRetries(ctx, marks, wait)
			res.Outcomes = &c
			auditKV = append(auditKV, "delivered", c.Succeeded, "failed_again", c.FailedAgain, "dead", c.Dead, "pending", c.Pending)
		}
		a.audit(p, name, req.IDs, req.Reason, "done", auditKV...)
		writeJSON(w, http.StatusOK, res)
	}
}

// bulkApply sends act to each of req's ids in one of the statuses from, a few at a time, and
// returns the counts and, for each id sent the action, its mark for awaiting its outcome.
func (a *API) bulkApply(ctx context.Context, p Principal, act action, req BulkRequest, from []workflows.Status) (BulkResult, []retryMark) {
	res := BulkResult{Errors: map[string]string{}}
	var marks []retryMark
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(bulkParallel)
	for _, id := range req.IDs {
		g.Go(func() error {
			l, err := a.applyLoaded(ctx, p, act, id, req.Reason, from)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				res.Errors[id] = err.Error()
			} else {
				res.Succeeded++
				marks = append(marks, markBefore(id, l.state))
			}
			return nil
		})
	}
	_ = g.Wait()
	return res, marks
}

// paramWait asks a bulk call to act synchronously (true), and a retry to wait so long for its
// outcomes (a duration).
const paramWait = "wait"

// bulkWait reads a bulk call's ?wait: absent or false starts a job; true acts in the call; a
// duration, on a retry, acts in the call and then waits up to it for the outcomes.
func bulkWait(v string, act action, n int) (inCall bool, wait time.Duration, err error) {
	switch v {
	case "", "false":
		return false, 0, nil
	case "true":
	default:
		wait, err = parseOutcomeWait(url.Values{paramWait: {v}})
		if err != nil {
			return false, 0, badf("wait %q is not true, false or a duration from 0 to %s", v, maxOutcomeWait)
		}
		if act != actionRetry {
			return false, 0, badf("wait=<duration> applies to a bulk retry only: a %s has no later outcome (wait=true acts in the call)", act.Name)
		}
	}
	if n > maxSyncBulk {
		return false, 0, badf("wait=%s acts on at most %d ids in the call; leave it out to start a job for %d", v, maxSyncBulk, n)
	}
	return true, wait, nil
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

// FilteredResult answers the dry run of a replay, purge or retry-matching: how many match.
type FilteredResult struct {
	DryRun bool  `json:"dry_run"`
	Count  int64 `json:"count"`
	// Unchecked counts, with error_text, the items whose last error could not be read: not
	// counted, and not acted on.
	Unchecked int `json:"unchecked,omitempty"`
}

// filtered starts a job that sends act to every item in one of the statuses from matching the
// body's filter, at ReplayRate signals per second, and answers 202 with it; with dry_run it
// only counts them (200). It is the dead letters'
// replay (retry, with an optional canary) and purge (discard), and the retry
// queue's retry-matching (retry of scheduled and held items).
func (a *API) filtered(act action, from ...workflows.Status) http.HandlerFunc {
	name := "retry-matching"
	if slices.Equal(from, []workflows.Status{workflows.StatusDead}) {
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
		f, err := req.filter(a.cfg.Now(), from...)
		if err == nil {
			err = scopeFilter(p, &f)
		}
		var plan canaryPlan
		switch {
		case err != nil:
		case name == "replay":
			plan, err = canaryOf(req)
		case req.hasCanary():
			err = badf("canary, max_failure_ratio and canary_timeout apply to the dead letters' replay only")
		}
		if err != nil {
			fail(w, err)
			return
		}
		query := f.query(a.cfg.TaskQueue)
		if f.ErrorText != "" {
			a.filteredByText(w, r, p, name, act, req, f, plan, from)
			return
		}
		if req.DryRun {
			ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
			defer cancel()
			c, err := a.cfg.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: a.cfg.Namespace, Query: query})
			if err != nil {
				fail(w, fmt.Errorf("count workflows: %w", err))
				return
			}
			writeJSON(w, http.StatusOK, FilteredResult{DryRun: true, Count: c.GetCount()})
			return
		}
		in := jobs.Input{Kind: name, Target: target(p, act, req.Reason, from), Query: query, Rate: a.cfg.ReplayRate,
			Filter: req.filterView(f)}
		if plan.N > 0 {
			in.Canary = &jobs.Canary{N: plan.N, MaxRatio: plan.MaxRatio, Timeout: plan.Timeout}
		}
		a.startJob(w, r, p, in, nil, f.logAttrs(req, plan)...)
	}
}

// filteredByText is filtered's path for a filter with an error text: the items are matched
// now (find, at most maxErrorTextScan read), and the job acts on their ids; the dry run
// counts them.
func (a *API) filteredByText(w http.ResponseWriter, r *http.Request, p Principal, name string, act action, req BulkFilter,
	f Filter, plan canaryPlan, from []workflows.Status) {
	ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
	defer cancel()
	items, _, unchecked, err := a.find(ctx, f)
	if err != nil {
		fail(w, err)
		return
	}
	if req.DryRun {
		writeJSON(w, http.StatusOK, FilteredResult{DryRun: true, Count: int64(len(items)), Unchecked: unchecked})
		return
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	in := jobs.Input{Kind: name, Target: target(p, act, req.Reason, from), IDs: ids, Rate: a.cfg.ReplayRate,
		Filter: req.filterView(f)}
	if plan.N > 0 {
		in.Canary = &jobs.Canary{N: plan.N, MaxRatio: plan.MaxRatio, Timeout: plan.Timeout}
	}
	a.startJob(w, r, p, in, ids, append(f.logAttrs(req, plan), "unchecked", unchecked)...)
}

// logAttrs are the audit log's attributes of a filtered action.
func (f Filter) logAttrs(req BulkFilter, plan canaryPlan) []any {
	return []any{"canary", plan.N, "queue", f.Queue, "category", f.Category, "tenant_filter", f.Tenant,
		"event_type", f.EventType, "service", f.Service, "error_type", f.ErrorType, "error_text", f.ErrorText,
		"older_than", req.OlderThan}
}

// filterView is the filter a job shows: the request's non-empty fields, with f's tenant.
func (b BulkFilter) filterView(f Filter) map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{paramQueue: f.Queue, paramCategory: f.Category, paramTenant: f.Tenant,
		paramEventType: f.EventType, paramService: f.Service, paramErrorType: f.ErrorType, paramErrorText: f.ErrorText,
		"older_than": b.OlderThan} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}
