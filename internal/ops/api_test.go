package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// fakeTemporal is an in-memory Temporal: it lists every running workflow it holds (the query
// is recorded, not evaluated) and applies operator signals the way RetryWorkflow does.
type fakeTemporal struct {
	mu      sync.Mutex
	wfs     map[string]*workflows.State
	closed  map[string]bool
	queries []string
	// delayed holds the first events of runs still in their start delay: their query fails
	// as Temporal's does before the first workflow task.
	delayed map[string][]*historypb.HistoryEvent
	// results are the results of closed (delivered) runs, read from their close events.
	results map[string]workflows.Result
	// breakers are the running BreakerWorkflows by workflow ID; starts records the
	// update-with-start calls' start options and inputs.
	breakers map[string]*workflows.BreakerState
	starts   []fakeStartOp
	// onRetry, when set, settles a dead letter's replay as soon as it is signalled.
	onRetry func(s *workflows.State)
	// onQuery, when set, sees a message's state before each state query answers it (the
	// fake's lock held): a test settles a retry there as the workflow would, later.
	onQuery func(s *workflows.State)
	// queryFails is how many of an item's next state queries fail, as on a loaded server.
	queryFails map[string]int
	// jobs are the jobs started; jobProgress, a job's answer to its progress query (none: the
	// query fails, as with no worker).
	jobs        []fakeJob
	jobProgress map[string]jobs.Progress
	// itemUpdates are the edits and snoozes applied, in order.
	itemUpdates []any
}

func newFake(states ...workflows.State) *fakeTemporal {
	f := &fakeTemporal{wfs: map[string]*workflows.State{}, closed: map[string]bool{}, breakers: map[string]*workflows.BreakerState{}}
	for i := range states {
		s := states[i]
		f.wfs[s.WorkflowID] = &s
	}
	return f
}

func (f *fakeTemporal) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, req.GetQuery())
	dc := converter.GetDefaultDataConverter()
	p := func(v any) *commonpb.Payload { pl, _ := dc.ToPayload(v); return pl }
	if strings.Contains(req.GetQuery(), `WorkflowType = 'BreakerWorkflow'`) {
		return f.listBreakers(p), nil
	}
	wantHeld := strings.Contains(req.GetQuery(), `RetryStatus = 'held'`)
	ids := make([]string, 0, len(f.wfs))
	for id := range f.wfs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []*workflowpb.WorkflowExecutionInfo
	for _, id := range ids {
		s := f.wfs[id]
		wantDead := strings.Contains(req.GetQuery(), `RetryStatus = 'dead'`)
		wantClosed := strings.Contains(req.GetQuery(), `ExecutionStatus = 'Completed'`)
		if f.closed[id] != wantClosed || (!wantClosed && (s.Status == workflows.StatusDead) != wantDead) {
			continue
		}
		if wantHeld && (s.Status != workflows.StatusHeld || !strings.Contains(req.GetQuery(), `OriginalQueue = `+visibility.Literal(s.Message.OriginalQueue))) {
			continue
		}
		fields := map[string]*commonpb.Payload{
			"RetryStatus": p(string(s.Status)), "OriginalQueue": p(s.Message.OriginalQueue),
			"RetryCount": p(int64(s.RetryCount)), "ErrorCategory": p(s.Category),
		}
		if !s.NextRetryAt.IsZero() {
			fields["NextRetryTime"] = p(s.NextRetryAt)
		}
		if !s.DeadAt.IsZero() {
			fields["DeadAt"] = p(s.DeadAt)
		}
		if s.Message.EventType != "" {
			fields["EventType"] = p(s.Message.EventType)
		}
		if s.Service != "" {
			fields["ConsumerService"] = p(s.Service)
		}
		if s.Status == workflows.StatusDead {
			fields["DeadLetterIds"] = p([]string{s.DeadLetterID(), message.DLQUUID(s.DeadLetterID())})
		}
		started := t0
		if !s.FirstFailureAt.IsZero() {
			started = s.FirstFailureAt
		}
		info := &workflowpb.WorkflowExecutionInfo{
			Execution:        &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: fields},
			StartTime:        timestamppb.New(started), ExecutionTime: f.executionTime(id),
		}
		if f.closed[id] {
			info.CloseTime = timestamppb.New(s.LastFailureAt)
		}
		out = append(out, info)
	}
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: out}, nil
}

func (f *fakeTemporal) CountWorkflow(ctx context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	l, _ := f.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: req.GetQuery()})
	return &workflowservice.CountWorkflowExecutionsResponse{Count: int64(len(l.Executions))}, nil
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.jobs {
		if j.opts.ID == id { // a job it was asked to start: running, no worker to answer queries
			m := map[string]*commonpb.Payload{}
			for k, v := range j.opts.Memo {
				pl, perr := converter.GetDefaultDataConverter().ToPayload(v)
				if perr != nil {
					return nil, perr
				}
				m[k] = pl
			}
			return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
				Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
				Type:      &commonpb.WorkflowType{Name: jobs.WorkflowName}, Memo: &commonpb.Memo{Fields: m},
				Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, StartTime: timestamppb.New(t0), TaskQueue: "tq",
			}}, nil
		}
	}
	if b, ok := f.breakers[id]; ok {
		return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
			Type:      &commonpb.WorkflowType{Name: workflows.BreakerWorkflowName}, SearchAttributes: breakerAttrs(b),
			Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, StartTime: timestamppb.New(t0), TaskQueue: "tq",
		}}, nil
	}
	s, ok := f.wfs[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	status, _ := converter.GetDefaultDataConverter().ToPayload(string(s.Status))
	st := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if f.closed[id] {
		st = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
		Type:      &commonpb.WorkflowType{Name: workflows.RetryWorkflowName},
		Status:    st, StartTime: timestamppb.New(t0), ExecutionTime: f.executionTime(id), TaskQueue: "tq",
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{workflows.SAStatus.GetName(): status}},
	}, ExecutionConfig: &workflowpb.WorkflowExecutionConfig{TaskQueue: &taskqueuepb.TaskQueue{Name: "tq"}}}, nil
}

