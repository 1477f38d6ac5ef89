package activities

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// deniedHeaders are never copied onto a republished message, whatever the bridge let through
// (defense in depth, SPEC §8): CC/BCC would route copies to other queues, the death and delay
// headers belong to the broker and its plugins, and user-id must never be forged. Keys are
// lower case; headers are matched case-insensitively.
var deniedHeaders = map[string]bool{
	"cc":                     true,
	"bcc":                    true,
	"user-id":                true,
	"x-death":                true,
	"x-first-death-exchange": true,
	"x-first-death-queue":    true,
	"x-first-death-reason":   true,
	"x-last-death-exchange":  true,
	"x-last-death-queue":     true,
	"x-last-death-reason":    true,
	"x-delay":                true,
	// Set below; an older value in any spelling would contradict it.
	HeaderRetryCount: true,
	HeaderRetryKey:   true,
}

// republishHeaders builds the headers of a republish: the message's headers minus the denied
// ones, with JSON-decoded values turned into AMQP field types, plus x-retry-count and
// x-retry-key. It fails when a value has no AMQP encoding.
func republishHeaders(h map[string]any, attempt int, key string) (amqp.Table, error) {
	if attempt < 0 || attempt > math.MaxInt32 {
		return nil, fmt.Errorf("attempt %d out of range for %s", attempt, HeaderRetryCount)
	}
	t := make(amqp.Table, len(h)+2)
	for k, v := range h {
		if deniedHeaders[strings.ToLower(k)] {
			continue
		}
		t[k] = amqpValue(v)
	}
	t[HeaderRetryCount] = int32(attempt)
	t[HeaderRetryKey] = key
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	return t, nil
}

// amqpValue turns a header value as it comes out of JSON (through Temporal's data converter)
// into an AMQP field value: integral numbers become int64 (a consumer reading a count expects
// an integer, not a double), objects become tables. Anything else is returned unchanged for
// Table.Validate to judge.
func amqpValue(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt64 && x < math.MaxInt64 {
			return int64(x)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return amqpValue(f)
		}
		return string(x)
	case uint:
		return unsignedValue(uint64(x))
	case uint64:
		return unsignedValue(x)
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = amqpValue(e)
		}
		return t
	case amqp.Table:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = amqpValue(e)
		}
		return t
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = amqpValue(e)
		}
		return a
	case []string:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = e
		}
		return a
	default:
		return v
	}
}

// unsignedValue fits an unsigned integer into an AMQP signed 64-bit field where it can.
func unsignedValue(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u // no AMQP encoding: Validate rejects it
}
