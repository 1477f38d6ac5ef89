package bridge

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// maxRetryKeyLen bounds x-retry-key; ours are "<message_id>:<n>", well under it.
const maxRetryKeyLen = 1024

// xDeathEntry is the most recent entry of an x-death header.
type xDeathEntry struct {
	queue, exchange, routingKey, reason string
}

// firstXDeath reads x-death[0]: RabbitMQ keeps the most recent death first.
func firstXDeath(headers amqp.Table) (xDeathEntry, *PoisonError) {
	var e xDeathEntry
	var first any
	switch list := headers[message.HeaderDeath].(type) {
	case []any:
		if len(list) == 0 {
			return e, poisonf("x-death header is an empty array")
		}
		first = list[0]
	case []amqp.Table:
		if len(list) == 0 {
			return e, poisonf("x-death header is an empty array")
		}
		first = list[0]
	default:
		return e, poisonf("x-death header is not an array of tables")
	}
	var t map[string]any
	switch x := first.(type) {
	case amqp.Table:
		t = x
	case map[string]any:
		t = x
	default:
		return e, poisonf("x-death[0] is not a table")
	}
	q, ok := headerString(t["queue"])
	if !ok {
		return e, poisonf("x-death[0].queue is missing or not a string")
	}
	e.queue = q
	if v, present := t["exchange"]; present {
		if e.exchange, ok = headerString(v); !ok {
			return e, poisonf("x-death[0].exchange is not a string")
		}
	}
	if v, present := t["routing-keys"]; present {
		keys, ok := v.([]any)
		if !ok {
			return e, poisonf("x-death[0].routing-keys is not an array")
		}
		if len(keys) > 0 {
			if e.routingKey, ok = headerString(keys[0]); !ok {
				return e, poisonf("x-death[0].routing-keys[0] is not a string")
			}
		}
	}
	e.reason, _ = headerString(t["reason"])
	if pe := checkEntityName("x-death[0].queue", e.queue, true); pe != nil {
		return e, pe
	}
	if pe := checkEntityName("x-death[0].exchange", e.exchange, false); pe != nil {
		return e, pe
	}
	if pe := checkName("x-death[0].routing-keys[0]", e.routingKey, false); pe != nil {
		return e, pe
	}
	return e, nil
}

// xDeathQueueHint is the x-death queue when there is one, for naming an oversize message.
func xDeathQueueHint(headers amqp.Table) string {
	e, pe := firstXDeath(headers)
	if pe != nil {
		return ""
	}
	return e.queue
}

// decodeXDeath decodes a dead-lettered service message (zero-code adoption): the body is the
// original payload and x-death says where it came from. A malformed x-death or x-retry-count
// is poison (the route or the attempt count would be guessed); a malformed error-detail header
// is ignored with a note, since the message can still be retried without it.
func decodeXDeath(d Delivery, opts DecodeOptions) (decoded, error) {
	e, pe := firstXDeath(d.Headers)
	if pe != nil {
		return decoded{}, pe
	}
	var rep message.FailureReport
	if v, ok := header(d.Headers, message.HeaderRetryCount); ok {
		n, ok := headerInt(v)
		if !ok {
			pe = poisonf("x-retry-count header must be an integer, got %s", describe(v))
		} else {
			pe = checkCount("x-retry-count header", n)
		}
		if pe != nil {
			pe.OriginalQueue = e.queue
			return decoded{}, pe
		}
		rep.RetryCount = int(n)
	}

	h := xDeathHeaders{d: d, notes: &message.HeaderConverter{}}
	rep.Message = h.message(e.queue, opts)
	rep.Failure = h.failure(e, opts.Now())
	if key := h.str(message.HeaderRetryKey); len(key) > maxRetryKeyLen {
		h.notes.Dropf("x-retry-key header ignored: over %d bytes", maxRetryKeyLen)
	} else {
		rep.RetryKey = key
	}
	if v, ok := header(d.Headers, message.HeaderRetryRepublishedAt); ok && v != nil {
		if at, ok := republishedAt(v); ok {
			rep.RepublishedAt = at
		} else {
			h.notes.Dropf("%s header ignored: %s is not a date (unix milliseconds or RFC 3339)", message.HeaderRetryRepublishedAt, describe(v))
		}
	}
	rep.Service = h.str(message.HeaderService)
	rep.ServiceVersion = h.str(message.HeaderServiceVersion)
	h.notes.Notes = append(h.notes.Notes, setErrorDetail(&rep, h.str(message.HeaderErrorType), h.str(message.HeaderStackTrace))...)
	rep.Notes = h.notes.Notes
	rep.Source = SourceDeadLetter
	return decoded{rep: rep, policy: h.str(message.HeaderRetryPolicy), rawID: d.MessageID}, nil
}

