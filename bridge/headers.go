package bridge

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The header policy (which headers travel, how their values are carried) is package
// message's; this file holds the bridge's allow list and the readers of the headers the
// decoder interprets.

// allowHeader applies the allow list, when there is one; the converter has applied the deny
// list (message.HeaderDenied) already, and a denied header is never let through.
func (o DecodeOptions) allowHeader(name string) bool {
	if o.AllowHeaders == nil {
		return true
	}
	for _, a := range o.AllowHeaders {
		if strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// header returns the value of a header, matching the name case-insensitively because
// hand-written producers send "X-Error-Reason" as often as "x-error-reason".
func header(t amqp.Table, name string) (any, bool) {
	if v, ok := t[name]; ok {
		return v, true
	}
	for k, v := range t {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// headerString reads a string-valued header (AMQP long strings arrive as string, byte
// arrays as []byte).
func headerString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		if utf8.Valid(x) {
			return string(x), true
		}
	}
	return "", false
}

// headerInt reads an integer-valued header: any AMQP integer, an integral float, or a
// decimal string.
func headerInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return message.HeaderInt64(x)
	case float32:
		return integral(float64(x))
	case float64:
		return integral(x)
	}
	if s, ok := headerString(v); ok {
		return parseInteger(strings.TrimSpace(s))
	}
	return 0, false
}

func integral(f float64) (int64, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) || f > math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// headerFloat reads a number-valued header: any AMQP number or a decimal string.
func headerFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return finite(float64(x))
	case float64:
		return finite(x)
	}
	if i, ok := headerInt(v); ok {
		return float64(i), true
	}
	if s, ok := headerString(v); ok {
		return parseDecimal(strings.TrimSpace(s))
	}
	return 0, false
}

func finite(f float64) (float64, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// republishedAt reads the date of the republish a report answers (x-retry-republished-at):
// unix milliseconds as the scheduler stamps them (any AMQP integer, an integral float, a
// decimal string: a consumer that copies headers may re-encode the long), or an RFC 3339
// string or an AMQP timestamp from a producer that dates it its own way. False for anything
// else and for a date not after the epoch; a date far off is the breaker counter's to clamp.
func republishedAt(v any) (time.Time, bool) {
	switch x := v.(type) {
	case time.Time:
		return positiveDate(x)
	}
	if ms, ok := headerInt(v); ok {
		return republishedAtMs(ms)
	}
	if s, ok := headerString(v); ok {
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s)); err == nil {
			return positiveDate(t)
		}
	}
	return time.Time{}, false
}

// republishedAtMs is the date of unix milliseconds ms; false when ms is not after the epoch.
func republishedAtMs(ms int64) (time.Time, bool) {
	if ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms).UTC(), true
}

func positiveDate(t time.Time) (time.Time, bool) {
	if t.UnixMilli() <= 0 {
		return time.Time{}, false
	}
	return t.UTC(), true
}
