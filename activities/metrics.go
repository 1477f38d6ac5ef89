package activities

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"

	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
)

// Retry outcomes, the status label of retries_executed_total.
const (
	StatusSuccess    = "success"
	StatusFailed     = "failed"
	StatusUnroutable = "unroutable"
	// StatusUnpublishable is a retry refused for the message's own content (ErrTypeUnpublishable).
	StatusUnpublishable = "unpublishable"
	// StatusHeld is a retry not published because its destination's breaker holds it.
	StatusHeld = "held"
)

// Metrics are the activities' Prometheus series. Labels are queues, statuses and
// reasons only: message ids would make the series count unbounded.
type Metrics struct {
	RetriesExecuted *prometheus.CounterVec // retries_executed_total{queue,status}
	DeadLetters     *prometheus.CounterVec // dead_letters_total{queue,reason}
	RetryLateness   prometheus.Histogram   // retry_lateness_seconds
	// DeadLetterPublishFailures is broker.DeadLetterPublishFailures, shared with the bridge.
	DeadLetterPublishFailures *prometheus.CounterVec // dead_letter_publish_failures_total{queue}
	// queues bounds the distinct queue labels (shared by the process's registry); nil: none.
	queues *labels.QueueLimiter
}

// NewMetrics registers the metrics on reg (never the global registry, so tests and several
// processes in one binary do not collide). A collector already registered under the same name
// is reused, so building Activities twice on one registry does not panic.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		RetriesExecuted: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retries_executed_total",
			Help: "Republish attempts by original queue and outcome (success, failed, unroutable, held).",
		}, []string{"queue", "status"})),
		DeadLetters: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dead_letters_total",
			Help: "Dead-letter envelopes published, by dead-letter queue and reason.",
		}, []string{"queue", "reason"})),
		RetryLateness: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "retry_lateness_seconds",
			Help: "Time from a retry's scheduled time to the broker's confirm of its republish.",
			// Bounds at the goal (p99 0.25 s) and the SLO (within 5 s), so both are read off a
			// bucket exactly; up to 5 min for retries held back while the broker was down.
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		})),
		DeadLetterPublishFailures: broker.DeadLetterPublishFailures(reg),
		queues:                    labels.Queues(reg),
	}
}

func (m *Metrics) retryExecuted(queue, status string) {
	if m == nil {
		return
	}
	if m.queues != nil {
		queue = m.queues.Queue(queue)
	}
	m.RetriesExecuted.WithLabelValues(queue, status).Inc()
}

func (m *Metrics) observeLateness(d time.Duration) {
	if m == nil {
		return
	}
	// A retry an operator pulled forward is "early"; count it as on time.
	m.RetryLateness.Observe(max(d, 0).Seconds())
}

func (m *Metrics) deadLettered(queue, reason string) {
	if m == nil {
		return
	}
	m.DeadLetters.WithLabelValues(queue, reason).Inc()
}

func (m *Metrics) deadLetterPublishFailed(queue string) {
	if m == nil {
		return
	}
	m.DeadLetterPublishFailures.WithLabelValues(queue).Inc()
}
