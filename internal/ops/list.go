package ops

import (
	"context"
	"fmt"
	"net/http"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The lists: the retry queue, the dead letters and the recently delivered.

// Item is one row of a list: what visibility knows, plus the last error from the state query.
type Item struct {
	ID        string `json:"id"`
	RunID     string `json:"run_id,omitempty"`
	MessageID string `json:"message_id"`
	Queue     string `json:"queue"`
	Status    string `json:"status"`
	Category  string `json:"category,omitempty"`
	Policy    string `json:"policy,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	EventType string `json:"event_type,omitempty"`
	// Service is the consuming service that reported the failure and ErrorType the last
	// failure's error type, when the reports named them.
	Service   string `json:"service,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
	// DeadLetterID and DeadLetterUUID are the dlqId and dlqUuid of a dead item's envelope
	// (from the DeadLetterIds attribute, else from the state).
	DeadLetterID   string     `json:"dlq_id,omitempty"`
	DeadLetterUUID string     `json:"dlq_uuid,omitempty"`
	RetryCount     int64      `json:"retry_count"`
	NextRetryAt    *time.Time `json:"next_retry_at,omitempty"`
	DeadAt         *time.Time `json:"dead_at,omitempty"`
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
	// ExternalSystem is the destination the message failed against: its queue, or
	// "exchange:routing key" when it was published to an exchange.
	ExternalSystem string     `json:"external_system,omitempty"`
	MaxRetries     int        `json:"max_retries,omitempty"`
	Attempts       int        `json:"attempts,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	DeadReason     string     `json:"dead_reason,omitempty"`
	FirstFailureAt *time.Time `json:"first_failure_at,omitempty"`
	DetailError    string     `json:"detail_error,omitempty"`

	// From a delivered item's result (the delivered list only): the retry that succeeded
	// (counted from 0 at the first failure, or at the operator's last reset) and how many
	// deliveries it took, the original one and every republish.
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
	// Unchecked counts, with error_text, the items whose last error could not be read
	// (their state query failed): left out of Items and Total.
	Unchecked int `json:"unchecked,omitempty"`
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

// listDelivered lists messages a retry delivered (their workflows completed as delivered)
// within the last `since`, newest first.
func (a *API) listDelivered(w http.ResponseWriter, r *http.Request) {
	f, err := parseDeliveredFilter(r.URL.Query(), a.cfg.Now())
	if err != nil {
		fail(w, err)
		return
	}
	a.list(w, r, f, order{By: sortClosedAt, Desc: true}, a.enrichDelivered)
}

// list answers one page in order o (the retry queue: NextRetryTime, soonest first, items
// without one, being republished or awaiting their outcome, last; dead letters: DeadAt or
// their start, newest first by default; delivered: CloseTime, newest first), then adds what
// visibility does not know to the page's rows with enrich.
func (a *API) list(w http.ResponseWriter, r *http.Request, f Filter, o order, enrich func(context.Context, []Item)) {
	q := r.URL.Query()
	size, err := parsePageSize(q.Get(paramPageSize))
	if err != nil {
		fail(w, err)
		return
	}
	cur, err := decodeCursor(q.Get(paramPageToken))
	if err != nil {
		fail(w, err)
		return
	}
	if err := scopeFilter(principalOf(r.Context()), &f); err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
	defer cancel()
	items, truncated, unchecked, err := a.find(ctx, f)
	if err != nil {
		fail(w, err)
		return
	}
	resp := ListResponse{Total: len(items), Truncated: truncated, Unchecked: unchecked}
	resp.Items, resp.NextPageToken = o.page(items, cur, size)
	enrich(ctx, resp.Items)
	for i := range resp.Items {
		resp.Items[i].WebUIURL = a.webUIURL(resp.Items[i].ID, resp.Items[i].RunID)
	}
	writeJSON(w, http.StatusOK, resp)
}

// find reads the items f selects: the visibility query's (scan), then, with an error text,
// those whose last error holds it, of at most maxErrorTextScan.
func (a *API) find(ctx context.Context, f Filter) (items []Item, truncated bool, unchecked int, err error) {
	items, truncated, err = a.scan(ctx, f.query(a.cfg.TaskQueue))
	if err != nil || f.ErrorText == "" {
		return items, truncated, 0, err
	}
	if truncated || len(items) > maxErrorTextScan {
		return nil, false, 0, errTooManyForText(len(items), truncated)
	}
	items, unchecked, err = a.matchErrorText(ctx, items, f.ErrorText)
	return items, false, unchecked, err
}

// scan reads every execution matching query, up to MaxScan; it reports whether there were
// more. It is one of MaxScans at a time (errBusy beyond them).
func (a *API) scan(ctx context.Context, query string) ([]Item, bool, error) {
	return scanRows(ctx, a, query, "workflows", itemOf)
}

// scanRows reads every execution matching query as a row (rowOf), up to MaxScan; it reports
// whether there were more. It is one of MaxScans at a time (errBusy beyond them). what names
// the executions in its error.
func scanRows[T any](ctx context.Context, a *API, query, what string, rowOf func(*workflowpb.WorkflowExecutionInfo) T) ([]T, bool, error) {
	release, err := a.acquireScan()
	if err != nil {
		return nil, false, err
	}
	defer release()
	var rows []T
	var token []byte
	for {
		resp, err := a.cfg.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: a.cfg.Namespace, PageSize: scanPageSize, NextPageToken: token, Query: query,
		})
		if err != nil {
			return nil, false, fmt.Errorf("list %s: %w", what, err)
		}
		for _, e := range resp.GetExecutions() {
			if len(rows) == a.cfg.MaxScan {
				return rows, true, nil
			}
			rows = append(rows, rowOf(e))
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return rows, false, nil
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
	str := func(name string) string { return payloadString(fields, name) }
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
	it.Service = str(workflows.SAConsumerService.GetName())
	it.ErrorType = str(workflows.SAErrorType.GetName())
	if p, ok := fields[workflows.SADeadLetterIDs.GetName()]; ok {
		var ids []string
		if dc.FromPayload(p, &ids) == nil && len(ids) == 2 {
			it.DeadLetterID, it.DeadLetterUUID = ids[0], ids[1]
		}
	}
	if p, ok := fields[workflows.SARetryCount.GetName()]; ok {
		_ = dc.FromPayload(p, &it.RetryCount)
	}
	it.NextRetryAt = tm(workflows.SANextRetryTime.GetName())
	it.DeadAt = tm(workflows.SADeadAt.GetName())
	// A hashed workflow ID does not name the message; enrich fills it from the state.
	var ok bool
	if it.MessageID, ok = message.MessageIDOf(it.ID, it.Queue); !ok {
		// A run started under the legacy ID of a queue holding '/' or '%'.
		it.MessageID, _ = message.LegacyMessageIDOf(it.ID, it.Queue)
	}
	return it
}

// enrich adds what only the state query knows (last error, max retries) to a page,
// enrichParallel rows at a time; a row whose query fails keeps its visibility fields.
func (a *API) enrich(ctx context.Context, items []Item) {
	readEach(ctx, len(items), enrichTimeout, func(qctx context.Context, i int) {
		it := &items[i]
		st, err := a.state(qctx, it.ID, it.StartDelayUntil)
		if err != nil {
			it.DetailError = err.Error()
			return
		}
		it.MessageID = st.Message.MessageID
		if it.EventType == "" {
			it.EventType = st.Message.EventType
		}
		if it.Service == "" {
			it.Service = st.Service
		}
		if it.ErrorType == "" {
			it.ErrorType = lastErrorType(st)
		}
		it.ExternalSystem = externalSystem(st.Message)
		if it.DeadLetterID == "" && st.Status == workflows.StatusDead {
			it.DeadLetterID = st.DeadLetterID()
			it.DeadLetterUUID = message.DLQUUID(it.DeadLetterID)
		}
		it.MaxRetries = maxRetries(st)
		it.Attempts = len(st.Attempts)
		it.LastError = lastError(st)
		it.DeadReason = st.DeadReason
		if !st.FirstFailureAt.IsZero() {
			t := st.FirstFailureAt.UTC()
			it.FirstFailureAt = &t
		}
	})
}

// maxRetries is how many retries the message of state st gets, as the workflow decides it
// under the current rules: an unknown latest failure is held to the unknown-error cap.
func maxRetries(st workflows.State) int {
	return policy.MaxRetries(st.Policy, policy.Category(st.Category), st.MaxRetries)
}
