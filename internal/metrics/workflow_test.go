package metrics

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetrics "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// recordingHandler stands in for the SDK's tally handler.
type recordingHandler struct {
	tags     map[string]string
	counters map[string]int64
}

func (h *recordingHandler) WithTags(tags map[string]string) sdkmetrics.MetricsHandler {
	merged := map[string]string{}
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &recordingHandler{tags: merged, counters: h.counters}
}

func (h *recordingHandler) Counter(name string) sdkmetrics.MetricsCounter {
	return counterFunc(func(d int64) { h.counters[name] += d })
}
func (h *recordingHandler) Gauge(string) sdkmetrics.MetricsGauge {
	return sdkmetrics.MetricsNopHandler.Gauge("")
}
func (h *recordingHandler) Timer(string) sdkmetrics.MetricsTimer {
	return sdkmetrics.MetricsNopHandler.Timer("")
}

func TestWorkflowHandlerRoutesOwnCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	sdk := &recordingHandler{counters: map[string]int64{}}
	h := newWorkflowHandler(sdk, reg)

	wf := h.WithTags(map[string]string{"namespace": "default", "workflow_type": "RetryWorkflow"})
	wf.WithTags(map[string]string{"queue": "orders.eu"}).Counter(workflows.MetricRetriesExhausted).Inc(1)
	wf.WithTags(map[string]string{"queue": "orders.eu"}).Counter(workflows.MetricRetriesScheduled).Inc(2)
	wf.WithTags(map[string]string{"queue": "billing"}).Counter(workflows.MetricRetriesScheduled).Inc(1)
	wf.WithTags(map[string]string{"queue": "orders.eu"}).Counter(workflows.MetricDeadLettersExpired).Inc(1)
	wf.Counter("temporal_workflow_completed").Inc(1)

	vec := h.counters[workflows.MetricRetriesScheduled].vec
	assert.Equal(t, 2.0, value(t, vec.WithLabelValues("orders.eu")), "label values kept as they are")
	assert.Equal(t, 1.0, value(t, vec.WithLabelValues("billing")))
	assert.Equal(t, 1.0, value(t, h.counters[workflows.MetricRetriesExhausted].vec.WithLabelValues("orders.eu")))
	assert.Equal(t, 1.0, value(t, h.counters[workflows.MetricDeadLettersExpired].vec.WithLabelValues("orders.eu")))
	assert.Equal(t, map[string]int64{"temporal_workflow_completed": 1}, sdk.counters, "own counters do not reach tally")
	assert.Same(t, sdk, h.Unwrap())

	// A second handler on the same registry (two clients in one process) shares the collectors.
	h2 := newWorkflowHandler(sdk, reg)
	h2.WithTags(map[string]string{"queue": "billing"}).Counter(workflows.MetricRetriesScheduled).Inc(1)
	assert.Equal(t, 2.0, value(t, vec.WithLabelValues("billing")))
}

// breaker_transitions_total is labelled by queue and the state entered; tags set on a parent
// handler carry to the handlers derived from it, not to its siblings.
func TestWorkflowHandlerBreakerTransitions(t *testing.T) {
	reg := prometheus.NewRegistry()
	sdk := &recordingHandler{counters: map[string]int64{}}
	h := newWorkflowHandler(sdk, reg)

	orders := h.WithTags(map[string]string{"workflow_type": workflows.BreakerWorkflowName}).WithTags(map[string]string{"queue": "orders.eu"})
	orders.WithTags(map[string]string{"to": string(workflows.BreakerOpen)}).Counter(workflows.MetricBreakerTransitions).Inc(1)
	orders.WithTags(map[string]string{"to": string(workflows.BreakerOpen)}).Counter(workflows.MetricBreakerTransitions).Inc(1)
	orders.WithTags(map[string]string{"to": string(workflows.BreakerHalfOpen)}).Counter(workflows.MetricBreakerTransitions).Inc(1)
	h.WithTags(map[string]string{"queue": "billing", "to": string(workflows.BreakerPaused)}).Counter(workflows.MetricBreakerTransitions).Inc(1)
	orders.Counter(workflows.MetricRetriesScheduled).Inc(1)

	vec := h.counters[workflows.MetricBreakerTransitions].vec
	assert.Equal(t, 2.0, value(t, vec.WithLabelValues("orders.eu", "open")))
	assert.Equal(t, 1.0, value(t, vec.WithLabelValues("orders.eu", "half-open")))
	assert.Equal(t, 1.0, value(t, vec.WithLabelValues("billing", "paused")))
	assert.Equal(t, 1.0, value(t, h.counters[workflows.MetricRetriesScheduled].vec.WithLabelValues("orders.eu")), "one label: the queue")
	assert.Empty(t, sdk.counters)
	f := families(t, reg)[workflows.MetricBreakerTransitions]
	require.NotNil(t, f)
	assert.Len(t, f.GetMetric(), 3, "no series of a sibling's tags")
}

