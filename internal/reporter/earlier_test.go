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
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// latestClient's workflow has a latest run with status, or none (nil latest); a signal finds
// it only running.
type latestClient struct {
	fakeClient
	latest    *client.WorkflowExecutionDescription
	described int
}

func (f *latestClient) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	f.described++
	if f.describeErr != nil {
		return nil, f.describeErr
	}
	if f.latest == nil {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return f.latest, nil
}

func (f *latestClient) SignalWorkflow(ctx context.Context, id, runID, name string, arg any) error {
	if f.latest == nil || f.latest.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		f.signals++
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	return f.fakeClient.SignalWorkflow(ctx, id, runID, name, arg)
}

func runWith(status enumspb.WorkflowExecutionStatus, runID string) *client.WorkflowExecutionDescription {
	return &client.WorkflowExecutionDescription{WorkflowExecutionMetadata: client.WorkflowExecutionMetadata{
		WorkflowExecution: workflow.Execution{ID: "retry/orders/m-1", RunID: runID}, Status: status,
	}}
}

func laterReport() message.FailureReport {
	r := firstReport(policy.Default(3, 2*time.Second, time.Minute))
	r.RetryCount, r.RetryKey = 1, "m-1:1"
	return r
}

// A report that continues a count goes to the running run as a signal, with nothing looked
// up; with no run running, the new run is handed its earlier run: the latest, closed, read
// from the server's record of the workflow, or none when the workflow has no run at all.
func TestLaterReportHandsTheEarlierRun(t *testing.T) {
	for _, eager := range []bool{false, true} {
		for _, tt := range []struct {
			name    string
			latest  *client.WorkflowExecutionDescription
			started bool
			want    *message.EarlierRun
		}{
			{"running: signalled, nothing to hand", runWith(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "r1"), false, nil},
			{"closed: the closed run", runWith(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, "r1"), true, &message.EarlierRun{RunID: "r1"}},
			{"terminated: the closed run", runWith(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "r1"), true, &message.EarlierRun{RunID: "r1"}},
			{"not found: no earlier run", nil, true, &message.EarlierRun{}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := &latestClient{latest: tt.latest}
				require.NoError(t, (&Reporter{Client: c, TaskQueue: "tq", Eager: eager}).Report(t.Context(), laterReport()))
				require.NotEmpty(t, c.reports)
				got := c.reports[len(c.reports)-1]
				assert.Equal(t, tt.want, got.Earlier, "eager %v", eager)
				if !tt.started {
					assert.Empty(t, c.starts, "the running run took it")
					assert.Zero(t, c.described, "nothing looked up for a running run")
					return
				}
				require.Len(t, c.starts, 1)
				assert.Equal(t, 1, c.described)
				if eager {
					require.NotNil(t, c.inputs[0].Report)
					assert.Equal(t, tt.want, c.inputs[0].Report.Earlier, "an eager start's input carries it")
				}
			})
		}
	}
}

// A run that started after the signal found none (another report's) takes this one as a
// signal: nothing to hand. A describe that fails leaves the field unset (the run looks
// through visibility), and the report is not failed for it.
func TestLaterReportHandsNothingWhenItCannotTell(t *testing.T) {
	c := &latestClient{latest: runWith(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "r2")}
	race := &raceClient{latestClient: c}
	require.NoError(t, (&Reporter{Client: race, TaskQueue: "tq"}).Report(t.Context(), laterReport()))
	require.Len(t, c.starts, 1, "signal-with-start signals the new run")
	assert.Nil(t, c.reports[len(c.reports)-1].Earlier)

	c = &latestClient{fakeClient: fakeClient{describeErr: serviceerror.NewUnavailable("busy")}}
	require.NoError(t, (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), laterReport()))
	require.Len(t, c.starts, 1)
	assert.Nil(t, c.reports[len(c.reports)-1].Earlier)
}

// raceClient's run is not running when signalled, and is when described.
type raceClient struct{ *latestClient }

func (f *raceClient) SignalWorkflow(context.Context, string, string, string, any) error {
	return serviceerror.NewNotFound("workflow execution already completed")
}

// First reports, and parked poison deliveries, have no earlier run to hand: no signal first,
// no describe, the field unset.
func TestFirstAndPoisonReportsHandNothing(t *testing.T) {
	poison := laterReport()
	poison.Poison = &message.Poison{Kind: message.PoisonKindPoison, IngressQueue: "retry.scheduled"}
	for _, r := range []message.FailureReport{firstReport(policy.Default(3, 2*time.Second, time.Minute)), poison} {
		c := &latestClient{latest: runWith(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, "r1")}
		require.NoError(t, (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), r))
		require.Len(t, c.starts, 1)
		assert.Zero(t, c.signals)
		assert.Nil(t, c.reports[0].Earlier)
	}
}

// A signal refused for another reason than NotFound is the report's error, marked as ever.
func TestLaterReportSignalErrorIsReturned(t *testing.T) {
	c := &fakeClient{signalErr: serviceerror.NewInvalidArgument("payload too large")}
	err := (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), laterReport())
	require.Error(t, err)
	assert.Empty(t, c.starts)
	var invalid *serviceerror.InvalidArgument
	assert.ErrorAs(t, err, &invalid)
}
