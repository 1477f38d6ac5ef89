package metrics

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetrics "go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/workflows"

	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
)

// workflowCounters are the counters the workflows emit through workflow.GetMetricsHandler
// (replay-safe: the SDK wraps the handler so that nothing is recorded while replaying). They
// go to plain Prometheus counters labelled by their own tags only (the original queue, and
// a breaker's new state), like retries_executed_total, rather than through tally, which
// would add namespace/task_queue/workflow_type labels, give them a generated help text, and
// (with the SDK's sanitize options) rewrite label values ("orders.eu" → "orders_eu"), so
// they would not join with retries_executed_total.
var workflowCounters = []struct {
	name, help string
	labels     []string
}{
	{workflows.MetricRetriesScheduled, "Retries scheduled (a delay started, or an operator's retry of a dead letter), by original queue.", []string{labelQueue}},
	{workflows.MetricRetriesExhausted, "Messages dead-lettered because max retries were exhausted, by original queue.", []string{labelQueue}},
	{workflows.MetricBreakerTransitions, "Transitions of a destination's circuit breaker, by queue and the state entered (to: closed, open, half-open, paused).", []string{labelQueue, labelTo}},
	{workflows.MetricDeadLettersExpired, "Dead messages whose retention (DEAD_LETTER_RETENTION) ended with no operator decision, by original queue.", []string{labelQueue}},
	{workflows.MetricReportsSetAside, "Failure reports set aside, not applied as a new failure, by original queue and reason (other-key, behind-count, before-republish, redelivered, retry-pending, dead, poison, run-ended).", []string{labelQueue, labelReason}},
}

// Tags of the workflow counters that become labels.
const (
	labelQueue  = "queue"
	labelTo     = "to"
	labelReason = "reason"
)

// labelTags are every tag some workflow counter is labelled by.
var labelTags = []string{labelQueue, labelTo, labelReason}

// workflowHandler is the SDK's metrics handler with the workflows' own counters routed to
// Prometheus collectors; every other metric goes to the SDK handler (tally) unchanged.
type workflowHandler struct {
	sdk      sdkmetrics.MetricsHandler
	counters map[string]labelledCounter
	// labels are the values of the label tags set so far (absent: "").
	labels map[string]string
	// queues bounds the values of the queue tag, for these counters and the SDK's scope alike.
	queues *labels.QueueLimiter
}

// labelledCounter is a workflow counter and the tags that label it, in order.
type labelledCounter struct {
	vec    *prometheus.CounterVec
	labels []string
}

func newWorkflowHandler(sdk sdkmetrics.MetricsHandler, reg prometheus.Registerer) *workflowHandler {
	h := &workflowHandler{sdk: sdk, counters: map[string]labelledCounter{}, queues: labels.Queues(reg)}
	for _, c := range workflowCounters {
		h.counters[c.name] = labelledCounter{
			vec:    promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: c.name, Help: c.help}, c.labels)),
			labels: c.labels,
		}
	}
	return h
}

// WithTags implements client.MetricsHandler.
func (h *workflowHandler) WithTags(tags map[string]string) sdkmetrics.MetricsHandler {
	c := *h
	if q, ok := tags[labelQueue]; ok {
		if bounded := h.queues.Queue(q); bounded != q {
			tags = maps.Clone(tags)
			tags[labelQueue] = bounded
		}
	}
	c.sdk = h.sdk.WithTags(tags)
	var labels map[string]string // a copy: handlers derived from h keep their own
	for _, k := range labelTags {
		if v, ok := tags[k]; ok {
			if labels == nil {
				labels = maps.Clone(h.labels)
				if labels == nil {
					labels = map[string]string{}
				}
			}
			labels[k] = v
		}
	}
	if labels != nil {
		c.labels = labels
	}
	return &c
}

// Counter implements client.MetricsHandler.
func (h *workflowHandler) Counter(name string) sdkmetrics.MetricsCounter {
	lc, ok := h.counters[name]
	if !ok {
		return h.sdk.Counter(name)
	}
	values := make([]string, len(lc.labels))
	for i, l := range lc.labels {
		values[i] = h.labels[l]
	}
	c := lc.vec.WithLabelValues(values...)
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
