package bridge

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Defaults of Config.
const (
	DefaultQueue = "retry.scheduled"
	// DefaultPrefetch leaves room for the deliveries waiting out their first delay (Defer) on
	// top of those in the handlers: at 100 reports/s and a 2 s delay, 200 of them.
	DefaultPrefetch       = 512
	DefaultWorkers        = 16
	DefaultReportTimeout  = 10 * time.Second
	DefaultReconnectDelay = 500 * time.Millisecond
	// DefaultReportTries bounds the reports of one message that fail while Temporal answers
	// the Probe: then the failure is the message's, and it is dead-lettered as poison.
	DefaultReportTries = 5
	// MaxBackoff caps the doubling of ReconnectDelay.
	MaxBackoff = 10 * time.Second
	// probeTimeout bounds one call of Config.Probe.
	probeTimeout = 5 * time.Second
)

// consumerTag names the bridge's one consumer on its channel (a channel consumes once: the
// bridge holds deliveries rather than cancelling and consuming again).
const consumerTag = "retry-scheduler-bridge"

// rpcTimeout bounds each AMQP method the bridge waits on (declare, qos, consume, cancel,
// close); a broker that does not answer in that time is treated as a lost connection.
const rpcTimeout = 10 * time.Second

// Config configures a Bridge. The zero value of every field has a default.
type Config struct {
	// Queue is the ingress queue. Defaults to "retry.scheduled".
	Queue string
	// DeadLetterQueue receives poison and oversize deliveries. Defaults to "manual-review.pending".
	DeadLetterQueue string
	// Prefetch is the channel's QoS: unacked deliveries held at once, those waiting out their
	// first delay (Defer) included. Defaults to DefaultPrefetch.
	Prefetch int
	// Workers is how many deliveries are handled concurrently. Defaults to 16.
	Workers int
	// ReportTimeout bounds one Report and one dead-letter publish, and the wait for in-flight
	// handlers on shutdown. Defaults to 10s.
	ReportTimeout time.Duration
	// ReconnectDelay is the first backoff after a lost connection, after a failed report and
	// between the probes of an outage; it doubles up to MaxBackoff, with jitter so that
	// several bridges do not retry in lockstep. Defaults to 500ms.
	ReconnectDelay time.Duration
	// Probe reports whether Temporal serves calls (nil: yes). It tells an outage from a
	// message Temporal refuses: when a report fails and Probe fails too, the delivery is held
	// and the bridge probes; when Probe passes, the failure counts against the message, and
	// after ReportTries such failures the message is dead-lettered as poison so that it
	// cannot stall the queue. A nil Probe presumes every failure an outage.
	Probe func(ctx context.Context) error
	// ReportTries is how many failed reports, with Temporal answering the Probe, make a
	// message poison. Defaults to DefaultReportTries.
	ReportTries int
	// IngressArgs and DeadLetterArgs are the arguments the queues are declared with
	// (broker.IngressArgs and broker.QueueArgs); a queue that exists with others is used as
	// it is.
	IngressArgs, DeadLetterArgs amqp.Table
	// Decode configures decoding; its DefaultDeadLetterQueue defaults to DeadLetterQueue, and
	// its Guard to the Resolver's destinations with Queue, DeadLetterQueue and every
	// dead-letter queue the Resolver's catalog names as the scheduler's own queues.
	Decode DecodeOptions
	// ServiceName and ServiceVersion name the scheduler in the envelopes the bridge writes
	// itself (poison, oversize): metadata.service, metadata.service_version and the AMQP
	// app_id. ServiceName defaults to "retry-scheduler"; ServiceVersion to none.
	ServiceName, ServiceVersion string
	// Defer, when set, says how long to keep a decoded report's delivery before reporting it:
	// its first retry's delay when short enough, so that the run starts when the retry is due
	// and republishes in its first workflow task (reporter.Reporter.DeferFor). The delivery
	// waits unacked, outside the handlers, so the wait costs no handler; with more than
	// Prefetch − Workers waiting, a report is made at once instead.
	Defer func(message.FailureReport) time.Duration
	// DeadLetterMaxBytes is the largest dead-letter envelope the bridge publishes; a larger
	// one leaves its payload to a message of its own (deadletter.Split). Defaults to
	// deadletter.DefaultMaxBytes.
	DeadLetterMaxBytes int
	// MemoryBudget, when above 0, bounds the bytes of the deliveries the bridge holds: the
	// effective prefetch is at most MemoryBudget / Decode.MaxMessageBytes (EffectivePrefetch).
	MemoryBudget int64
	// Breakers counts, for each accepted report of a retry (RetryCount >= 1) whose policy
	// has a breaker, a failed republish towards its destination's breaker. Nil counts none.
	Breakers BreakerCounter
	// Intake paces what the bridge hands to Temporal (admission.Controller): the loop asks
	// it before taking a new delivery and before reporting a deferred one that came due, never
	// before reporting again a delivery held through an outage. A delivery not admitted stays
	// in the broker (unacked within the prefetch, the rest ready). Every session of the bridge
	// shares it. Nil admits everything.
	Intake Intake
}