// executionTime is when the run's first task is due: a minute after the start for a run in
// its start delay (the API's clock says t0), at the start otherwise.
func (f *fakeTemporal) executionTime(id string) *timestamppb.Timestamp {
	if f.delayed[id] != nil {
		return timestamppb.New(t0.Add(time.Minute))
	}
	return timestamppb.New(t0)
}

type encoded struct{ b []byte }

func (e encoded) HasValue() bool          { return true }
func (e encoded) Get(v interface{}) error { return json.Unmarshal(e.b, v) }

func (f *fakeTemporal) QueryWorkflow(_ context.Context, id, _, _ string, _ ...interface{}) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.breakers[id]; ok {
		j, err := json.Marshal(b)
		return encoded{j}, err
	}
	if p, ok := f.jobProgress[id]; ok {
		if f.queryFails[id] > 0 {
			f.queryFails[id]--
			return nil, context.DeadlineExceeded
		}
		j, err := json.Marshal(p)
		return encoded{j}, err
	}
	s, ok := f.wfs[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	if f.delayed[id] != nil {
		return nil, serviceerror.NewWorkflowNotReady("Workflow task is not scheduled yet.")
	}
	if f.queryFails[id] > 0 {
		f.queryFails[id]--
		return nil, context.DeadlineExceeded
	}
	if f.onQuery != nil {
		f.onQuery(s)
	}
	b, err := json.Marshal(s)
	return encoded{b}, err
}

func (f *fakeTemporal) GetWorkflowHistory(_ context.Context, id, _ string, _ bool, filter enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.jobs {
		if j.opts.ID == id { // a job's run starts with its input
			in, _ := converter.GetDefaultDataConverter().ToPayloads(j.in)
			return &events{evs: []*historypb.HistoryEvent{{EventId: 1, Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
				WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: in}}}}}
		}
	}
	if filter == enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT {
		res, ok := f.results[id]
		if !ok {
			return &events{}
		}
		pl, _ := converter.GetDefaultDataConverter().ToPayloads(res)
		return &events{evs: []*historypb.HistoryEvent{{EventId: 9, Attributes: &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{
			WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{Result: pl}}}}}
	}
	return &events{evs: f.delayed[id]}
}

// events is a history iterator over a slice.
type events struct{ evs []*historypb.HistoryEvent }

func (e *events) HasNext() bool { return len(e.evs) > 0 }

func (e *events) Next() (*historypb.HistoryEvent, error) {
	ev := e.evs[0]
	e.evs = e.evs[1:]
	return ev, nil
}

func (f *fakeTemporal) SignalWorkflow(_ context.Context, id, _, signal string, arg interface{}) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.wfs[id]
	if !ok || f.closed[id] {
		return serviceerror.NewNotFound("workflow not found")
	}
	a := arg.(workflows.OperatorAction)
	s.Events = append(s.Events, workflows.Event{Kind: signal, Actor: a.Actor, Detail: a.Reason})
	switch signal {
	case workflows.SignalRetryNow:
		if s.Status == workflows.StatusDead {
			s.Resets++
		}
		s.Status, s.DeadAt = workflows.StatusRepublishing, time.Time{}
	case workflows.SignalSkip:
		s.Status, s.DeadAt = workflows.StatusDead, time.Now()
	case workflows.SignalResolve:
		s.Status = workflows.StatusResolved
	case workflows.SignalDiscard:
		s.Status = workflows.StatusDiscarded
	}
	if signal == workflows.SignalRetryNow && f.onRetry != nil {
		f.onRetry(s)
	}
	return nil
}

// UpdateWorkflow applies an operator update the way RetryWorkflow does: the validator asks the
// workflow's table, and the result is the state after the action.
func (f *fakeTemporal) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if o.UpdateName == workflows.UpdateBreakerPause || o.UpdateName == workflows.UpdateBreakerResume {
		return f.breakerUpdate(o)
	}
	if o.UpdateName == workflows.UpdateEditRetry || o.UpdateName == workflows.UpdateSnooze {
		return f.itemUpdate(o)
	}
	signal := ""
	for _, la := range workflows.LegalActions {
		if la.Update == o.UpdateName {
			signal = la.Signal
		}
	}
	if signal == "" {
		return nil, fmt.Errorf("no update %q", o.UpdateName)
	}
	f.mu.Lock()
	s, ok := f.wfs[o.WorkflowID]
	var why string
	if ok && !f.closed[o.WorkflowID] {
		why = workflows.ActionRefusal(signal, s)
	}
	f.mu.Unlock()
	if why != "" {
		return &fakeUpdate{id: o.WorkflowID, err: temporal.NewNonRetryableApplicationError(why, workflows.ErrTypeIllegalAction, nil)}, nil
	}
	if err := f.SignalWorkflow(ctx, o.WorkflowID, "", signal, o.Args[0]); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fakeUpdate{id: o.WorkflowID, state: *f.wfs[o.WorkflowID]}, nil
}

