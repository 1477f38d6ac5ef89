package reporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// legacyClient has one run, under ID, with the given status and search attributes.
type legacyClient struct {
	fakeClient
	id        string
	status    enumspb.WorkflowExecutionStatus
	sa        temporal.SearchAttributes
	described []string
	signalled []string
}

func (f *legacyClient) DescribeWorkflow(_ context.Context, id, _ string) (*client.WorkflowExecutionDescription, error) {
	f.described = append(f.described, id)
	if id != f.id {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &client.WorkflowExecutionDescription{WorkflowExecutionMetadata: client.WorkflowExecutionMetadata{
		Status: f.status, TypedSearchAttributes: f.sa,
	}}, nil
}

// SignalWorkflow reaches the one run when it is running; otherwise there is no run to
// signal (NotFound).
func (f *legacyClient) SignalWorkflow(ctx context.Context, id, runID, name string, arg any) error {
	if id != f.id || f.status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return serviceerror.NewNotFound("workflow not found")
	}
	f.signalled = append(f.signalled, id)
	return f.fakeClient.SignalWorkflow(ctx, id, runID, name, arg)
}

// reportedTo is the workflow each report went to, by start or by signal.
func (f *legacyClient) reportedTo() []string {
	out := append([]string(nil), f.signalled...)
	for _, o := range f.starts {
		out = append(out, o.ID)
	}
	return out
}

func reportFor(queue, id string) message.FailureReport {
	r := firstReport(policy.Default(3, 2*time.Second, time.Minute))
	r.Message.OriginalQueue, r.Message.MessageID = queue, id
	r.RetryCount = 1
	return r
}

func TestReportFindsARunningLegacyWorkflowOfItsMessage(t *testing.T) {
	legacy := message.LegacyWorkflowID("orders/eu", "42")
	require.Equal(t, "retry/orders/eu/42", legacy)
	for _, tt := range []struct {
		name   string
		status enumspb.WorkflowExecutionStatus
		queue  string
		want   string
	}{
		{"running, same queue", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "orders/eu", legacy},
		{"running, another queue's", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "orders", message.WorkflowID("orders/eu", "42")},
		{"completed", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, "orders/eu", message.WorkflowID("orders/eu", "42")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &legacyClient{id: legacy, status: tt.status,
				sa: temporal.NewSearchAttributes(workflows.SAOriginalQueue.ValueSet(tt.queue))}
			require.NoError(t, (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), reportFor("orders/eu", "42")))
			assert.Equal(t, []string{tt.want}, c.reportedTo())
		})
	}
}

func TestReportLooksUpLegacyOnlyWhenTheIDChanged(t *testing.T) {
	c := &legacyClient{}
	r := &Reporter{Client: c, TaskQueue: "tq"}
	// First reports: a later one would also describe its own workflow (its earlier run).
	first := func(queue, id string) message.FailureReport {
		rep := reportFor(queue, id)
		rep.RetryCount = 0
		return rep
	}
	require.NoError(t, r.Report(t.Context(), first("orders", "eu/42")))
	assert.Empty(t, c.described, "a queue without '/', '%' or NUL keeps its ID: no look-up")
	assert.Equal(t, "retry/orders/eu/42", c.starts[0].ID)

	require.NoError(t, r.Report(t.Context(), first("orders/eu", "42")))
	assert.Equal(t, []string{"retry/orders/eu/42"}, c.described)
	assert.Equal(t, "retry/orders%2Feu/42", c.starts[1].ID, "no legacy run: the new ID")
}

func TestReportLegacyLookupErrorIsReturned(t *testing.T) {
	c := &fakeClient{describeErr: serviceerror.NewUnavailable("down")}
	err := (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), reportFor("orders/eu", "42"))
	require.Error(t, err)
	assert.Empty(t, c.starts)
}

func TestPoisonReportIsParkedUnderTheIngress(t *testing.T) {
	r := reportFor("orders", "bad-1")
	r.RetryCount = 0
	r.Poison = &message.Poison{Kind: message.PoisonKindPoison, IngressQueue: "retry.scheduled"}
	legacy := message.LegacyWorkflowID("orders", "bad-1")
	for _, tt := range []struct {
		name   string
		status string
		want   string
	}{
		{"a retried parked run waiting for its outcome", string(workflows.StatusAwaitingOutcome), legacy},
		{"a reported message's run", string(workflows.StatusScheduled), "retry/retry.scheduled/orders/bad-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &legacyClient{id: legacy, status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
				sa: temporal.NewSearchAttributes(workflows.SAOriginalQueue.ValueSet("orders"),
					workflows.SAStatus.ValueSet(tt.status), workflows.SAErrorCategory.ValueSet(string(policy.Unknown)))}
			require.NoError(t, (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), r))
			assert.Equal(t, tt.want, c.starts[0].ID)
		})
	}
}
