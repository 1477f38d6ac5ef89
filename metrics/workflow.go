package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	sdkmetrics "go.temporal.io/sdk/client"

	"retry-scheduler/workflows"

	"retry-scheduler/metrics/promreg"
)

// workflowCounters are the counters RetryWorkflow emits through workflow.GetMetricsHandler
// (replay-safe: the SDK wraps the handler so that nothing is recorded while replaying). They
// go to plain Prometheus counters labelled by original queue only, like
// retries_executed_total, rather than through tally, which would add
// namespace/task_queue/workflow_type labels, give them a generated help text, and (with the
// SDK's sanitize options) rewrite label values ("orders.eu" → "orders_eu"), so they would not
// join with retries_executed_total.
var workflowCounters = []struct{ name, help string }{
	{workflows.MetricRetriesScheduled, "Retries scheduled (a delay started, or an operator's retry of a dead letter), by original queue."},
	{workflows.MetricRetriesExhausted, "Messages dead-lettered because max retries were exhausted, by original queue."},
}

// workflowCounterLabel is the one tag of the workflow counters that becomes a label.
const workflowCounterLabel = "queue"

// workflowHandler is the SDK's metrics handler with RetryWorkflow's own counters routed to
// Prometheus collectors; every other metric goes to the SDK handler (tally) unchanged.
type workflowHandler struct {
	sdk      sdkmetrics.MetricsHandler
	counters map[string]*prometheus.CounterVec
	// queue is the value of the "queue" tag set so far ("" when none).
	queue string
}

func newWorkflowHandler(sdk sdkmetrics.MetricsHandler, reg prometheus.Registerer) *workflowHandler {
	h := &workflowHandler{sdk: sdk, counters: map[string]*prometheus.CounterVec{}}
	for _, c := range workflowCounters {
		h.counters[c.name] = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: c.name,
			Help: c.help,
		}, []string{workflowCounterLabel}))
	}
	return h
}

// WithTags implements client.MetricsHandler.
func (h *workflowHandler) WithTags(tags map[string]string) sdkmetrics.MetricsHandler {
	c := *h
	c.sdk = h.sdk.WithTags(tags)
	if q, ok := tags[workflowCounterLabel]; ok {
		c.queue = q
	}
	return &c
}

// Counter implements client.MetricsHandler.
func (h *workflowHandler) Counter(name string) sdkmetrics.MetricsCounter {
	vec, ok := h.counters[name]
	if !ok {
		return h.sdk.Counter(name)
	}
	c := vec.WithLabelValues(h.queue)
	return counterFunc(func(d int64) { c.Add(float64(d)) })
}

// Gauge implements client.MetricsHandler.
func (h *workflowHandler) Gauge(name string) sdkmetrics.MetricsGauge { return h.sdk.Gauge(name) }

// Timer implements client.MetricsHandler.
func (h *workflowHandler) Timer(name string) sdkmetrics.MetricsTimer { return h.sdk.Timer(name) }

// Unwrap returns the SDK handler (sdktally.ScopeFromHandler looks through wrappers with it).
func (h *workflowHandler) Unwrap() sdkmetrics.MetricsHandler { return h.sdk }

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) {
	if d > 0 {
		f(d)
	}
}
