package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sync/errgroup"

	"retry-scheduler/message"
	"retry-scheduler/workflows"
)

// Temporal is the part of client.Client the API uses.
type Temporal interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
	CountWorkflow(ctx context.Context, request *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	QueryWorkflow(ctx context.Context, workflowID string, runID string, queryType string, args ...interface{}) (converter.EncodedValue, error)
	SignalWorkflow(ctx context.Context, workflowID string, runID string, signalName string, arg interface{}) error
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	GetWorkflowHistory(ctx context.Context, workflowID string, runID string, isLongPoll bool, filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
}

// APIConfig configures the operators' API.
type APIConfig struct {
	// Client reaches Temporal. Required.
	Client Temporal
	// Auth decides who calls. Required (NewAuth, or Disabled for development).
	Auth *Auth
	// Namespace is the Temporal namespace. Defaults to "default".
	Namespace string
	// TaskQueue scopes lists, replay and purge to this deployment's workflows, and actions to
	// workflows on it. Defaults to workflows.DefaultTaskQueue.
	TaskQueue string
	// ReplayRate is how many signals per second replay and purge send. Defaults to 20.
	ReplayRate float64
	// ActionWait bounds, with 10s for reading the state first, how long a single action waits
	// for its update's result before answering 503 (a stopped worker). Defaults to 5s.
	ActionWait time.Duration
	// MaxScan is the most workflows one list reads to sort them (SQL visibility, the dev
	// server's and PostgreSQL's, cannot ORDER BY). Defaults to 10000.
	MaxScan int
	// Logger receives one line per mutating call. Defaults to slog.Default().
	Logger *slog.Logger
	// DataConverter decodes workflow inputs read from histories: the client's (with the
	// payload codec when PAYLOAD_KEYS is set). Defaults to the SDK's default converter.
	DataConverter converter.DataConverter
	// Now is the clock for older_than and since. Defaults to time.Now.
	Now func() time.Time
	// WebUIURL is the Temporal Web UI's base address (http://127.0.0.1:8233, say): items then
	// carry web_ui_url, a link to their workflow's history there. Defaults to "" (no links).
	WebUIURL string
}

func (c APIConfig) withDefaults() APIConfig {
	if c.DataConverter == nil {
		c.DataConverter = converter.GetDefaultDataConverter()
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.TaskQueue == "" {
		c.TaskQueue = workflows.DefaultTaskQueue
	}
	if c.ReplayRate <= 0 {
		c.ReplayRate = 20
	}
	if c.ActionWait <= 0 {
		c.ActionWait = 5 * time.Second
	}
	if c.MaxScan <= 0 {
		c.MaxScan = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.WebUIURL = strings.TrimRight(c.WebUIURL, "/")
	return c
}

// API is the operators' JSON API over Temporal visibility, the state query and the operator
// signals (see ops/README.md for the routes).
type API struct {
	cfg   APIConfig
	scope scope
	log   *slog.Logger
}

// NewAPI returns the API; Register mounts it.
func NewAPI(cfg APIConfig) (*API, error) {
	if cfg.Client == nil {
		return nil, errors.New("ops api: no Temporal client")
	}
	if cfg.Auth == nil {
		return nil, errors.New("ops api: no Auth")
	}
	cfg = cfg.withDefaults()
	return &API{cfg: cfg, scope: scope{TaskQueue: cfg.TaskQueue}, log: cfg.Logger}, nil
}

// Register mounts the API under /api/ and the web page at / on mux.
func (a *API) Register(mux *http.ServeMux) {
	auth := a.cfg.Auth
	mux.HandleFunc("GET /api/whoami", auth.require(RoleViewer, a.whoami))
	mux.HandleFunc("GET /api/retry-queue", auth.require(RoleViewer, a.listRetryQueue))
	mux.HandleFunc("GET /api/dead-letters", auth.require(RoleViewer, a.listDeadLetters))
	mux.HandleFunc("GET /api/delivered", auth.require(RoleViewer, a.listDelivered))
	// Workflow IDs hold slashes (retry/<queue>/<id>): the {id...} and {rest...} wildcards take
	// them percent-encoded in one segment (the mux matches escaped segments) or raw.
	mux.HandleFunc("GET /api/messages/{id...}", auth.require(RoleViewer, a.getMessage))
	mux.HandleFunc("POST /api/messages/{rest...}", auth.require(RoleOperator, a.postMessageAction))
	mux.HandleFunc("DELETE /api/dead-letters/{id...}", auth.require(RoleOperator, a.deleteDeadLetter))
	mux.HandleFunc("POST /api/retry-queue/bulk-retry", auth.require(RoleOperator, a.bulk(actionRetry, workflows.StatusScheduled)))
	mux.HandleFunc("POST /api/retry-queue/bulk-skip", auth.require(RoleOperator, a.bulk(actionSkip, workflows.StatusScheduled)))
	mux.HandleFunc("POST /api/retry-queue/retry-matching", auth.require(RoleOperator, a.filtered(actionRetry, workflows.StatusScheduled)))
	mux.HandleFunc("POST /api/dead-letters/bulk-retry", auth.require(RoleOperator, a.bulk(actionRetry, workflows.StatusDead)))
	mux.HandleFunc("POST /api/dead-letters/bulk-resolve", auth.require(RoleOperator, a.bulk(actionResolve, workflows.StatusDead)))
	mux.HandleFunc("POST /api/dead-letters/bulk-discard", auth.require(RoleOperator, a.bulk(actionDiscard, workflows.StatusDead)))
	mux.HandleFunc("POST /api/dead-letters/replay", auth.require(RoleOperator, a.filtered(actionRetry, workflows.StatusDead)))
	mux.HandleFunc("POST /api/dead-letters/purge", auth.require(RoleAdmin, a.filtered(actionDiscard, workflows.StatusDead)))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s (see ops/README.md)", r.Method, r.URL.Path))
	})
	registerPage(mux)
}

// apiError is an error with its HTTP status; Current, when set, is the item's status.
type apiError struct {
	Status  int
	Msg     string
	Current workflows.Status
}

func (e *apiError) Error() string { return e.Msg }

func errorf(status int, format string, a ...any) *apiError {
	return &apiError{Status: status, Msg: fmt.Sprintf(format, a...)}
}

// fail writes err as JSON: an apiError with its status, a badRequest as 400, a deadline or
// cancellation as 503, anything else as 502 (Temporal answered with an error).
func fail(w http.ResponseWriter, err error) {
	var ae *apiError
	var br badRequest
	switch {
	case errors.As(err, &ae):
		body := map[string]any{"error": ae.Msg}
		if ae.Current != "" {
			body["current_status"] = ae.Current
		}
		writeJSON(w, ae.Status, body)
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, br.msg)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "Temporal did not answer in time: "+err.Error())
	default:
		writeError(w, http.StatusBadGateway, "Temporal: "+err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (a *API) whoami(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r.Context())
	auth := "tokens"
	if a.cfg.Auth.Off() {
		auth = "off"
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": p.Name, "role": p.Role.String(), "tenant": p.Tenant, "auth": auth})
}

// Item is one row of a list: what visibility knows, plus the last error from the state query.
type Item struct {
	ID          string     `json:"id"`
	RunID       string     `json:"run_id,omitempty"`
	MessageID   string     `json:"message_id"`
	Queue       string     `json:"queue"`
	Status      string     `json:"status"`
	Category    string     `json:"category,omitempty"`
	Policy      string     `json:"policy,omitempty"`
	Tenant      string     `json:"tenant,omitempty"`
	EventType   string     `json:"event_type,omitempty"`
	RetryCount  int64      `json:"retry_count"`
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	DeadAt      *time.Time `json:"dead_at,omitempty"`
	// StartedAt is when the first failure report started the workflow: the dead-letter list's
	// "created at" (sort=created_at).
	StartedAt time.Time `json:"started_at"`
	// ClosedAt is when a delivered item's workflow completed: its quiet window ended with no
	// new failure (the delivered list only).
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// WebUIURL links to the workflow's history in the Temporal Web UI (when configured).
	WebUIURL string `json:"web_ui_url,omitempty"`
	// StartDelayUntil is set while the run waits its first retry as its start delay: it has
	// had no workflow task yet, and operator actions are refused until then.
	StartDelayUntil *time.Time `json:"start_delay_until,omitempty"`

	// From the state query (absent when it failed: DetailError says why).
	MaxRetries     int        `json:"max_retries,omitempty"`
	Attempts       int        `json:"attempts,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	DeadReason     string     `json:"dead_reason,omitempty"`
	FirstFailureAt *time.Time `json:"first_failure_at,omitempty"`
	DetailError    string     `json:"detail_error,omitempty"`

	// From a delivered item's result (the delivered list only): the retry that succeeded
	// (seed 000 counting, since the operator's last reset, if any) and how many deliveries it
	// took, the original one and every republish.
	SucceededOnRetry int `json:"succeeded_on_retry,omitempty"`
	Deliveries       int `json:"deliveries,omitempty"`
}

// ListResponse is a page of a list.
type ListResponse struct {
	Items []Item `json:"items"`
	// NextPageToken fetches the next page; empty on the last.
	NextPageToken string `json:"next_page_token,omitempty"`
	// Total is how many items match the filters (all pages).
	Total int `json:"total"`
	// Truncated is set when more than MaxScan items matched: only the first MaxScan read were
	// sorted.
	Truncated bool `json:"truncated,omitempty"`
}

func (a *API) listRetryQueue(w http.ResponseWriter, r *http.Request) {
	f, err := parseRetryQueueFilter(r.URL.Query())
	if err != nil {
		fail(w, err)
		return
	}
	a.list(w, r, f, order{By: sortNextRetry}, a.enrich)
}

func (a *API) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	f, err := parseDeadLetterFilter(r.URL.Query())
	if err != nil {
		fail(w, err)
		return
	}
	o, err := parseDeadLetterOrder(r.URL.Query())
	if err != nil {
		fail(w, err)
		return
	}
	a.list(w, r, f, o, a.enrich)
}

// listDelivered is seed 003's AC-12: messages delivered by a retry (their workflows completed
// as delivered) within the last `since`, newest first.
func (a *API) listDelivered(w http.ResponseWriter, r *http.Request) {
	f, err := parseDeliveredFilter(r.URL.Query(), a.cfg.Now())
	if err != nil {
		fail(w, err)
		return
	}
	a.list(w, r, f, order{By: sortClosedAt, Desc: true}, a.enrichDelivered)
}

// tenantScope applies the caller's tenant to f: a scoped token sees its tenant only, and
// asking for another is refused.
func tenantScope(p Principal, f *Filter) error {
	if p.Tenant == "" {
		return nil
	}
	if f.Tenant != "" && f.Tenant != p.Tenant {
		return errorf(http.StatusForbidden, "%s is scoped to tenant %q", p.Name, p.Tenant)
	}
	f.Tenant = p.Tenant
	return nil
}

// list answers one page in order o (the retry queue: NextRetryTime, soonest first, items
// without one, being republished or awaiting their outcome, last; dead letters: DeadAt or
// their start, newest first by default; delivered: CloseTime, newest first), then adds what
// visibility does not know to the page's rows with enrich.
func (a *API) list(w http.ResponseWriter, r *http.Request, f Filter, o order, enrich func(context.Context, []Item)) {
	q := r.URL.Query()
	size, err := parsePageSize(q.Get("page_size"))
	if err != nil {
		fail(w, err)
		return
	}
	cur, err := decodeCursor(q.Get("next_page_token"))
	if err != nil {
		fail(w, err)
		return
	}
	if err := tenantScope(principalOf(r.Context()), &f); err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	items, truncated, err := a.scan(ctx, a.scope.Query(f))
	if err != nil {
		fail(w, err)
		return
	}
	key := func(it *Item) cursor {
		t := o.key(it)
		if t == nil {
			return cursor{Unset: true, ID: it.ID}
		}
		return cursor{At: t.UnixNano(), ID: it.ID}
	}
	cmp := func(x, y cursor) int {
		switch {
		case x.Unset != y.Unset:
			if x.Unset {
				return 1
			}
			return -1
		case x.At != y.At:
			if (x.At < y.At) != o.Desc {
				return -1
			}
			return 1
		}
		return strings.Compare(x.ID, y.ID)
	}
	slices.SortFunc(items, func(x, y Item) int { return cmp(key(&x), key(&y)) })
	start := 0
	if cur != nil {
		start = len(items)
		for i := range items {
			if cmp(key(&items[i]), *cur) > 0 {
				start = i
				break
			}
		}
	}
	end := min(start+size, len(items))
	resp := ListResponse{Items: items[start:end], Total: len(items), Truncated: truncated}
	if end < len(items) {
		resp.NextPageToken = key(&items[end-1]).encode()
	}
	enrich(ctx, resp.Items)
	for i := range resp.Items {
		resp.Items[i].WebUIURL = a.webUIURL(resp.Items[i].ID, resp.Items[i].RunID)
	}
	writeJSON(w, http.StatusOK, resp)
}

// scan reads every execution matching query, up to MaxScan.
func (a *API) scan(ctx context.Context, query string) ([]Item, bool, error) {
	var items []Item
	var token []byte
	for {
		resp, err := a.cfg.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: a.cfg.Namespace, PageSize: 1000, NextPageToken: token, Query: query,
		})
		if err != nil {
			return nil, false, fmt.Errorf("list workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if len(items) == a.cfg.MaxScan {
				return items, true, nil
			}
			items = append(items, itemOf(e))
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return items, false, nil
		}
	}
}

// itemOf reads a list row from an execution's search attributes.
func itemOf(e *workflowpb.WorkflowExecutionInfo) Item {
	it := Item{ID: e.GetExecution().GetWorkflowId(), RunID: e.GetExecution().GetRunId(),
		StartedAt: e.GetStartTime().AsTime().UTC(), StartDelayUntil: startDelayUntil(e)}
	if e.GetCloseTime() != nil {
		t := e.GetCloseTime().AsTime().UTC()
		it.ClosedAt = &t
	}
	fields := e.GetSearchAttributes().GetIndexedFields()
	dc := converter.GetDefaultDataConverter()
	str := func(name string) string {
		var s string
		if p, ok := fields[name]; ok {
			_ = dc.FromPayload(p, &s)
		}
		return s
	}
	tm := func(name string) *time.Time {
		p, ok := fields[name]
		if !ok {
			return nil
		}
		var t time.Time
		if dc.FromPayload(p, &t) != nil || t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	it.Status = str(workflows.SAStatus.GetName())
	it.Queue = str(workflows.SAOriginalQueue.GetName())
	it.Category = str(workflows.SAErrorCategory.GetName())
	it.Policy = str(workflows.SAPolicy.GetName())
	it.Tenant = str(workflows.SATenant.GetName())
	it.EventType = str(workflows.SAEventType.GetName())
	if p, ok := fields[workflows.SARetryCount.GetName()]; ok {
		_ = dc.FromPayload(p, &it.RetryCount)
	}
	it.NextRetryAt = tm(workflows.SANextRetryTime.GetName())
	it.DeadAt = tm(workflows.SADeadAt.GetName())
	// A hashed workflow ID does not name the message; enrich fills it from the state.
	it.MessageID, _ = message.MessageIDOf(it.ID, it.Queue)
	return it
}

// enrich adds what only the state query knows (last error, max retries) to a page, a few
// queries at a time; a row whose query fails keeps its visibility fields.
func (a *API) enrich(ctx context.Context, items []Item) {
	var g errgroup.Group
	g.SetLimit(8)
	for i := range items {
		it := &items[i]
		g.Go(func() error {
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			st, err := a.state(qctx, it.ID, it.StartDelayUntil)
			if err != nil {
				it.DetailError = err.Error()
				return nil
			}
			it.MessageID = st.Message.MessageID
			if it.EventType == "" {
				it.EventType = st.Message.EventType
			}
			it.MaxRetries = maxRetries(st)
			it.Attempts = len(st.Attempts)
			if n := len(st.Attempts); n > 0 {
				it.LastError = st.Attempts[n-1].Error
			}
			if it.LastError == "" {
				it.LastError = st.DeadDetail
			}
			it.DeadReason = st.DeadReason
			if !st.FirstFailureAt.IsZero() {
				t := st.FirstFailureAt.UTC()
				it.FirstFailureAt = &t
			}
			return nil
		})
	}
	_ = g.Wait()
}

func maxRetries(st workflows.State) int {
	if st.MaxRetries > 0 {
		return st.MaxRetries
	}
	return st.Policy.MaxRetries
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
}

// loaded is an item read for an action: its workflow and state.
type loaded struct {
	wf    WorkflowInfo
	state workflows.State
}

// describe finds id's workflow: 404 when there is none, or it is not a RetryWorkflow of this
// deployment.
func (a *API) describe(ctx context.Context, id string) (WorkflowInfo, error) {
	if id == "" {
		return WorkflowInfo{}, errorf(http.StatusNotFound, "no message id in the path")
	}
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return WorkflowInfo{}, errorf(http.StatusNotFound, "no message with id %q", id)
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

// load reads id for p: 404 unknown, 403 another tenant's.
func (a *API) load(ctx context.Context, p Principal, id string) (loaded, error) {
	wf, err := a.describe(ctx, id)
	if err != nil {
		return loaded{}, err
	}
	st, err := a.state(ctx, id, wf.StartDelayUntil)
	if err != nil {
		return loaded{}, errorf(http.StatusServiceUnavailable, "cannot read the state of %q: %v", id, err)
	}
	if !p.Allows(st.TenantID) {
		return loaded{}, errorf(http.StatusForbidden, "message %q belongs to another tenant than %s's (%q)", id, p.Name, p.Tenant)
	}
	return loaded{wf: wf, state: st}, nil
}

func (a *API) getMessage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p := principalOf(r.Context())
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	wf, err := a.describe(ctx, id)
	if err != nil {
		fail(w, err)
		return
	}
	resp := MessageResponse{ID: id, Workflow: wf, WebUIURL: a.webUIURL(id, wf.RunID)}
	st, err := a.state(ctx, id, wf.StartDelayUntil)
	if err != nil {
		if p.Tenant != "" {
			// The tenant cannot be checked without the state.
			fail(w, errorf(http.StatusServiceUnavailable, "cannot read the state of %q: %v", id, err))
			return
		}
		resp.StateError = err.Error()
	} else {
		if !p.Allows(st.TenantID) {
			fail(w, errorf(http.StatusForbidden, "message %q belongs to another tenant than %s's (%q)", id, p.Name, p.Tenant))
			return
		}
		resp.State = &st
	}
	writeJSON(w, http.StatusOK, resp)
}

// readJSON decodes the request body into v: at most 1 MiB, no unknown fields, one value.
// An empty body leaves v as it is when emptyOK.
func readJSON(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return badf("read the body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if emptyOK {
			return nil
		}
		return badf("the body is empty; send a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badf("the body is not the JSON this route takes: %v", err)
	}
	if dec.More() {
		return badf("the body holds more than one JSON value")
	}
	return nil
}

const maxReasonLen = 1000

func checkReason(s string) error {
	if len(s) > maxReasonLen {
		return badf("reason is longer than %d bytes", maxReasonLen)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
		return badf("reason contains a control character")
	}
	return nil
}