// fakeUpdate is a completed update: its result is a message's state, or a breaker's.
type fakeUpdate struct {
	id      string
	state   workflows.State
	breaker workflows.BreakerState
	err     error
}

func (u *fakeUpdate) WorkflowID() string { return u.id }
func (u *fakeUpdate) RunID() string      { return "" }
func (u *fakeUpdate) UpdateID() string   { return "" }
func (u *fakeUpdate) Get(_ context.Context, v interface{}) error {
	if u.err != nil {
		return u.err
	}
	switch v := v.(type) {
	case *workflows.BreakerState:
		*v = u.breaker
	default:
		*v.(*workflows.State) = u.state
	}
	return nil
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func item(queue, id string, status workflows.Status, at time.Time, tenant string) workflows.State {
	s := workflows.State{WorkflowID: message.WorkflowID(queue, id), Status: status, TenantID: tenant, Category: "transient",
		Message:  message.Message{MessageID: id, OriginalQueue: queue},
		Attempts: []message.Attempt{{Attempt: 1, Error: "503 from " + id}}}
	s.Policy.MaxRetries = 3
	if status == workflows.StatusDead {
		s.DeadAt = at
	} else if !at.IsZero() {
		s.NextRetryAt = at
	}
	return s
}

// secrets are the test tokens by name.
var secrets = map[string]string{"v": "viewer-token-0123456789", "o": "operator-token-012345", "a": "admin-token-0123456789", "acme": "acme-token-0123456789"}

type harness struct {
	t    *testing.T
	fake *fakeTemporal
	srv  http.Handler
	// log holds the API's log lines (JSON), the audit lines among them.
	log *bytes.Buffer
}

func newHarness(t *testing.T, states ...workflows.State) *harness {
	return newHarnessUI(t, "", states...)
}

// newHarnessUI is newHarness with the Temporal Web UI at ui.
func newHarnessUI(t *testing.T, ui string, states ...workflows.State) *harness {
	return newHarnessWith(t, func(c *APIConfig) { c.WebUIURL = ui }, states...)
}

// newHarnessWith is newHarness with the configuration changed by with.
func newHarnessWith(t *testing.T, with func(*APIConfig), states ...workflows.State) *harness {
	tokens, err := ParseTokens("test", "v:viewer=viewer-token-0123456789,o:operator=operator-token-012345,a:admin=admin-token-0123456789,acme:operator:acme=acme-token-0123456789")
	require.NoError(t, err)
	auth, err := NewAuth(tokens)
	require.NoError(t, err)
	fake := newFake(states...)
	var log bytes.Buffer
	cfg := APIConfig{Client: fake, Auth: auth, TaskQueue: "tq", ActionWait: time.Second, ReplayRate: 1000,
		Logger: slog.New(slog.NewJSONHandler(&log, nil)), Now: func() time.Time { return t0 },
		BreakerSettings: func(queue string) policy.Breaker {
			return policy.Breaker{Cooldown: time.Duration(len(queue)) * time.Second}
		}}
	with(&cfg)
	api, err := NewAPI(cfg)
	require.NoError(t, err)
	api.settleEvery = 5 * time.Millisecond
	mux := Handler(prometheus.NewRegistry(), nil, nil)
	api.Register(mux)
	return &harness{t: t, fake: fake, srv: mux, log: &log}
}

func (h *harness) do(token, method, path, body string) (int, map[string]any) {
	h.t.Helper()
	return h.doWithHeader(token, method, path, body)
}

// doWithHeader is do with extra request headers, as name, value pairs.
func (h *harness) doWithHeader(token, method, path, body string, header ...string) (int, map[string]any) {
	h.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+secrets[token])
	}
	if mutating(method) {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	checkAnswer(h.t, method, path, rec)
	var out map[string]any
	require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out), "%s %s: %s", method, path, rec.Body.String())
	return rec.Code, out
}

func ids(out map[string]any) []string {
	var r []string
	for _, it := range out["items"].([]any) {
		r = append(r, it.(map[string]any)["id"].(string))
	}
	return r
}

func TestRetryQueueSortedAndPaged(t *testing.T) {
	h := newHarness(t,
		item("orders", "c", workflows.StatusScheduled, t0.Add(3*time.Second), ""),
		item("orders", "a", workflows.StatusScheduled, t0.Add(1*time.Second), ""),
		item("orders", "now", workflows.StatusAwaitingOutcome, time.Time{}, ""),
		item("orders", "b", workflows.StatusScheduled, t0.Add(2*time.Second), ""),
		item("orders", "b2", workflows.StatusScheduled, t0.Add(2*time.Second), ""),
		item("orders", "dead", workflows.StatusDead, t0, ""),
	)
	var got []string
	token := ""
	for page := 0; page < 5; page++ {
		code, out := h.do("v", "GET", "/api/retry-queue?page_size=2&next_page_token="+token, "")
		require.Equal(t, 200, code, out)
		assert.EqualValues(t, 5, out["total"])
		got = append(got, ids(out)...)
		token, _ = out["next_page_token"].(string)
		if token == "" {
			break
		}
	}
	assert.Equal(t, []string{"retry/orders/a", "retry/orders/b", "retry/orders/b2", "retry/orders/c", "retry/orders/now"}, got,
		"soonest first, ties by id, items without a next retry last")

	code, out := h.do("v", "GET", "/api/retry-queue?page_size=1", "")
	require.Equal(t, 200, code)
	first := out["items"].([]any)[0].(map[string]any)
	assert.Equal(t, "503 from a", first["last_error"])
	assert.EqualValues(t, 3, first["max_retries"])
	assert.Equal(t, "a", first["message_id"])
}

