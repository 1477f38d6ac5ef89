package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
)

// DeadLetterPublishFailuresName is the counter of failed dead-letter publishes.
const DeadLetterPublishFailuresName = "dead_letter_publish_failures_total"

// DeadLetterPublishFailures is dead_letter_publish_failures_total{queue} on reg: publishes of a
// dead-letter envelope that the broker did not confirm (unroutable, nacked, timed out, no
// connection), counted by dead-letter queue, whoever published (the worker's DeadLetter
// activity, the bridge's poison dead-lettering). One home, so that both register the same
// collector: the one reg already has is returned. With a nil reg it is unregistered.
func DeadLetterPublishFailures(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DeadLetterPublishFailuresName,
		Help: "Dead-letter envelope publishes the broker did not confirm, by dead-letter queue; each failed try counts.",
	}, []string{"queue"})
	if reg == nil {
		return c
	}
	return promreg.Register(reg, c)
}
