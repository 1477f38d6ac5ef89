package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// One item, read by id: its workflow (describe) and its state (the state query, or its start
// while it waits its start delay).

// WorkflowInfo is what Temporal says of an item's workflow.
type WorkflowInfo struct {
	RunID     string     `json:"run_id"`
	Status    string     `json:"status"`
	Running   bool       `json:"running"`
	StartedAt time.Time  `json:"started_at"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
	TaskQueue string     `json:"task_queue"`
	// StartDelayUntil: see Item.
	StartDelayUntil *time.Time `json:"start_delay_until,omitempty"`
}

// MessageResponse is one item: its workflow and its whole state.
type MessageResponse struct {
	ID       string           `json:"id"`
	Workflow WorkflowInfo     `json:"workflow"`
	State    *workflows.State `json:"state"`
	// WebUIURL links to the workflow's history in the Temporal Web UI (when configured).
	WebUIURL string `json:"web_ui_url,omitempty"`
	// StateError says why the state could not be read (the workflow is closed and no worker
	// could replay it, say).
	StateError string `json:"state_error,omitempty"`
	// Redacted names the state's fields left out of this answer: the message's payload and
	// headers, which may carry personal data, for a viewer or when ?payload=false asked.
	Redacted []string `json:"redacted,omitempty"`
}

// paramPayload is GET /api/messages/{id}'s ?payload=false: the state without the message's
// payload and headers (what a viewer always gets), and no audit line for the read.
const paramPayload = "payload"

// redactedFields are the state's fields a metadata-only read leaves out.
var redactedFields = []string{"state.message.payload", "state.message.headers"}

// withPayload says whether p's read of a message includes its payload and headers: an
// operator's or an admin's, unless it asks for metadata alone.
func withPayload(p Principal, q url.Values) (bool, error) {
	switch v := q.Get(paramPayload); v {
	case "", "true":
		return p.Role >= RoleOperator, nil
	case "false":
		return false, nil
	default:
		return false, badf("payload %q is not true or false", v)
	}
}

// redact leaves the message's payload and headers out of st.
func redact(st *workflows.State) {
	st.Message.Payload = nil
	st.Message.Headers = nil
}

// loaded is an item read for an action: its workflow and state.
type loaded struct {
	wf    WorkflowInfo
	state workflows.State
}

// state reads id's state with the state query; a run still in its start delay has no task
// to answer it with (the query would wait for the delay to end), so its state is read from
// its start instead.
func (a *API) state(ctx context.Context, id string, startDelayUntil *time.Time) (workflows.State, error) {
	if a.inStartDelay(startDelayUntil) {
		return a.delayedState(ctx, id)
	}
	v, err := a.cfg.Client.QueryWorkflow(ctx, id, "", workflows.QueryState)
	var notReady *serviceerror.WorkflowNotReady
	if errors.As(err, &notReady) {
		return a.delayedState(ctx, id)
	}
	if err != nil {
		return workflows.State{}, fmt.Errorf("query %s of %s: %w", workflows.QueryState, id, err)
	}
	var st workflows.State
	if err := v.Get(&st); err != nil {
		return workflows.State{}, fmt.Errorf("decode %s of %s: %w", workflows.QueryState, id, err)
	}
	return st, nil
}

// describe finds id's workflow: 404 when there is none, or it is not a RetryWorkflow of this
// deployment.
// notFound is the answer for an id Temporal has no workflow for. With bridge deferrals on, a new
// message is not in Temporal until its first retry is due: the answer says so, and when to ask
// again.
func (a *API) notFound(id string) error {
	if a.cfg.BridgeDeferMax <= 0 {
		return errorf(http.StatusNotFound, "no message with id %q", id)
	}
	return errorf(http.StatusNotFound, "no message with id %q in Temporal: unknown, or a new message whose first retry a bridge is waiting out (BRIDGE_DEFER_MAX %s): its run starts when that retry is due; ask again after %s",
		id, a.cfg.BridgeDeferMax, a.cfg.BridgeDeferMax)
}

func (a *API) describe(ctx context.Context, id string) (WorkflowInfo, error) {
	if id == "" {
		return WorkflowInfo{}, errorf(http.StatusNotFound, "no message id in the path")
	}
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return WorkflowInfo{}, a.notFound(id)
	case err != nil:
		return WorkflowInfo{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != workflows.RetryWorkflowName || info.GetTaskQueue() != a.cfg.TaskQueue {
		return WorkflowInfo{}, errorf(http.StatusNotFound, "no message with id %q", id)
	}
	wf := WorkflowInfo{
		RunID:           info.GetExecution().GetRunId(),
		Status:          statusName(info.GetStatus()),
		Running:         info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		StartedAt:       info.GetStartTime().AsTime(),
		TaskQueue:       info.GetTaskQueue(),
		StartDelayUntil: startDelayUntil(info),
	}
	if info.GetCloseTime() != nil {
		t := info.GetCloseTime().AsTime()
		wf.ClosedAt = &t
	}
	return wf, nil
}

// startDelayUntil is when a run started with a start delay has its first workflow task
// (Temporal's execution time), nil for a run started without one.
func startDelayUntil(info *workflowpb.WorkflowExecutionInfo) *time.Time {
	if info.GetExecutionTime() == nil || !info.GetExecutionTime().AsTime().After(info.GetStartTime().AsTime()) {
		return nil
	}
	t := info.GetExecutionTime().AsTime().UTC()
	return &t
}

// inStartDelay says whether a run with this start delay end has had no workflow task yet.
func (a *API) inStartDelay(until *time.Time) bool {
	return until != nil && until.After(a.cfg.Now())
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// load reads id for p, for an action: 404 unknown, 503 its state unreadable, 403 another
// tenant's.
func (a *API) load(ctx context.Context, p Principal, id string) (loaded, error) {
	wf, err := a.describe(ctx, id)
	if err != nil {
		return loaded{}, err
	}
	st, err := a.state(ctx, id, wf.StartDelayUntil)
	if err != nil {
		return loaded{}, stateUnreadable(id, err)
	}
	if err := checkTenant(p, id, &st, nil); err != nil {
		return loaded{}, err
	}
	return loaded{wf: wf, state: st}, nil
}

// getMessage answers GET /api/messages/{id}: the workflow and, when it can be read, the state
// (without it, StateError says why; a tenant-scoped token is refused instead).
func (a *API) getMessage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := knownParams(r.URL.Query(), paramPayload); err != nil {
		fail(w, err)
		return
	}
	p := principalOf(r.Context())
	payload, err := withPayload(p, r.URL.Query())
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	wf, err := a.describe(ctx, id)
	if err != nil {
		fail(w, err)
		return
	}
	resp := MessageResponse{ID: id, Workflow: wf, WebUIURL: a.webUIURL(id, wf.RunID)}
	st, err := a.state(ctx, id, wf.StartDelayUntil)
	if err == nil {
		resp.State = &st
	} else {
		resp.StateError = err.Error()
	}
	if err := checkTenant(p, id, resp.State, err); err != nil {
		fail(w, err)
		return
	}
	switch {
	case resp.State != nil && !payload:
		redact(resp.State)
		resp.Redacted = redactedFields
	case resp.State != nil:
		// A message's payload may carry personal data: who read it is on record.
		a.audit(p, "read-payload", []string{id}, "", "read")
	}
	writeJSON(w, http.StatusOK, resp)
}
