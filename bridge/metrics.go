package bridge

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"

	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
)

// Delivery outcomes, the values of bridge_deliveries_total's outcome label.
const (
	// OutcomeAccepted: Temporal accepted the report; the delivery was acked.
	OutcomeAccepted = "accepted"
	// OutcomePoison and OutcomeOversize: dead-lettered with a confirm, then acked.
	OutcomePoison   = "poison"
	OutcomeOversize = "oversize"
	// OutcomePaused: Temporal or the dead-letter queue was unavailable; the bridge pauses and
	// keeps the delivery unacked (not requeued, which would spend a quorum queue's delivery)
	// until a probe succeeds. Counted each time. Its label value stays "held", which
	// dashboards and alerts already read.
	OutcomePaused = "held"
	// OutcomeRequeued: nacked with requeue (the bridge stopping); the broker delivers it again.
	OutcomeRequeued = "requeued"
	// OutcomeDroppedStale: its channel was gone when the outcome was known, so it was neither
	// acked nor nacked; the broker redelivers it.
	OutcomeDroppedStale = "dropped_stale"
)

// Metrics are the bridge's Prometheus collectors.
type Metrics struct {
	deliveries *prometheus.CounterVec
	scheduled  *prometheus.CounterVec
	// dlqFailures is broker.DeadLetterPublishFailures: shared with the worker's activities.
	dlqFailures *prometheus.CounterVec
	// consuming mirrors Bridge.Ready: what an alert on a stalled ingress needs when the
	// broker's own metrics are not scraped.
	consuming prometheus.Gauge
	// queues bounds the distinct queue labels (shared by the process's registry).
	queues *labels.QueueLimiter
}

// NewMetrics creates the collectors and registers them on reg (none when reg is nil). A
// collector that reg already has is reused, so that two bridges in one process share it.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridge_deliveries_total",
			Help: "Deliveries from the ingress queue by outcome: accepted, poison, oversize, held, requeued, dropped_stale.",
		}, []string{"outcome"}),
		// Labelled by original queue, which a report names: the queue limiter bounds the
		// distinct values.
		// Not retries_scheduled_total: an accepted report may be a redelivery or the failure
		// that ends in dead; RetryWorkflow counts the retries it actually schedules.
		scheduled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridge_failure_reports_total",
			Help: "Failure reports accepted by Temporal, by original queue (duplicates and reports that end in dead included).",
		}, []string{"queue"}),
		consuming: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridge_consuming",
			Help: "1 while the bridge consumes the ingress queue (connected, not holding deliveries through a Temporal or dead-letter queue outage), else 0.",
		}),
	}
	m.dlqFailures = broker.DeadLetterPublishFailures(reg)
	m.queues = labels.Queues(reg)
	if reg != nil {
		m.deliveries = promreg.Register(reg, m.deliveries)
		m.scheduled = promreg.Register(reg, m.scheduled)
		m.consuming = promreg.Register(reg, m.consuming)
	}
	for _, o := range []string{OutcomeAccepted, OutcomePoison, OutcomeOversize, OutcomePaused, OutcomeRequeued, OutcomeDroppedStale} {
		m.deliveries.WithLabelValues(o)
	}
	return m
}

func (m *Metrics) deadLetterPublishFailed(queue string) {
	m.dlqFailures.WithLabelValues(queue).Inc()
}

// reportAccepted counts an accepted failure report of queue.
func (m *Metrics) reportAccepted(queue string) {
	m.scheduled.WithLabelValues(m.queues.Queue(queue)).Inc()
}

func (m *Metrics) outcome(o string) {
	m.deliveries.WithLabelValues(o).Inc()
}

// readyFlag is Bridge.Ready's state, mirrored to the bridge_consuming gauge on every change.
// Only Run's goroutine (its sessions' loops included) stores, so the two cannot disagree
// for longer than one Store.
type readyFlag struct {
	v     atomic.Bool
	gauge prometheus.Gauge
}

func (f *readyFlag) Load() bool { return f.v.Load() }

func (f *readyFlag) Store(ready bool) {
	f.v.Store(ready)
	if ready {
		f.gauge.Set(1)
	} else {
		f.gauge.Set(0)
	}
}