// Intake is admission control (admission.Controller is one). Safe for concurrent use.
type Intake interface {
	// Ready reports whether one more delivery may go to a handler now; when not, wait is how
	// long until one may.
	Ready() (ok bool, wait time.Duration)
	// Take spends one admission, after Ready said yes. Loops that share the Intake may each
	// take after one yes: the overdraft is paid from the next tokens.
	Take()
	// Give returns the admission of a delivery that made no report: one deferred to its first
	// retry's due time, when it takes one again.
	Give()
}

// BreakerCounter counts failed republishes per destination; breaker.Counter is one. Only
// retries count: a first failure says nothing about whether retrying helps now.
type BreakerCounter interface {
	Failed(queue string, settings policy.Breaker)
}

func (c Config) withDefaults() Config {
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if c.DeadLetterQueue == "" {
		c.DeadLetterQueue = DefaultDeadLetterQueue
	}
	if c.Prefetch <= 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.ReportTimeout <= 0 {
		c.ReportTimeout = DefaultReportTimeout
	}
	if c.ReconnectDelay <= 0 {
		c.ReconnectDelay = DefaultReconnectDelay
	}
	if c.ReportTries <= 0 {
		c.ReportTries = DefaultReportTries
	}
	if c.ServiceName == "" {
		c.ServiceName = serviceName
	}
	if c.Decode.DefaultDeadLetterQueue == "" {
		c.Decode.DefaultDeadLetterQueue = c.DeadLetterQueue
	}
	if c.Decode.Guard == nil {
		// The ingress and the dead-letter queues are the scheduler's own: never a destination.
		if c.Decode.Resolver == nil {
			c.Decode.Resolver = policy.NewCatalog()
		}
		c.Decode.Guard = defaultGuard(c.Decode.Resolver, c.Queue, c.DeadLetterQueue, c.Decode.DefaultDeadLetterQueue)
	}
	c.Decode = c.Decode.withDefaults()
	c.Prefetch = EffectivePrefetch(c.Prefetch, c.MemoryBudget, c.Decode.MaxMessageBytes)
	return c
}

// EffectivePrefetch is the prefetch that keeps what the bridge holds within budget bytes:
// prefetch, or fewer when prefetch deliveries of the largest accepted size would not fit
// (RabbitMQ ignores a prefetch in bytes, so the bound is a count), never below 1. A budget of
// 0 or less bounds nothing.
func EffectivePrefetch(prefetch int, budget int64, maxMessageBytes int) int {
	if budget <= 0 || maxMessageBytes <= 0 {
		return prefetch
	}
	return int(max(1, min(int64(prefetch), budget/int64(maxMessageBytes))))
}
