package retryclient

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// DefaultIngressQueue is the queue the scheduler reads failure reports from.
const DefaultIngressQueue = "retry.scheduled"

// DefaultMaxReasonBytes bounds the error text carried as the reason.
const DefaultMaxReasonBytes = 4096

// maxRetryAfter is the longest retry-after the scheduler accepts; a report with more is refused.
const maxRetryAfter = 30 * 24 * time.Hour

// Options say where reports go and what they say about the reporting service.
type Options struct {
	// IngressQueue is the scheduler's ingress queue; DefaultIngressQueue when empty.
	IngressQueue string
	// Service and ServiceVersion name the reporting service in the dead letter's metadata.
	Service        string
	ServiceVersion string
	// Policy names a retry policy instead of the one routed by queue; TenantID tags the report.
	Policy   string
	TenantID string
	// ViaExchange republishes retries through the delivery's exchange and routing key. Off,
	// a retry goes straight back to the queue that failed: through the exchange it would
	// reach every queue bound to it, whose consumers did not fail.
	ViaExchange bool
	// MaxReasonBytes bounds the reason (the error's text); DefaultMaxReasonBytes when 0.
	MaxReasonBytes int
	// UserID is set as each report's AMQP user-id: the connection's RabbitMQ user, which the
	// broker checks, and by which the scheduler's destinations block binds producers. Empty:
	// none (a report without one is bound only by a rule written for such reports).
	UserID string
}

func (o Options) ingress() string {
	if o.IngressQueue == "" {
		return DefaultIngressQueue
	}
	return o.IngressQueue
}

// BuildMessage is the report of a failed delivery d, consumed from queue, with err: the
// payload and properties of d, its x-retry-count and x-retry-key (which retry failed) and
// x-retry-republished-at (when that retry went out), and
// what err says about the failure (see Report). A caller publishing on its own sends it as
// JSON to the ingress queue.
func BuildMessage(d amqp.Delivery, queue string, err error, opts Options) message.RetryMessage {
	c := classify(err)
	m := message.RetryMessage{
		MessageID:           d.MessageId,
		OriginalPayload:     d.Body,
		OriginalQueue:       queue,
		OriginalContentType: d.ContentType,
		CorrelationID:       d.CorrelationId,
		EventType:           d.Type,
		RetryCount:          retryCount(d.Headers),
		RetryKey:            retryKey(d.Headers),
		RepublishedAtMs:     republishedAtMs(d.Headers),
		ErrorCategory:       c.category,
		HTTPStatus:          c.httpStatus,
		ErrorCode:           c.errorCode,
		Service:             opts.Service,
		ServiceVersion:      opts.ServiceVersion,
		Policy:              opts.Policy,
		TenantID:            opts.TenantID,
	}
	if m.OriginalPayload == nil {
		m.OriginalPayload = []byte{} // "" in JSON: the scheduler requires the field
	}
	if err != nil {
		m.ErrorReason = bounded(err.Error(), opts.MaxReasonBytes)
	}
	if c.retryAfter > 0 {
		m.RetryAfterMs = min(c.retryAfter, maxRetryAfter).Milliseconds()
	}
	if opts.ViaExchange && d.Exchange != "" {
		m.OriginalExchange, m.OriginalRoutingKey = d.Exchange, d.RoutingKey
	}
	// The converter drops what must not travel (x-retry-*, x-death, x-error-*, CC/BCC ...) and
	// turns AMQP values into JSON ones; traceparent and tracestate ride along like any header.
	var hc message.HeaderConverter
	m.OriginalHeaders = hc.Convert(d.Headers, nil)
	return m
}

// header finds a header in any letter case, as producers spell them.
func header(h amqp.Table, name string) (any, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// retryCount is the delivery's x-retry-count: how many retries it has had (0 for a first
// delivery, or when the header is not a count). A count past the service's limit is sent as
// the limit, which is past every policy's retries: the message is dead-lettered as exhausted,
// where a forged count would otherwise be parked as poison or, read as 0, start over.
func retryCount(h amqp.Table) int {
	v, _ := header(h, message.HeaderRetryCount)
	if u, ok := v.(uint64); ok && u > message.MaxRetryCount {
		return message.MaxRetryCount
	}
	n, ok := message.HeaderInt64(v)
	if !ok || n < 0 {
		return 0
	}
	return int(min(n, message.MaxRetryCount))
}

func retryKey(h amqp.Table) string {
	switch v, _ := header(h, message.HeaderRetryKey); k := v.(type) {
	case string:
		return k
	case []byte:
		return string(k)
	}
	return ""
}

// republishedAtMs is the delivery's x-retry-republished-at, in unix milliseconds: when the
// scheduler republished the retry that failed, which dates the failure for its destination's
// circuit breaker. 0 when absent or not a date (the scheduler then dates the report at its
// arrival). The scheduler stamps a long; a broker or library in between may turn it into
// another integer, a float or a string, and a timestamp is read as one.
func republishedAtMs(h amqp.Table) int64 {
	v, _ := header(h, message.HeaderRetryRepublishedAt)
	var ms int64
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && x > 0 && x < math.MaxInt64 {
			ms = int64(x)
		}
	case string:
		ms = dateMs(x)
	case []byte:
		ms = dateMs(string(x))
	case time.Time:
		ms = x.UnixMilli()
	default:
		ms, _ = message.HeaderInt64(v)
	}
	return max(ms, 0)
}

// dateMs reads a decimal count of unix milliseconds or an RFC 3339 date; 0 when s is neither.
func dateMs(s string) int64 {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli()
	}
	return 0
}

// bounded cuts s to at most limit bytes (DefaultMaxReasonBytes when 0) on a character
// boundary, marking the cut.
func bounded(s string, limit int) string {
	if limit <= 0 {
		limit = DefaultMaxReasonBytes
	}
	if len(s) <= limit {
		return s
	}
	const mark = "…"
	if limit < len(mark) { // no room for the mark: the cut alone
		return strings.ToValidUTF8(s[:limit], "")
	}
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