func TestDeadLettersNewestFirst(t *testing.T) {
	h := newHarness(t,
		item("orders", "old", workflows.StatusDead, t0.Add(-time.Hour), ""),
		item("orders", "new", workflows.StatusDead, t0, ""),
		item("orders", "waiting", workflows.StatusScheduled, t0, ""),
	)
	code, out := h.do("v", "GET", "/api/dead-letters", "")
	require.Equal(t, 200, code)
	assert.Equal(t, []string{"retry/orders/new", "retry/orders/old"}, ids(out))
}

func TestMessageRoutesTakeSlashes(t *testing.T) {
	h := newHarness(t, item("orders.eu", "m/1", workflows.StatusScheduled, t0, ""))
	for _, path := range []string{"/api/messages/retry%2Forders.eu%2Fm%2F1", "/api/messages/retry/orders.eu/m/1", "/api/messages/retry/orders.eu/m%2F1"} {
		code, out := h.do("v", "GET", path, "")
		require.Equal(t, 200, code, path)
		assert.Equal(t, "retry/orders.eu/m/1", out["id"])
		assert.Equal(t, "running", out["workflow"].(map[string]any)["status"])
	}
	code, out := h.do("o", "POST", "/api/messages/retry%2Forders.eu%2Fm%2F1/skip", `{"reason":"not today"}`)
	require.Equal(t, 200, code, out)
	assert.Equal(t, true, out["applied"])
	assert.Equal(t, "dead", out["state"].(map[string]any)["status"])
	code, out = h.do("o", "POST", "/api/messages/retry/orders.eu/m/1/retry", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, "republishing", out["state"].(map[string]any)["status"])
	ev := h.fake.wfs["retry/orders.eu/m/1"].Events
	assert.Equal(t, workflows.Event{Kind: "skip", Actor: "o", Detail: "not today"}, ev[0], "actor and reason travel in the signal")
}

func TestRefusals(t *testing.T) {
	h := newHarness(t,
		item("orders", "s", workflows.StatusScheduled, t0, ""),
		item("orders", "d", workflows.StatusDead, t0, ""),
		item("orders", "acme", workflows.StatusDead, t0, "acme"),
	)
	for _, tt := range []struct {
		token, method, path, body string
		status                    int
		contains                  string
	}{
		{"", "GET", "/api/retry-queue", "", 401, "bearer token"},
		{"v", "POST", "/api/messages/retry%2Forders%2Fd/retry", "", 403, "needs operator"},
		{"o", "POST", "/api/dead-letters/purge", `{"dry_run":true}`, 403, "needs admin"},
		{"acme", "POST", "/api/messages/retry%2Forders%2Fd/retry", "", 403, "another tenant"},
		{"acme", "GET", "/api/dead-letters?tenant=globex", "", 403, "scoped to tenant"},
		{"o", "POST", "/api/messages/retry%2Forders%2Fnope/retry", "", 404, "no message"},
		{"v", "GET", "/api/messages/retry%2Forders%2Fnope", "", 404, "no message"},
		{"o", "POST", "/api/messages/retry%2Forders%2Fs/resolve", "", 409, "is scheduled: resolve is allowed only while dead"},
		{"o", "POST", "/api/messages/retry%2Forders%2Fd/skip", "", 409, "is dead"},
		{"o", "POST", "/api/messages/retry%2Forders%2Fs/retry", "{bad", 400, "not the JSON"},
		{"o", "POST", "/api/messages/retry%2Forders%2Fs/retry", `{"why":"x"}`, 400, "unknown field"},
		{"o", "POST", "/api/messages/retry%2Forders%2Fs/explode", "", 404, "unknown action"},
		{"o", "POST", "/api/retry-queue/bulk-retry", `{"ids":[]}`, 400, "ids is empty"},
		{"o", "POST", "/api/retry-queue/bulk-retry", `{"ids":["a","a"]}`, 400, "twice"},
		{"o", "POST", "/api/dead-letters/replay", `{"older_than":"soon"}`, 400, "older_than"},
		{"v", "GET", "/api/retry-queue?status=dead", "", 400, "status"},
		{"v", "GET", "/api/nothing", "", 404, "no route GET /api/nothing (GET /api/openapi.json describes the routes)"},
	} {
		code, out := h.do(tt.token, tt.method, tt.path, tt.body)
		assert.Equal(t, tt.status, code, "%s %s: %v", tt.method, tt.path, out)
		assert.Contains(t, out["error"], tt.contains, "%s %s", tt.method, tt.path)
	}
	_, out := h.do("o", "POST", "/api/messages/retry%2Forders%2Fs/resolve", "")
	assert.Equal(t, "scheduled", out["current_status"])

	code, out := h.do("acme", "GET", "/api/dead-letters", "")
	require.Equal(t, 200, code)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `TenantId = 'acme'`, "a scoped token's lists are filtered")
	_ = out
}

