package bridge

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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
func decodeXDeath(d Delivery, opts DecodeOptions) (message.FailureReport, error) {
	e, pe := firstXDeath(d.Headers)
	if pe != nil {
		return message.FailureReport{}, pe
	}
	fail := func(pe *PoisonError) (message.FailureReport, error) {
		pe.OriginalQueue = e.queue
		return message.FailureReport{}, pe
	}

	var rep message.FailureReport
	if v, ok := header(d.Headers, message.HeaderRetryCount); ok {
		n, ok := headerInt(v)
		if !ok {
			return fail(poisonf("x-retry-count header must be an integer, got %s", describe(v)))
		}
		if pe := checkCount("x-retry-count header", n); pe != nil {
			return fail(pe)
		}
		rep.RetryCount = int(n)
	}

	notes := &message.HeaderConverter{}
	str := func(name string) string {
		v, ok := header(d.Headers, name)
		if !ok || v == nil {
			return ""
		}
		s, ok := headerString(v)
		if !ok {
			notes.Dropf("%s header ignored: not a string", name)
		}
		return s
	}

	m := &rep.Message
	m.Payload = d.Body
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	// Republish to the queue that failed, by name on the default exchange: going back
	// through the original exchange would, for a fanout or topic exchange, deliver the
	// retry to every bound queue again, including consumers that had succeeded.
	m.OriginalQueue = e.queue
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
	m.TenantID = str(message.HeaderTenantID)
	m.Headers = notes.Convert(d.Headers, opts.allowHeader)

	rep.Failure.Reason = str(message.HeaderErrorReason)
	if rep.Failure.Reason == "" {
		rep.Failure.Reason = "dead-lettered from queue " + e.queue
		if e.reason != "" {
			rep.Failure.Reason += " (" + e.reason + ")"
		}
	}
	rep.Failure.Category = str(message.HeaderErrorCategory)
	if v, ok := header(d.Headers, message.HeaderErrorCode); ok && v != nil {
		if s, ok := headerString(v); ok {
			rep.Failure.ErrorCode = s
		} else if n, ok := headerInt(v); ok {
			rep.Failure.ErrorCode = strconv.FormatInt(n, 10)
		} else {
			notes.Dropf("x-error-code header ignored: not a string or integer")
		}
	}
	if v, ok := header(d.Headers, message.HeaderHTTPStatus); ok && v != nil {
		if n, ok := headerInt(v); ok && n >= 0 && n <= 999 {
			rep.Failure.HTTPStatus = int(n)
		} else {
			notes.Dropf("x-http-status header ignored: %s is not an HTTP status code", describe(v))
		}
	}
	if v, ok := header(d.Headers, message.HeaderRetryAfter); ok && v != nil {
		if ra, err := parseRetryAfter(v, opts.Now()); err != nil {
			notes.Dropf("x-retry-after header ignored: %v", err)
		} else {
			rep.Failure.RetryAfter = ra
		}
	}
	if key := str(message.HeaderRetryKey); len(key) > maxRetryKeyLen {
		notes.Dropf("x-retry-key header ignored: over %d bytes", maxRetryKeyLen)
	} else {
		rep.RetryKey = key
	}
	rep.Service = str(message.HeaderService)
	rep.ServiceVersion = str(message.HeaderServiceVersion)
	m.EventType = str(message.HeaderEventType)
	if m.EventType == "" {
		m.EventType = d.Type
	}
	notes.Notes = append(notes.Notes, setErrorDetail(&rep, str(message.HeaderErrorType), str(message.HeaderStackTrace))...)
	policyName := str(message.HeaderRetryPolicy)
	rep.Notes = notes.Notes
	rep.Source = SourceDeadLetter
	return finish(rep, policyName, d.MessageID, opts), nil
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
