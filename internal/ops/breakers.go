package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The destinations' breakers: one BreakerWorkflow per destination (an original queue), listed
// from visibility, read with its state query, paused and resumed with its updates. A breaker
// holds the retries of every tenant's messages to its destination, so only unscoped operators
// see and act on breakers (checkBreakerAccess).

// BreakerView is one destination's breaker as the API shows it.
type BreakerView struct {
	Queue      string                `json:"queue"`
	WorkflowID string                `json:"workflow_id"`
	State      workflows.BreakerMode `json:"state"`
	Since      *time.Time            `json:"since,omitempty"`
	// Held counts the destination's held retries (RetryStatus = held).
	Held int64 `json:"held"`
	// Cooldown is the wait from open to half-open for the breaker's next opening (or the
	// current one while open); CooldownUntil is when an open breaker probes.
	Cooldown      string                    `json:"cooldown,omitempty"`
	CooldownUntil *time.Time                `json:"cooldown_until,omitempty"`
	Opens         int                       `json:"opens"`
	Released      int                       `json:"released"`
	LastProbe     *workflows.BreakerProbe   `json:"last_probe,omitempty"`
	PausedBy      *workflows.OperatorAction `json:"paused_by,omitempty"`
	Settings      *policy.Breaker           `json:"settings,omitempty"`
	Events        []workflows.BreakerEvent  `json:"events,omitempty"`
	WebUIURL      string                    `json:"web_ui_url,omitempty"`
	// StateError says why the state query failed; State is then visibility's.
	StateError string `json:"state_error,omitempty"`
	HeldError  string `json:"held_error,omitempty"`
}

// BreakersResponse lists every destination's breaker, by queue name.
type BreakersResponse struct {
	Breakers []BreakerView `json:"breakers"`
	// Truncated is set when more than MaxScan breakers run.
	Truncated bool `json:"truncated,omitempty"`
}

// BreakerActionResponse answers a pause or resume: the breaker after it.
type BreakerActionResponse struct {
	Queue   string      `json:"queue"`
	Action  string      `json:"action"`
	Breaker BreakerView `json:"breaker"`
}

// breakerAction is an operator's action on a destination's breaker.
type breakerAction struct {
	Name   string
	Update string
	// Starts says the action starts the breaker when none runs: a pause of a destination that
	// has never had a retry republished must hold its first ones.
	Starts bool
}

var breakerActions = map[string]breakerAction{
	"pause":  {Name: "pause", Update: workflows.UpdateBreakerPause, Starts: true},
	"resume": {Name: "resume", Update: workflows.UpdateBreakerResume},
}

// checkBreakerAccess refuses a tenant-scoped token: a breaker holds every tenant's retries to
// its destination, so its state (held counts across tenants) and its pause are not one
// tenant's.
func checkBreakerAccess(p Principal) error {
	if p.Tenant != "" {
		return errorf(http.StatusForbidden, "%s is scoped to tenant %q: breakers are per destination, shared by every tenant; ask an unscoped operator", p.Name, p.Tenant)
	}
	return nil
}

// breakerQueue reads the destination from a path: checked like a queue filter.
func breakerQueue(raw string) (string, error) {
	if raw == "" {
		return "", errorf(http.StatusNotFound, "no queue in the path: want /api/breakers/{queue}")
	}
	return parseText("queue", raw)
}

func (a *API) listBreakers(w http.ResponseWriter, r *http.Request) {
	if err := knownParams(r.URL.Query()); err != nil {
		fail(w, err)
		return
	}
	if err := checkBreakerAccess(principalOf(r.Context())); err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
	defer cancel()
	views, truncated, err := a.scanBreakers(ctx)
	if err != nil {
		fail(w, err)
		return
	}
	a.enrichBreakers(ctx, views)
	writeJSON(w, http.StatusOK, BreakersResponse{Breakers: views, Truncated: truncated})
}

func (a *API) getBreaker(w http.ResponseWriter, r *http.Request) {
	if err := checkBreakerAccess(principalOf(r.Context())); err != nil {
		fail(w, err)
		return
	}
	queue, err := breakerQueue(r.PathValue("queue"))
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	v, err := a.describeBreaker(ctx, queue)
	if err != nil {
		fail(w, err)
		return
	}
	views := []BreakerView{v}
	a.enrichBreakers(ctx, views)
	writeJSON(w, http.StatusOK, views[0])
}