func TestBulkAndReplay(t *testing.T) {
	h := newHarness(t,
		item("orders", "s1", workflows.StatusScheduled, t0, ""),
		item("orders", "d1", workflows.StatusDead, t0.Add(-2*time.Hour), ""),
		item("orders", "d2", workflows.StatusDead, t0.Add(-3*time.Hour), ""),
		item("orders", "d3", workflows.StatusDead, t0.Add(-4*time.Hour), ""),
	)
	code, out := h.do("o", "POST", "/api/dead-letters/bulk-retry?wait=true", `{"ids":["retry/orders/d1","retry/orders/s1","retry/orders/zz"],"reason":"fixed"}`)
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 1, out["succeeded"])
	assert.EqualValues(t, 2, out["failed"])
	errs := out["errors"].(map[string]any)
	assert.Contains(t, errs["retry/orders/s1"], "not dead")
	assert.Contains(t, errs["retry/orders/zz"], "no message")

	// d1 left dead; the fake does not evaluate DeadAt, so d2 and d3 match.
	code, out = h.do("o", "POST", "/api/dead-letters/replay", `{"queue":"orders","older_than":"1h","dry_run":true}`)
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 2, out["count"])
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `DeadAt < '2026-03-01T11:00:00Z'`)
	code, out = h.do("o", "POST", "/api/dead-letters/replay", `{"queue":"orders","older_than":"1h"}`)
	require.Equal(t, 202, code, out)
	job := h.runJob()
	assert.EqualValues(t, 2, job.Total)
	assert.Equal(t, 2, job.Done)
	assert.Equal(t, map[string]string{"queue": "orders", "older_than": "1h"}, job.Filter)
	code, out = h.do("a", "POST", "/api/dead-letters/purge", `{"dry_run":true}`)
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 0, out["count"])
}

// A run started with its first delay as the start delay cannot answer a query before its
// first task; the API reads its state from its start instead, whether the report came in the
// input (eager mode) or with the start's signal (signal-with-start).
func TestDelayedRunsShowTheirStateFromTheStart(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	payloads := func(v any) *commonpb.Payloads { p, err := dc.ToPayloads(v); require.NoError(t, err); return p }
	pol := policy.Policy{Name: "fixed", Backoff: policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{time.Minute}},
		Jitter: policy.Jitter{Mode: policy.NoJitter}, MaxRetries: 3, QuietWindow: time.Second}
	rep := func(id string) message.FailureReport {
		return message.FailureReport{Message: message.Message{MessageID: id, OriginalQueue: "orders", TenantID: "acme"},
			Failure: policy.Failure{Reason: "503 from " + id, HTTPStatus: 503}, Policy: pol}
	}
	started := func(in workflows.Input) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: 1, EventTime: timestamppb.New(t0),
			Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
				Input: payloads(in)}}}
	}
	inInput, signalled := rep("in-input"), rep("signalled")
	h := newHarness(t, item("orders", "in-input", workflows.StatusScheduled, t0.Add(time.Minute), "acme"),
		item("orders", "signalled", workflows.StatusScheduled, t0.Add(time.Minute), "acme"))
	h.fake.delayed = map[string][]*historypb.HistoryEvent{
		"retry/orders/in-input": {started(workflows.Input{Report: &inInput, StartDelay: time.Minute})},
		"retry/orders/signalled": {started(workflows.Input{StartDelay: time.Minute}),
			{EventId: 2, EventTime: timestamppb.New(t0), Attributes: &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{
				WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{
					SignalName: workflows.SignalFailureReport, Input: payloads(signalled)}}}},
	}
	for _, id := range []string{"in-input", "signalled"} {
		code, out := h.do("acme", "GET", "/api/messages/retry/orders/"+id, "")
		require.Equal(t, 200, code, out)
		st := out["state"].(map[string]any)
		assert.Equal(t, "scheduled", st["status"], id)
		assert.Equal(t, t0.Add(time.Minute).Format(time.RFC3339), st["next_retry_at"], id)
		assert.Equal(t, "503 from "+id, st["attempts"].([]any)[0].(map[string]any)["error"], id)
		assert.Equal(t, t0.Add(time.Minute).Format(time.RFC3339), out["workflow"].(map[string]any)["start_delay_until"], id)
	}
	// Temporal would hold a signal until the delay ends: the action is refused, saying so.
	code, out := h.do("o", "POST", "/api/messages/retry/orders/in-input/skip", `{"reason":"not today"}`)
	assert.Equal(t, 409, code, out)
	assert.Contains(t, out["error"], "start delay")
	code, out = h.do("v", "GET", "/api/retry-queue", "")
	require.Equal(t, 200, code, out)
	for _, it := range out["items"].([]any) {
		row := it.(map[string]any)
		assert.NotNil(t, row["start_delay_until"], row["id"])
		assert.Nil(t, row["detail_error"], row["id"])
		assert.Equal(t, "503 from "+row["message_id"].(string), row["last_error"])
	}
}

func TestWebUILinks(t *testing.T) {
	h := newHarnessUI(t, "http://ui.test:8233/", item("orders", "m/1", workflows.StatusDead, t0, ""))
	code, out := h.do("v", "GET", "/api/dead-letters", "")
	require.Equal(t, 200, code, out)
	row := out["items"].([]any)[0].(map[string]any)
	assert.Equal(t, "http://ui.test:8233/namespaces/default/workflows/retry%2Forders%2Fm%2F1/run/history", row["web_ui_url"])
	code, out = h.do("v", "GET", "/api/messages/retry%2Forders%2Fm%2F1", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, "http://ui.test:8233/namespaces/default/workflows/retry%2Forders%2Fm%2F1/run/history", out["web_ui_url"])

	h = newHarness(t, item("orders", "m", workflows.StatusDead, t0, ""))
	_, out = h.do("v", "GET", "/api/dead-letters", "")
	assert.Nil(t, out["items"].([]any)[0].(map[string]any)["web_ui_url"], "no UI configured: no link")
}

