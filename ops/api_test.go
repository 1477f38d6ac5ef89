package ops

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"google.golang.org/protobuf/types/known/timestamppb"

	"retry-scheduler/message"
	"retry-scheduler/policy"
	"retry-scheduler/workflows"
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
}

func newFake(states ...workflows.State) *fakeTemporal {
	f := &fakeTemporal{wfs: map[string]*workflows.State{}, closed: map[string]bool{}}
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
	ids := make([]string, 0, len(f.wfs))
	for id := range f.wfs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []*workflowpb.WorkflowExecutionInfo
	for _, id := range ids {
		s := f.wfs[id]
		wantDead := strings.Contains(req.GetQuery(), `RetryStatus = "dead"`)
		if f.closed[id] || (s.Status == workflows.StatusDead) != wantDead {
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
		out = append(out, &workflowpb.WorkflowExecutionInfo{
			Execution:        &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: fields},
			StartTime:        timestamppb.New(t0), ExecutionTime: f.executionTime(id),
		})
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
	if _, ok := f.wfs[id]; !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	st := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if f.closed[id] {
		st = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
		Type:      &commonpb.WorkflowType{Name: workflows.RetryWorkflowName},
		Status:    st, StartTime: timestamppb.New(t0), ExecutionTime: f.executionTime(id), TaskQueue: "tq",
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
	s, ok := f.wfs[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	if f.delayed[id] != nil {
		return nil, serviceerror.NewWorkflowNotReady("Workflow task is not scheduled yet.")
	}
	b, err := json.Marshal(s)
	return encoded{b}, err
}

func (f *fakeTemporal) GetWorkflowHistory(_ context.Context, id, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.mu.Lock()
	defer f.mu.Unlock()
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
		s.Status, s.DeadAt = workflows.StatusRepublishing, time.Time{}
	case workflows.SignalSkip:
		s.Status, s.DeadAt = workflows.StatusDead, time.Now()
	case workflows.SignalResolve:
		s.Status = workflows.StatusResolved
	case workflows.SignalDiscard:
		s.Status = workflows.StatusDiscarded
	}
	return nil
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func item(queue, id string, status workflows.Status, at time.Time, tenant string) workflows.State {
	s := workflows.State{WorkflowID: workflows.WorkflowID(queue, id), Status: status, TenantID: tenant, Category: "transient",
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
}

func newHarness(t *testing.T, states ...workflows.State) *harness {
	tokens, err := ParseTokens("test", "v:viewer=viewer-token-0123456789,o:operator=operator-token-012345,a:admin=admin-token-0123456789,acme:operator:acme=acme-token-0123456789")
	require.NoError(t, err)
	auth, err := NewAuth(tokens)
	require.NoError(t, err)
	fake := newFake(states...)
	api, err := NewAPI(APIConfig{Client: fake, Auth: auth, TaskQueue: "tq", ActionWait: time.Second, ReplayRate: 1000,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return t0 }})
	require.NoError(t, err)
	mux := Handler(prometheus.NewRegistry(), nil, nil)
	api.Register(mux)
	return &harness{t: t, fake: fake, srv: mux}
}

func (h *harness) do(token, method, path, body string) (int, map[string]any) {
	h.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+secrets[token])
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
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
		{"v", "GET", "/api/nothing", "", 404, "no route"},
	} {
		code, out := h.do(tt.token, tt.method, tt.path, tt.body)
		assert.Equal(t, tt.status, code, "%s %s: %v", tt.method, tt.path, out)
		assert.Contains(t, out["error"], tt.contains, "%s %s", tt.method, tt.path)
	}
	_, out := h.do("o", "POST", "/api/messages/retry%2Forders%2Fs/resolve", "")
	assert.Equal(t, "scheduled", out["current_status"])

	code, out := h.do("acme", "GET", "/api/dead-letters", "")
	require.Equal(t, 200, code)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `TenantId = "acme"`, "a scoped token's lists are filtered")
	_ = out
}

func TestBulkAndReplay(t *testing.T) {
	h := newHarness(t,
		item("orders", "s1", workflows.StatusScheduled, t0, ""),
		item("orders", "d1", workflows.StatusDead, t0.Add(-2*time.Hour), ""),
		item("orders", "d2", workflows.StatusDead, t0.Add(-3*time.Hour), ""),
		item("orders", "d3", workflows.StatusDead, t0.Add(-4*time.Hour), ""),
	)
	code, out := h.do("o", "POST", "/api/dead-letters/bulk-retry", `{"ids":["retry/orders/d1","retry/orders/s1","retry/orders/zz"],"reason":"fixed"}`)
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
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `DeadAt < "2026-03-01T11:00:00Z"`)
	code, out = h.do("o", "POST", "/api/dead-letters/replay", `{"queue":"orders","older_than":"1h"}`)
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 2, out["count"])
	assert.EqualValues(t, 2, out["succeeded"])
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
