package workflows

// Counters the workflows emit through workflow.GetMetricsHandler (replay-safe), labelled by
// the tag "queue" (the original queue). metrics.TemporalHandler routes them to Prometheus.
const (
	// MetricRetriesScheduled counts retries scheduled: a failure that starts a delay, or an
	// operator's retry of a dead letter.
	MetricRetriesScheduled = "retries_scheduled_total"
	// MetricRetriesExhausted counts messages moved to manual review after max retries.
	MetricRetriesExhausted = "retries_exhausted_total"
	// MetricBreakerTransitions counts BreakerWorkflow's transitions, tagged "queue" and "to"
	// (the BreakerMode entered).
	MetricBreakerTransitions = "breaker_transitions_total"
	// MetricReportsSetAside counts failure reports not applied as a new failure, tagged
	// "queue" and "reason" (a SetAside* reason).
	MetricReportsSetAside = "reports_set_aside_total"
	// MetricDeadLettersExpired counts dead messages whose retention ended with no operator
	// decision: their runs close as expired.
	MetricDeadLettersExpired = "dead_letters_expired_total"
)