func TestEventTypeColumnAndFilter(t *testing.T) {
	typed := item("orders", "t", workflows.StatusScheduled, t0.Add(time.Second), "")
	typed.Message.EventType = "order.created"
	// A run whose search attribute is not set yet still shows the type from its state.
	fromState := item("orders", "d", workflows.StatusDead, t0, "")
	fromState.Message.EventType = "order.paid"
	h := newHarness(t, typed, fromState)
	h.fake.wfs[fromState.WorkflowID].Message.EventType = "order.paid"
	code, out := h.do("v", "GET", "/api/retry-queue?event_type=order.created", "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `EventType = 'order.created'`)
	assert.Equal(t, "order.created", out["items"].([]any)[0].(map[string]any)["event_type"])
	code, out = h.do("v", "GET", "/api/dead-letters?event_type=order.paid", "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `EventType = 'order.paid'`)
	assert.Equal(t, "order.paid", out["items"].([]any)[0].(map[string]any)["event_type"])
	code, out = h.do("v", "GET", "/api/dead-letters?event_type="+url.QueryEscape(`x" OR "1"="1`), "")
	assert.Equal(t, 400, code, out)
	assert.Contains(t, out["error"], "event_type")
}

func TestDeadLettersSortByCreatedAt(t *testing.T) {
	// a died last but failed first; b died first but failed last.
	a := item("orders", "a", workflows.StatusDead, t0, "")
	a.FirstFailureAt = t0.Add(-3 * time.Hour)
	b := item("orders", "b", workflows.StatusDead, t0.Add(-time.Hour), "")
	b.FirstFailureAt = t0.Add(-2 * time.Hour)
	c := item("orders", "c", workflows.StatusDead, t0.Add(-2*time.Hour), "")
	c.FirstFailureAt = t0.Add(-time.Hour)
	h := newHarness(t, a, b, c)
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"", []string{"retry/orders/a", "retry/orders/b", "retry/orders/c"}},
		{"?sort=created_at", []string{"retry/orders/c", "retry/orders/b", "retry/orders/a"}},
		{"?sort=created_at&order=asc", []string{"retry/orders/a", "retry/orders/b", "retry/orders/c"}},
		{"?sort=dead_at&order=asc", []string{"retry/orders/c", "retry/orders/b", "retry/orders/a"}},
	} {
		code, out := h.do("v", "GET", "/api/dead-letters"+tt.query, "")
		require.Equal(t, 200, code, out)
		assert.Equal(t, tt.want, ids(out), tt.query)
		// Paged one at a time, the keyset follows the same order.
		var got []string
		token := ""
		sep := "?"
		if tt.query != "" {
			sep = "&"
		}
		for range 5 {
			_, out := h.do("v", "GET", "/api/dead-letters"+tt.query+sep+"page_size=1&next_page_token="+token, "")
			got = append(got, ids(out)...)
			if token, _ = out["next_page_token"].(string); token == "" {
				break
			}
		}
		assert.Equal(t, tt.want, got, "paged %s", tt.query)
	}
	code, out := h.do("v", "GET", "/api/dead-letters?sort=created_at", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, t0.Add(-time.Hour).Format(time.RFC3339), out["items"].([]any)[0].(map[string]any)["started_at"])
	code, out = h.do("v", "GET", "/api/dead-letters?sort=age", "")
	assert.Equal(t, 400, code, out)
}

func TestDelivered(t *testing.T) {
	del := func(id string, closedAt time.Time, retry, seq int) workflows.State {
		s := item("orders", id, workflows.StatusDelivered, time.Time{}, "")
		s.RetryCount, s.Sequence, s.LastFailureAt = retry, seq, closedAt
		return s
	}
	h := newHarnessUI(t, "http://ui.test", del("old", t0.Add(-2*time.Hour), 1, 1), del("new", t0.Add(-time.Minute), 2, 2),
		del("noresult", t0.Add(-time.Hour), 3, 3), item("orders", "live", workflows.StatusScheduled, t0, ""))
	for id := range h.fake.wfs {
		h.fake.closed[id] = id != "retry/orders/live"
	}
	h.fake.results = map[string]workflows.Result{
		"retry/orders/old": {Status: workflows.StatusDelivered, RetryCount: 1, Sequence: 1},
		"retry/orders/new": {Status: workflows.StatusDelivered, RetryCount: 2, Sequence: 2},
	}
	code, out := h.do("v", "GET", "/api/delivered", "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1],
		`ExecutionStatus = 'Completed' AND TaskQueue = 'tq' AND RetryStatus = 'delivered' AND CloseTime >= '2026-02-28T12:00:00Z'`)
	assert.Equal(t, []string{"retry/orders/new", "retry/orders/noresult", "retry/orders/old"}, ids(out), "newest first")
	rows := out["items"].([]any)
	first := rows[0].(map[string]any)
	assert.EqualValues(t, 2, first["succeeded_on_retry"])
	assert.EqualValues(t, 3, first["deliveries"], "the original delivery and two republishes")
	assert.Equal(t, t0.Add(-time.Minute).Format(time.RFC3339), first["closed_at"])
	assert.Equal(t, "http://ui.test/namespaces/default/workflows/retry%2Forders%2Fnew/run/history", first["web_ui_url"])
	noResult := rows[1].(map[string]any)
	assert.EqualValues(t, 3, noResult["succeeded_on_retry"], "from the RetryCount search attribute")
	assert.Contains(t, noResult["detail_error"], "no completion event")

	code, _ = h.do("v", "GET", "/api/delivered?since=7d&queue=orders&event_type=order.created", "")
	require.Equal(t, 200, code)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `EventType = 'order.created' AND CloseTime >= '2026-02-22T12:00:00Z'`)
	for _, bad := range []string{"?since=forever", "?since=100d", "?status=dead"} {
		code, out := h.do("v", "GET", "/api/delivered"+bad, "")
		assert.Equal(t, 400, code, bad)
		assert.NotEmpty(t, out["error"], bad)
	}
	code, out = h.do("", "GET", "/api/delivered", "")
	assert.Equal(t, 401, code, out)
}