// reports_set_aside_total is labelled by queue and reason.
func TestWorkflowHandlerReportsSetAside(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newWorkflowHandler(&recordingHandler{counters: map[string]int64{}}, reg)

	h.WithTags(map[string]string{"queue": "orders.eu", "reason": workflows.SetAsideOtherKey}).Counter(workflows.MetricReportsSetAside).Inc(1)
	h.WithTags(map[string]string{"queue": "orders.eu", "reason": workflows.SetAsideOtherKey}).Counter(workflows.MetricReportsSetAside).Inc(1)
	h.WithTags(map[string]string{"queue": "orders.eu", "reason": workflows.SetAsideDead}).Counter(workflows.MetricReportsSetAside).Inc(1)

	vec := h.counters[workflows.MetricReportsSetAside].vec
	assert.Equal(t, 2.0, value(t, vec.WithLabelValues("orders.eu", "other-key")))
	assert.Equal(t, 1.0, value(t, vec.WithLabelValues("orders.eu", "dead")))
}

// The tally side keeps label values such as task queue names intact.
func TestTemporalHandlerKeepsLabelValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, closer := TemporalHandler(reg, func(err error) { t.Errorf("register: %v", err) })
	h.WithTags(map[string]string{"task_queue": "retry-scheduler.eu"}).Counter("temporal_test_counter").Inc(3)
	require.NoError(t, closer.Close()) // flushes
	f := families(t, reg)["temporal_test_counter_total"]
	require.NotNil(t, f)
	require.Len(t, f.GetMetric(), 1)
	m := f.GetMetric()[0]
	require.Len(t, m.GetLabel(), 1)
	assert.Equal(t, "task_queue", m.GetLabel()[0].GetName())
	assert.Equal(t, "retry-scheduler.eu", m.GetLabel()[0].GetValue())
	assert.Equal(t, 3.0, m.GetCounter().GetValue())
}

type okPublisher struct{}

func (okPublisher) Publish(context.Context, string, string, bool, amqp.Publishing) error { return nil }

// RetryWorkflow's counters through the handler, on the SDK's test environment: a message that
// fails twice after its first failure with max 2 retries is scheduled twice, then exhausted.
func TestRetryWorkflowCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newWorkflowHandler(sdkmetrics.MetricsNopHandler, reg)
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ts.SetMetricsHandler(h)
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.RetryWorkflow, workflow.RegisterOptions{Name: workflows.RetryWorkflowName})
	env.RegisterActivity(&activities.Activities{Publisher: okPublisher{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	p := policy.Policy{
		Name:        "test",
		Backoff:     policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{10 * time.Second}},
		Jitter:      policy.Jitter{Mode: policy.NoJitter},
		MaxRetries:  2,
		QuietWindow: 30 * time.Second,
	}
	rep := func(n int) message.FailureReport {
		return message.FailureReport{
			Message:         message.Message{MessageID: "m-1", Payload: []byte("p"), OriginalQueue: "orders.eu"},
			RetryCount:      n,
			Failure:         policy.Failure{Category: "transient", Reason: "503"},
			Policy:          p,
			DeadLetterQueue: "dead",
		}
	}
	// Republishes at 10 s and 25 s; each fails 5 s later; the second failure is dead.
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalFailureReport, rep(1)) }, 15*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalFailureReport, rep(1)) }, 16*time.Second) // duplicate
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalFailureReport, rep(2)) }, 30*time.Second)
	first := rep(0)
	env.ExecuteWorkflow(workflows.RetryWorkflowName, workflows.Input{Report: &first, Retention: time.Hour})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	assert.Equal(t, 2.0, value(t, h.counters[workflows.MetricRetriesScheduled].vec.WithLabelValues("orders.eu")))
	assert.Equal(t, 1.0, value(t, h.counters[workflows.MetricRetriesExhausted].vec.WithLabelValues("orders.eu")))
}
