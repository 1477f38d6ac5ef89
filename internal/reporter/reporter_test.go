package reporter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// fakeClient answers the calls the Reporter makes; the embedded interface panics on others.
// A signal answers signalErr: nil means a run is running.
type fakeClient struct {
	client.Client
	startErr, signalErr, describeErr error
	starts                           []client.StartWorkflowOptions
	inputs                           []workflows.Input
	// reports are the reports the client was given, by start or signal, in order.
	reports []message.FailureReport
	signals int
}

func (f *fakeClient) SignalWithStartWorkflow(_ context.Context, _ string, _ string, arg any, opts client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.starts = append(f.starts, opts)
	f.inputs = append(f.inputs, args[0].(workflows.Input))
	f.reports = append(f.reports, arg.(message.FailureReport))
	return nil, f.startErr
}

func (f *fakeClient) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	in := args[0].(workflows.Input)
	f.starts = append(f.starts, opts)
	f.inputs = append(f.inputs, in)
	if in.Report != nil {
		f.reports = append(f.reports, *in.Report)
	}
	return nil, f.startErr
}

func (f *fakeClient) SignalWorkflow(_ context.Context, _, _, _ string, arg any) error {
	f.signals++
	f.reports = append(f.reports, arg.(message.FailureReport))
	return f.signalErr
}

func (f *fakeClient) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	return nil, f.describeErr
}

func firstReport(p policy.Policy) message.FailureReport {
	return message.FailureReport{
		Message: message.Message{MessageID: "m-1", OriginalQueue: "orders", Payload: []byte("{}")},
		Failure: policy.Failure{Reason: "timeout"}, Policy: p, DeadLetterQueue: "dlq",
	}
}

func TestReportMarksTemporalErrorsForTheBridge(t *testing.T) {
	for _, tt := range []struct {
		name                   string
		err                    error
		permanent, unavailable bool
	}{
		{"invalid argument", serviceerror.NewInvalidArgument("payload too large"), true, false},
		{"resource exhausted", &serviceerror.ResourceExhausted{Message: "rate limit"}, false, true},
		{"unavailable", serviceerror.NewUnavailable("connection refused"), false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeClient{startErr: tt.err}
			err := (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), firstReport(policy.Default(3, 2*time.Second, time.Minute)))
			require.Error(t, err)
			assert.Equal(t, tt.permanent, bridge.IsPermanent(err), "permanent")
			assert.Equal(t, tt.unavailable, bridge.IsUnavailable(err), "unavailable")
			assert.ErrorIs(t, err, tt.err, "the cause stays readable")
		})
	}
}

func TestReportStartsWithTheFirstDelayWithinTheBound(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	c := &fakeClient{}
	r := &Reporter{Client: c, TaskQueue: "tq", StartDelayMax: time.Minute, Now: func() time.Time { return now }}
	require.NoError(t, r.Report(t.Context(), firstReport(policy.Default(3, 2*time.Second, time.Minute))))
	require.Len(t, c.starts, 1)
	assert.Equal(t, message.WorkflowID("orders", "m-1"), c.starts[0].ID)
	assert.Positive(t, c.starts[0].StartDelay, "the default policy's first retry waits as the start delay")
	assert.Equal(t, c.starts[0].StartDelay, c.inputs[0].StartDelay)

	c = &fakeClient{}
	r.Client, r.StartDelayMax = c, 0
	require.NoError(t, r.Report(t.Context(), firstReport(policy.Default(3, 2*time.Second, time.Minute))))
	assert.Zero(t, c.starts[0].StartDelay, "StartDelayMax 0 never delays a start")
}

func TestEagerReportSignalsARunningWorkflow(t *testing.T) {
	c := &fakeClient{startErr: serviceerror.NewWorkflowExecutionAlreadyStarted("running", "", "")}
	r := &Reporter{Client: c, TaskQueue: "tq", Eager: true}
	require.NoError(t, r.Report(t.Context(), firstReport(policy.Default(3, 2*time.Second, time.Minute))))
	assert.True(t, c.starts[0].EnableEagerStart)
	require.NotNil(t, c.inputs[0].Report, "an eager start carries the report as input")

	c.signalErr = errors.New("boom")
	assert.ErrorContains(t, r.Report(t.Context(), firstReport(policy.Default(3, 2*time.Second, time.Minute))), "boom")
}

func TestProbe(t *testing.T) {
	assert.NoError(t, Probe(&fakeClient{describeErr: serviceerror.NewNotFound("no such workflow")})(t.Context()),
		"NotFound: the frontend, history and store answered")
	assert.Error(t, Probe(&fakeClient{describeErr: serviceerror.NewUnavailable("db down")})(t.Context()))
}

// A parked poison delivery goes to the workflow its envelope names, under the ingress: never
// into the workflow of the same message reported normally, which may be live.
func TestReportParksPoisonUnderTheIngress(t *testing.T) {
	c := &fakeClient{describeErr: serviceerror.NewNotFound("no legacy run")}
	r := firstReport(policy.Default(3, 2*time.Second, time.Minute))
	r.Poison = &message.Poison{Kind: message.PoisonKindPoison, Reason: "bad", IngressQueue: "retry.scheduled"}
	require.NoError(t, (&Reporter{Client: c, TaskQueue: "tq"}).Report(t.Context(), r))
	require.Len(t, c.starts, 1)
	assert.Equal(t, message.PoisonWorkflowID("retry.scheduled", "orders", "m-1"), c.starts[0].ID)
	assert.NotEqual(t, message.WorkflowID("orders", "m-1"), c.starts[0].ID)
}