func TestRetryMatching(t *testing.T) {
	a := item("orders", "a", workflows.StatusScheduled, t0.Add(time.Second), "")
	a.Message.EventType = "order.created"
	b := item("orders", "b", workflows.StatusScheduled, t0.Add(2*time.Second), "acme")
	h := newHarness(t, a, b, item("orders", "dead", workflows.StatusDead, t0, ""))

	code, out := h.do("o", "POST", "/api/retry-queue/retry-matching", `{"queue":"orders","event_type":"order.created","dry_run":true}`)
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `RetryStatus IN ('scheduled', 'held') AND OriginalQueue = 'orders' AND EventType = 'order.created'`)
	assert.EqualValues(t, 2, out["count"], "the fake does not evaluate the query: both scheduled items")
	assert.Equal(t, true, out["dry_run"])
	assert.Equal(t, workflows.StatusScheduled, h.fake.wfs["retry/orders/a"].Status, "a dry run changes nothing")

	// A tenant's token retries its own only (the query is scoped; the fake lists both, and the
	// other tenant's item is refused by the per-item check).
	code, out = h.do("acme", "POST", "/api/retry-queue/retry-matching", `{"reason":"smtp back"}`)
	require.Equal(t, 202, code, out)
	job := h.runJob()
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `TenantId = 'acme'`)
	assert.Equal(t, 1, job.Done)
	assert.Equal(t, 1, job.Failed)
	assert.Contains(t, job.Errors["retry/orders/a"], "another tenant")
	assert.Equal(t, workflows.StatusRepublishing, h.fake.wfs["retry/orders/b"].Status)
	assert.Equal(t, workflows.Event{Kind: workflows.SignalRetryNow, Actor: "acme", Detail: "smtp back"}, h.fake.wfs["retry/orders/b"].Events[0])

	// Audited like replay: who, what, the filter, the counts.
	var audit map[string]any
	lines := strings.Split(strings.TrimSpace(h.log.String()), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &audit))
	assert.Equal(t, "operator action", audit["msg"])
	assert.Equal(t, "retry-matching", audit["action"])
	assert.Equal(t, "acme", audit["actor"])
	assert.Equal(t, "smtp back", audit["reason"])
	assert.Equal(t, "acme", audit["tenant_filter"])
	assert.Equal(t, job.ID, audit["job"])
	assert.Equal(t, "started", audit["result"])

	// b is republishing now: an illegal transition is refused, counted as failed.
	code, out = h.do("o", "POST", "/api/retry-queue/retry-matching", `{}`)
	require.Equal(t, 202, code, out)
	job = h.runJob()
	assert.Equal(t, 1, job.Done)
	assert.Equal(t, 1, job.Failed)
	assert.Contains(t, job.Errors["retry/orders/b"], "is republishing")

	for _, tt := range []struct {
		token, body string
		status      int
		contains    string
	}{
		{"v", `{}`, 403, "needs operator"},
		{"o", ``, 400, "body is empty"},
		{"o", `{"older_than":"1h"}`, 400, "dead letters only"},
		{"o", `{"status":"dead"}`, 400, "unknown field"},
		{"o", `{"event_type":"a\\b"}`, 400, "event_type"},
		{"acme", `{"tenant":"globex"}`, 403, "scoped to tenant"},
	} {
		code, out := h.do(tt.token, "POST", "/api/retry-queue/retry-matching", tt.body)
		assert.Equal(t, tt.status, code, "%s: %v", tt.body, out)
		assert.Contains(t, out["error"], tt.contains, tt.body)
	}
}