// scanBreakers lists the running breakers of this deployment from visibility, by queue.
func (a *API) scanBreakers(ctx context.Context) ([]BreakerView, bool, error) {
	query := visibility.BreakerWorkflows(visibility.Running, a.cfg.TaskQueue).String()
	views, more, err := scanRows(ctx, a, query, "breakers", func(e *workflowpb.WorkflowExecutionInfo) BreakerView {
		v := breakerOf(e.GetExecution().GetWorkflowId(), e.GetSearchAttributes())
		v.WebUIURL = a.webUIURL(v.WorkflowID, "")
		return v
	})
	if err != nil {
		return nil, false, err
	}
	sortBreakers(views)
	return views, more, nil
}

func sortBreakers(views []BreakerView) {
	slices.SortFunc(views, func(x, y BreakerView) int { return strings.Compare(x.Queue, y.Queue) })
}

// describeBreaker finds queue's breaker: 404 when none runs on this deployment's task queue
// (the destination has had no retry republished, or pause, since its last one ended: closed).
func (a *API) describeBreaker(ctx context.Context, queue string) (BreakerView, error) {
	id := message.BreakerWorkflowID(queue)
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return BreakerView{}, noBreaker(queue)
	case err != nil:
		return BreakerView{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != workflows.BreakerWorkflowName || info.GetTaskQueue() != a.cfg.TaskQueue ||
		info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return BreakerView{}, noBreaker(queue)
	}
	v := breakerOf(id, info.GetSearchAttributes())
	v.Queue = queue
	v.WebUIURL = a.webUIURL(id, "")
	return v, nil
}

func noBreaker(queue string) error {
	return errorf(http.StatusNotFound, "no breaker runs for queue %q: it is closed (a breaker starts with the first retry republished there, or a pause)", queue)
}

// breakerOf reads a breaker's row from its search attributes; its state query fills the rest.
func breakerOf(id string, sa *commonpb.SearchAttributes) BreakerView {
	str := func(name string) string { return payloadString(sa.GetIndexedFields(), name) }
	v := BreakerView{WorkflowID: id, Queue: str(workflows.SAOriginalQueue.GetName()),
		State: workflows.BreakerMode(str(workflows.SABreakerState.GetName()))}
	if v.Queue == "" {
		v.Queue = strings.TrimPrefix(id, "breaker/")
	}
	if v.State == "" {
		v.State = workflows.BreakerClosed
	}
	return v
}

// enrichBreakers adds each breaker's state (the query) and held count (a visibility count),
// enrichParallel at a time; a read that fails leaves visibility's fields and says why.
func (a *API) enrichBreakers(ctx context.Context, views []BreakerView) {
	readEach(ctx, len(views), enrichTimeout, func(qctx context.Context, i int) {
		v := &views[i]
		if st, err := a.breakerState(qctx, v.WorkflowID); err != nil {
			v.StateError = err.Error()
		} else {
			v.fill(st)
		}
		n, err := a.heldCount(qctx, v.Queue)
		if err != nil {
			v.HeldError = err.Error()
		}
		v.Held = n
	})
}

// breakerState queries a breaker's state.
func (a *API) breakerState(ctx context.Context, id string) (workflows.BreakerState, error) {
	var st workflows.BreakerState
	val, err := a.cfg.Client.QueryWorkflow(ctx, id, "", workflows.QueryBreakerState)
	if err != nil {
		return st, fmt.Errorf("query %s of %s: %w", workflows.QueryBreakerState, id, err)
	}
	if err := val.Get(&st); err != nil {
		return st, fmt.Errorf("decode %s of %s: %w", workflows.QueryBreakerState, id, err)
	}
	return st, nil
}

// heldCount counts queue's held retries.
func (a *API) heldCount(ctx context.Context, queue string) (int64, error) {
	c, err := a.cfg.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Namespace: a.cfg.Namespace, Query: visibility.HeldRetries(a.cfg.TaskQueue, queue).String()})
	if err != nil {
		return 0, fmt.Errorf("count the held retries of %s: %w", queue, err)
	}
	return c.GetCount(), nil
}

