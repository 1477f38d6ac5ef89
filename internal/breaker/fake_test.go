package breaker

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// signal is one SignalWithStartWorkflow call the fake saw.
type signal struct {
	id, name string
	arg      any
	opts     client.StartWorkflowOptions
	workflow any
	args     []any
}

// fakeSignaller records signals; a queue's workflow ID in fail makes its calls fail.
type fakeSignaller struct {
	mu    sync.Mutex
	calls []signal
	fail  map[string]bool
	// sent, when set, receives every successful call.
	sent chan signal
}

func (f *fakeSignaller) SignalWithStartWorkflow(_ context.Context, id, name string, arg any, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	s := signal{id: id, name: name, arg: arg, opts: opts, workflow: wf, args: args}
	failing := f.fail[id]
	if !failing {
		f.calls = append(f.calls, s)
	}
	f.mu.Unlock()
	if failing {
		return nil, errors.New("temporal unavailable")
	}
	if f.sent != nil {
		f.sent <- s
	}
	return nil, nil
}

func (f *fakeSignaller) take() []signal {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakeSignaller) setFail(id string, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]bool{}
	}
	f.fail[id] = fail
}

// fakeLister answers every query with its pages, in order, chained by page tokens. It
// describes the workflows in described (by ID; NotFound for others); while described is
// nil every describe fails as unavailable.
type fakeLister struct {
	mu        sync.Mutex
	pages     [][]*workflowpb.WorkflowExecutionInfo
	err       error
	queries   []string
	described map[string]*workflowpb.WorkflowExecutionInfo
	describes []string
}

func (f *fakeLister) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes = append(f.describes, id)
	if f.described == nil {
		return nil, serviceerror.NewUnavailable("history unavailable")
	}
	e, ok := f.described[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: e}, nil
}

// describe makes the fake describe es (nil: fail every describe).
func (f *fakeLister) describe(es ...*workflowpb.WorkflowExecutionInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if es == nil {
		f.described = nil
		return
	}
	f.described = map[string]*workflowpb.WorkflowExecutionInfo{}
	for _, e := range es {
		f.described[e.GetExecution().GetWorkflowId()] = e
	}
}

func (f *fakeLister) describedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.describes...)
}

func (f *fakeLister) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, req.GetQuery())
	if f.err != nil {
		return nil, f.err
	}
	page := 0
	if len(req.GetNextPageToken()) > 0 {
		page = int(req.GetNextPageToken()[0])
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	if page < len(f.pages) {
		resp.Executions = f.pages[page]
	}
	if page+1 < len(f.pages) {
		resp.NextPageToken = []byte{byte(page + 1)}
	}
	return resp, nil
}

func (f *fakeLister) set(err error, pages ...[]*workflowpb.WorkflowExecutionInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pages, f.err = pages, err
}

func (f *fakeLister) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries...)
}

// execution is a listed workflow with search attributes (name → value).
func execution(t *testing.T, id string, sa map[string]any) *workflowpb.WorkflowExecutionInfo {
	t.Helper()
	fields := map[string]*commonpb.Payload{}
	for k, v := range sa {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		fields[k] = p
	}
	return &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: id},
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: fields},
	}
}