func TestParkedPoisonIsADeadLetter(t *testing.T) {
	poison := item("retry.scheduled", "bad-1", workflows.StatusDead, t0, "")
	poison.DeadReason, poison.DeadDetail = message.PoisonKindPoison, "body is not a JSON object"
	poison.Poison = &message.Poison{Kind: message.PoisonKindPoison, Reason: "body is not a JSON object", Size: 4, IngressQueue: "retry.scheduled"}
	big := item("retry.scheduled", "big-1", workflows.StatusDead, t0.Add(time.Second), "")
	big.DeadReason = message.PoisonKindOversize
	big.Message.Payload = make([]byte, message.MaxPoisonPayloadBytes)
	big.Poison = &message.Poison{Kind: message.PoisonKindOversize, Size: 1 << 20, Truncated: true, IngressQueue: "retry.scheduled", DLQID: "oversize-1"}
	h := newHarness(t, poison, big)

	code, out := h.do("v", "GET", "/api/dead-letters", "")
	require.Equal(t, 200, code, "%v", out)
	reasons := map[string]any{}
	for _, it := range out["items"].([]any) {
		row := it.(map[string]any)
		reasons[row["id"].(string)] = row["dead_reason"]
	}
	assert.Equal(t, map[string]any{big.WorkflowID: "oversize", poison.WorkflowID: "poison"}, reasons)

	// A truncated body is not retried from the workflow: 409, nothing signalled.
	code, out = h.do("o", "POST", "/api/messages/"+url.PathEscape(big.WorkflowID)+"/retry", "")
	assert.Equal(t, 409, code, "%v", out)
	assert.Contains(t, out["error"], "replay the envelope oversize-1")
	assert.Empty(t, h.fake.wfs[big.WorkflowID].Events)

	// A whole one is retried like any dead letter; resolve and discard work on both.
	code, out = h.do("o", "POST", "/api/messages/"+url.PathEscape(poison.WorkflowID)+"/retry", "")
	assert.Equal(t, 200, code, "%v", out)
	code, out = h.do("o", "POST", "/api/messages/"+url.PathEscape(big.WorkflowID)+"/discard", "")
	assert.Equal(t, 200, code, "%v", out)
}

// The API logs its audit lines to the logger it is given, never to the process-wide default.
func TestNewAPIRequiresALogger(t *testing.T) {
	_, err := NewAPI(APIConfig{Client: newFake(), Auth: Disabled()})
	require.ErrorContains(t, err, "Logger")
	api, err := NewAPI(APIConfig{Client: newFake(), Auth: Disabled(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxScan, api.cfg.MaxScan)
	assert.Equal(t, workflows.DefaultTaskQueue, api.cfg.TaskQueue)
	assert.Equal(t, client.DefaultNamespace, api.cfg.Namespace)
}

// With bridge deferrals on, an id Temporal does not know may be a new message a bridge is waiting
// out: the answer says so and when to ask again.
func TestNotFoundNamesTheBridgeHold(t *testing.T) {
	a := &API{}
	assert.EqualError(t, a.notFound("retry/q/1"), `no message with id "retry/q/1"`)
	a.cfg.BridgeDeferMax = 3 * time.Second
	err := a.notFound("retry/q/1")
	var ae *apiError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 404, ae.Status)
	assert.Contains(t, err.Error(), "a bridge is waiting out (BRIDGE_DEFER_MAX 3s)")
	assert.Contains(t, err.Error(), "ask again after 3s")
}

// countingUpdates is the fake Temporal with its Updates counted: while the engine lags, an
// Update would wait for the run's next workflow task, so none may be sent.
type countingUpdates struct {
	*fakeTemporal
	updates *int
}

func (c countingUpdates) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	*c.updates++
	return c.fakeTemporal.UpdateWorkflow(ctx, o)
}

func TestActionsWhileTemporalLagsAreQueuedAsSignals(t *testing.T) {
	lagging, updates := true, 0
	h := newHarnessWith(t, func(c *APIConfig) {
		c.Client = countingUpdates{fakeTemporal: c.Client.(*fakeTemporal), updates: &updates}
		c.Lagging = func() bool { return lagging }
	},
		item("orders", "s", workflows.StatusScheduled, t0, ""),
		item("orders", "d", workflows.StatusDead, t0, ""),
		item("orders", "d2", workflows.StatusDead, t0, ""),
		item("orders", "s2", workflows.StatusScheduled, t0, ""),
	)

	code, out := h.do("o", "POST", "/api/messages/retry%2Forders%2Fs/skip", `{"reason":"storm"}`)
	require.Equal(t, 202, code, out)
	assert.Equal(t, false, out["applied"])
	assert.Equal(t, true, out["queued"])
	assert.Equal(t, "scheduled", out["state"].(map[string]any)["status"], "the state the action was checked against")
	assert.Equal(t, workflows.StatusDead, h.fake.wfs["retry/orders/s"].Status, "the signal reached the run")
	assert.Equal(t, workflows.Event{Kind: "skip", Actor: "o", Detail: "storm"}, h.fake.wfs["retry/orders/s"].Events[0])
	assert.Contains(t, h.log.String(), `"result":"queued"`)

	// A retry's ?wait is not waited: the answer comes at once, without an outcome.
	code, out = h.do("o", "POST", "/api/messages/retry%2Forders%2Fd/retry?wait=20s", "")
	require.Equal(t, 202, code, out)
	assert.Nil(t, out["outcome"])

	code, out = h.do("o", "DELETE", "/api/dead-letters/retry%2Forders%2Fd2", "")
	require.Equal(t, 202, code, out)
	assert.Equal(t, workflows.StatusDiscarded, h.fake.wfs["retry/orders/d2"].Status)

	// What the run would refuse is refused before the signal, as without lag.
	code, out = h.do("o", "POST", "/api/messages/retry%2Forders%2Fs2/resolve", "")
	assert.Equal(t, 409, code, out)

	assert.Zero(t, updates, "no Update while Temporal lags")

	// Once Temporal keeps up, an action is an Update again, answered with the state after it.
	lagging = false
	code, out = h.do("o", "POST", "/api/messages/retry%2Forders%2Fs2/skip", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, true, out["applied"])
	assert.Equal(t, "dead", out["state"].(map[string]any)["status"], "the state after the action")
	assert.Equal(t, 1, updates)
}