// xDeathHeaders reads a dead-lettered delivery's headers; a header of the wrong type is
// ignored with a note, since the message can still be retried without it.
type xDeathHeaders struct {
	d     Delivery
	notes *message.HeaderConverter
}

// str is the named header as a string, "" when absent or not a string.
func (h xDeathHeaders) str(name string) string {
	v, ok := header(h.d.Headers, name)
	if !ok || v == nil {
		return ""
	}
	s, ok := headerString(v)
	if !ok {
		h.notes.Dropf("%s header ignored: not a string", name)
	}
	return s
}

// message is the original message: the delivery's body, properties and headers.
func (h xDeathHeaders) message(queue string, opts DecodeOptions) message.Message {
	d := h.d
	m := message.Message{Payload: d.Body}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	// Republish to the queue that failed, by name on the default exchange: going back
	// through the original exchange would, for a fanout or topic exchange, deliver the
	// retry to every bound queue again, including consumers that had succeeded.
	m.OriginalQueue = queue
	m.Properties = message.Properties{
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		Type:            d.Type,
		AppID:           d.AppID,
		ReplyTo:         d.ReplyTo,
		Priority:        d.Priority,
		Timestamp:       d.Timestamp,
	}
	m.CorrelationID = d.CorrelationID
	m.TenantID = h.str(message.HeaderTenantID)
	m.Headers = h.notes.Convert(d.Headers, opts.allowHeader)
	m.EventType = h.str(message.HeaderEventType)
	if m.EventType == "" {
		m.EventType = d.Type
	}
	return m
}

// failure is what the consumer said of the failure in its headers; without a reason, the
// broker's x-death says why the message was dead-lettered.
func (h xDeathHeaders) failure(e xDeathEntry, now time.Time) policy.Failure {
	var f policy.Failure
	f.Reason = h.str(message.HeaderErrorReason)
	if f.Reason == "" {
		f.Reason = "dead-lettered from queue " + e.queue
		if e.reason != "" {
			f.Reason += " (" + e.reason + ")"
		}
	}
	f.Category = h.str(message.HeaderErrorCategory)
	if v, ok := header(h.d.Headers, message.HeaderErrorCode); ok && v != nil {
		if s, ok := headerString(v); ok {
			f.ErrorCode = s
		} else if n, ok := headerInt(v); ok {
			f.ErrorCode = strconv.FormatInt(n, 10)
		} else {
			h.notes.Dropf("x-error-code header ignored: not a string or integer")
		}
	}
	if v, ok := header(h.d.Headers, message.HeaderHTTPStatus); ok && v != nil {
		if n, ok := headerInt(v); ok && n >= 0 && n <= 999 {
			f.HTTPStatus = int(n)
		} else {
			h.notes.Dropf("x-http-status header ignored: %s is not an HTTP status code", describe(v))
		}
	}
	if v, ok := header(h.d.Headers, message.HeaderRetryAfter); ok && v != nil {
		if ra, err := parseRetryAfter(v, now); err != nil {
			h.notes.Dropf("x-retry-after header ignored: %v", err)
		} else {
			f.RetryAfter = ra
		}
	}
	return f
}

// parseRetryAfter reads Retry-After as seconds (a number, or a decimal string) or an HTTP
// date, relative to now; a date in the past is no wait.
func parseRetryAfter(v any, now time.Time) (time.Duration, error) {
	var secs float64
	if f, ok := headerFloat(v); ok {
		secs = f
	} else if s, ok := headerString(v); ok {
		t, err := http.ParseTime(strings.TrimSpace(s))
		if err != nil {
			return 0, fmt.Errorf("%q is neither seconds nor an HTTP date", truncate(s, 64))
		}
		secs = math.Max(0, t.Sub(now).Seconds())
	} else {
		return 0, fmt.Errorf("%s is neither seconds nor an HTTP date", describe(v))
	}
	if secs < 0 {
		return 0, fmt.Errorf("%v seconds is negative", secs)
	}
	if secs > MaxRetryAfter.Seconds() {
		return 0, fmt.Errorf("%v seconds is over the limit of 30 days", secs)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// describe shows a header value in an error message without dumping it whole.
func describe(v any) string {
	if s, ok := headerString(v); ok {
		return strconv.Quote(truncate(s, 40))
	}
	return fmt.Sprintf("a value of type %T", v)
}
