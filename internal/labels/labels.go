// Package labels bounds the label values of the per-queue series: a queue name comes from a
// producer's report, so without a ceiling every new name would add series that are never
// removed. A leaf package beneath the bridge, the activities and the metrics package.
package labels

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
)

// DefaultMaxQueues is how many distinct queue label values a process exports by default.
const DefaultMaxQueues = 1000

// Overflow is the queue label value of every queue past the ceiling.
const Overflow = "_other"

// OverflowMetric counts the label values mapped to Overflow.
const OverflowMetric = "metrics_queue_label_overflow_total"

// QueueLimiter maps queue names to label values: the first Max distinct names are
// themselves, later ones are Overflow (and counted). One per registry (Queues), shared by
// every component that labels a series by queue, so the ceiling holds for the process.
type QueueLimiter struct {
	overflow prometheus.Counter

	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewQueueLimiter is a limiter of max values (DefaultMaxQueues when max <= 0), registered on
// no registry.
func NewQueueLimiter(max int) *QueueLimiter {
	l := &QueueLimiter{
		overflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: OverflowMetric,
			Help: "Per-queue metric updates whose queue was past the ceiling of distinct queue labels (METRICS_MAX_QUEUES) and was labelled " + Overflow + ".",
		}),
		seen: map[string]struct{}{},
	}
	l.SetMax(max)
	return l
}

// Queues is reg's limiter: the one already registered on it, else a new one with
// DefaultMaxQueues. A nil reg gets a limiter of its own.
func Queues(reg prometheus.Registerer) *QueueLimiter {
	l := NewQueueLimiter(DefaultMaxQueues)
	if reg == nil {
		return l
	}
	return promreg.Register(reg, l)
}

// SetMax sets the ceiling (DefaultMaxQueues when max <= 0). Values already admitted stay.
func (l *QueueLimiter) SetMax(max int) {
	if max <= 0 {
		max = DefaultMaxQueues
	}
	l.mu.Lock()
	l.max = max
	l.mu.Unlock()
}

// Max is the ceiling.
func (l *QueueLimiter) Max() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// Queue is the label value for queue: queue itself while it is among the first Max distinct
// names seen, else Overflow.
func (l *QueueLimiter) Queue(queue string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[queue]; ok {
		return queue
	}
	if len(l.seen) < l.max {
		l.seen[queue] = struct{}{}
		return queue
	}
	l.overflow.Inc()
	return Overflow
}

// Admitted says whether queue has a label value of its own, admitting it if there is room;
// for gauges, which cannot share one series among queues (they skip a queue that is not).
func (l *QueueLimiter) Admitted(queue string) bool {
	return l.Queue(queue) != Overflow || queue == Overflow
}

// Describe implements prometheus.Collector.
func (l *QueueLimiter) Describe(ch chan<- *prometheus.Desc) { l.overflow.Describe(ch) }

// Collect implements prometheus.Collector.
func (l *QueueLimiter) Collect(ch chan<- prometheus.Metric) { l.overflow.Collect(ch) }