// fill sets v from the breaker's own state.
func (v *BreakerView) fill(st workflows.BreakerState) {
	if st.Queue != "" {
		v.Queue = st.Queue
	}
	if st.Mode != "" {
		v.State = st.Mode
	}
	if !st.Since.IsZero() {
		t := st.Since.UTC()
		v.Since = &t
	}
	set := st.Settings.WithDefaults()
	v.Settings = &set
	v.Opens, v.Released, v.LastProbe, v.PausedBy, v.Events = st.Opens, st.Released, st.LastProbe, st.PausedBy, st.Events
	cd := set.CooldownAt(max(st.Opens, 1))
	v.Cooldown = cd.String()
	if st.Mode == workflows.BreakerOpen && v.Since != nil {
		t := v.Since.Add(cd)
		v.CooldownUntil = &t
	}
}

// BreakerRequest is the optional body of a pause or resume.
type BreakerRequest struct {
	Reason string `json:"reason,omitempty"`
}

// postBreakerAction answers POST /api/breakers/{queue}/{pause|resume}.
func (a *API) postBreakerAction(w http.ResponseWriter, r *http.Request) {
	target, actName, ok := splitAction(w, r, "POST /api/breakers/{queue}/{pause|resume}")
	if !ok {
		return
	}
	act, ok := breakerActions[actName]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown breaker action %q (want pause or resume)", actName))
		return
	}
	p := principalOf(r.Context())
	if err := checkBreakerAccess(p); err != nil {
		fail(w, err)
		return
	}
	queue, err := breakerQueue(target)
	if err != nil {
		fail(w, err)
		return
	}
	reason, ok := readReason(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+a.cfg.ActionWait)
	defer cancel()
	name := "breaker-" + act.Name
	id := message.BreakerWorkflowID(queue)
	st, err := a.breakerUpdate(ctx, p, act, queue, reason)
	if err != nil {
		a.audit(p, name, []string{id}, reason, "refused", "queue", queue, "error", err.Error())
		fail(w, err)
		return
	}
	a.audit(p, name, []string{id}, reason, "applied", "queue", queue, "state", string(st.Mode))
	v := BreakerView{Queue: queue, WorkflowID: id, State: st.Mode, WebUIURL: a.webUIURL(id, "")}
	v.fill(st)
	if v.Held, err = a.heldCount(ctx, queue); err != nil {
		v.HeldError = err.Error()
	}
	writeJSON(w, http.StatusOK, BreakerActionResponse{Queue: queue, Action: act.Name, Breaker: v})
}

// breakerUpdate sends act to queue's breaker as an Update and returns its state after it. A
// pause starts the breaker when none runs (update-with-start, so the start and the pause are
// one call and the first retries are held); a resume of no breaker is a 409. The workflow
// refuses an action that does not apply (a resume of a breaker that is not paused): a 409
// with its reason.
func (a *API) breakerUpdate(ctx context.Context, p Principal, act breakerAction, queue, reason string) (workflows.BreakerState, error) {
	id := message.BreakerWorkflowID(queue)
	upd := client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   act.Update,
		Args:         []any{workflows.OperatorAction{Actor: p.Name, Reason: reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}
	var h client.WorkflowUpdateHandle
	var err error
	if act.Starts {
		start := a.cfg.Client.NewWithStartWorkflowOperation(a.breakerStart(queue), workflows.BreakerWorkflowName, a.breakerInput(queue))
		h, err = a.cfg.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start, UpdateOptions: upd})
	} else {
		h, err = a.cfg.Client.UpdateWorkflow(ctx, upd)
	}
	var st workflows.BreakerState
	if err == nil {
		err = h.Get(ctx, &st)
	}
	var appErr *temporal.ApplicationError
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &appErr):
		return st, errorf(http.StatusConflict, "breaker of %q: %s", queue, appErr.Message())
	case errors.As(err, &nf):
		return st, errorf(http.StatusConflict, "no breaker runs for queue %q: nothing to %s", queue, act.Name)
	case err != nil:
		return st, fmt.Errorf("update %s of %s: %w", act.Update, id, err)
	}
	return st, nil
}

// breakerStart starts queue's breaker on this deployment's task queue, or finds the running
// one; its search attributes make it visible at once.
func (a *API) breakerStart(queue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       message.BreakerWorkflowID(queue),
		TaskQueue:                a.cfg.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SAOriginalQueue.ValueSet(queue),
			workflows.SABreakerState.ValueSet(string(workflows.BreakerClosed))),
	}
}

// breakerInput starts queue's breaker with the settings of the policy its messages are routed
// to (BreakerSettings), until a report brings its messages' own.
func (a *API) breakerInput(queue string) workflows.BreakerInput {
	return workflows.BreakerInput{Queue: queue, Settings: a.cfg.BreakerSettings(queue).WithDefaults()}
}
