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
			require.Len(t, c.starts, 1)
			assert.Equal(t, tt.want, c.starts[0].ID)
		})
	}
}

func TestReportLooksUpLegacyOnlyWhenTheIDChanged(t *testing.T) {
	c := &legacyClient{}
	r := &Reporter{Client: c, TaskQueue: "tq"}
	require.NoError(t, r.Report(t.Context(), reportFor("orders", "eu/42")))
	assert.Empty(t, c.described, "a queue without '/', '%' or NUL keeps its ID: no look-up")
	assert.Equal(t, "retry/orders/eu/42", c.starts[0].ID)

	require.NoError(t, r.Report(t.Context(), reportFor("orders/eu", "42")))
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
