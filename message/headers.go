package message

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header names the scheduler reads, writes or refuses. AMQP header names are case-sensitive on
// the wire, but producers spell them in any case, so every comparison with these constants is
// case-insensitive (see HeaderDenied; the bridge's readers do the same).
const (
	// HeaderRetryCount and HeaderRetryKey are stamped on every republish: the retry's number
	// (1 for the first) and its idempotency key "<message_id>:<n>". Reported back, they say
	// which retry failed.
	HeaderRetryCount = "x-retry-count"
	HeaderRetryKey   = "x-retry-key"
	// HeaderRetryRepublishedAt is stamped on every republish too: when it went out, in unix
	// milliseconds (an AMQP long). Reported back, it dates the failure for the destination's
	// circuit breaker, which judges it against the republishes of that moment's window
	// rather than those of the moment the report arrives.
	HeaderRetryRepublishedAt = "x-retry-republished-at"

	// HeaderDeath is RabbitMQ's dead-lettering history of a message; HeaderFirstDeathPrefix and
	// HeaderLastDeathPrefix start its summaries (x-first-death-queue, x-last-death-reason, ...).
	HeaderDeath            = "x-death"
	HeaderFirstDeathPrefix = "x-first-death-"
	HeaderLastDeathPrefix  = "x-last-death-"

	// The failure detail a dead-lettered message may carry: they describe one failure, not
	// the message. HeaderErrorPrefix starts every x-error-* header.
	HeaderErrorPrefix   = "x-error-"
	HeaderErrorReason   = "x-error-reason"
	HeaderErrorCategory = "x-error-category"
	HeaderErrorCode     = "x-error-code"
	HeaderErrorType     = "x-error-type"
	HeaderStackTrace    = "x-stack-trace"
	HeaderHTTPStatus    = "x-http-status"
	HeaderRetryAfter    = "x-retry-after"

	// What else a dead-lettered message may say about itself and its reporter.
	HeaderRetryPolicy    = "x-retry-policy"
	HeaderTenantID       = "x-tenant-id"
	HeaderService        = "x-service"
	HeaderServiceVersion = "x-service-version"
	HeaderEventType      = "x-event-type"

	// HeaderDeadReason and HeaderOriginalQueue are set on every dead-letter envelope, so that
	// a consumer of the dead-letter queue can sort without parsing the body.
	HeaderDeadReason    = "x-dead-reason"
	HeaderOriginalQueue = "x-original-queue"

	// HeaderCC and HeaderBCC are RabbitMQ's sender-selected distribution: extra routing keys.
	HeaderCC  = "CC"
	HeaderBCC = "BCC"
	// HeaderDelay is the delayed-message exchange plugin's delay.
	HeaderDelay = "x-delay"
	// HeaderUserID names a publishing user, which only the broker may vouch for (it checks
	// the user-id property against the connection's user).
	HeaderUserID = "user-id"
)

// MaxHeaderDepth bounds the nesting of carried header values; deeper values are dropped. A
// consumer using amqp091-go closes its connection on a field table or array nested more than
// 32 deep (its maxFieldDepth, counting the headers table as 0), and a top-level header value
// is depth 1 there: 31 here keeps every republish readable.
const MaxHeaderDepth = 31

// MaxRetryCount bounds every retry count a report carries (retry_count, max_retries,
// x-retry-count). It is past any policy's retries: a larger count is a bug or an attack.
const MaxRetryCount = 10000

// deniedHeaders and deniedHeaderPrefixes are the headers that never travel with a message
// (HeaderDenied says why).
var (
	deniedHeaders = []string{
		HeaderCC, HeaderBCC,
		HeaderDeath, HeaderDelay, HeaderUserID,
		HeaderRetryCount, HeaderRetryKey, HeaderRetryRepublishedAt,
		HeaderStackTrace, HeaderHTTPStatus, HeaderRetryAfter,
	}
	deniedHeaderPrefixes = []string{HeaderFirstDeathPrefix, HeaderLastDeathPrefix, HeaderErrorPrefix}
)

// HeaderDenied reports whether a header must never travel with a message, in any spelling. It
// is one rule for both ends: the bridge does not carry such a header into the workflow's
// state or an envelope, and the republish drops it again, whatever the state holds (state
// recorded under an older rule, say). Denied are:
//   - routing: CC and BCC would send the retry to other queues as well;
//   - the broker's and its plugins' bookkeeping: x-death and its x-first-death-* and
//     x-last-death-* summaries (copied, they would confuse the next dead-lettering), x-delay
//     (a delayed-message exchange would hold the retry back again), user-id (an identity
//     claim is the publisher's connection's to make, never a copy's);
//   - the scheduler's own x-retry-count, x-retry-key and x-retry-republished-at (each
//     republish sets fresh ones; an older value in another spelling would contradict them);
//   - failure detail (x-error-*, x-stack-trace, x-http-status, x-retry-after): it describes
//     one failure, not the message, and a retry that fails again reports its own.
func HeaderDenied(name string) bool {
	for _, d := range deniedHeaders {
		if strings.EqualFold(name, d) {
			return true
		}
	}
	for _, p := range deniedHeaderPrefixes {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return false
}

// HeaderConverter turns header values (an AMQP table's, or JSON-decoded ones) into values
// that survive a JSON round trip through Temporal unchanged, noting what it had to drop.
// The zero value is ready to use.
type HeaderConverter struct {
	// Notes say what was dropped and why, one line each, in a stable order.
	Notes []string
}

// Dropf adds a note.
func (c *HeaderConverter) Dropf(format string, args ...any) {
	c.Notes = append(c.Notes, fmt.Sprintf(format, args...))
}

// Convert converts the headers of t that are not denied and that keep accepts (a nil keep
// accepts all); nil when none are kept.
func (c *HeaderConverter) Convert(t map[string]any, keep func(name string) bool) map[string]any {
	var out map[string]any
	for _, k := range slices.Sorted(maps.Keys(t)) {
		if HeaderDenied(k) || (keep != nil && !keep(k)) {
			continue
		}
		v, ok := c.Value(t[k], k)
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(t))
		}
		out[k] = v
	}
	return out
}

// Value converts the value of the header at path: strings, int64, float64, bools, nil, and
// maps and slices of those. Every AMQP integer becomes int64 (a uint64 beyond it float64);
// []byte becomes a string when it is UTF-8, else base64; times become RFC 3339 strings.
// Anything else (decimals, say), non-finite floats and values nested deeper than
// MaxHeaderDepth are dropped with a note: ok is false.
func (c *HeaderConverter) Value(v any, path string) (converted any, ok bool) {
	return c.value(v, path, 0)
}

func (c *HeaderConverter) value(v any, path string, depth int) (any, bool) {
	if depth > MaxHeaderDepth {
		c.Dropf("header %s: dropped, nested deeper than %d levels", path, MaxHeaderDepth)
		return nil, false
	}
	switch x := v.(type) {
	case nil:
		return nil, true
	case string:
		return x, true
	case bool:
		return x, true
	case int, int8, int16, int32, int64, uint8, uint16, uint32:
		n, _ := HeaderInt64(x)
		return n, true
	case uint64:
		if n, ok := HeaderInt64(x); ok {
			return n, true
		}
		return float64(x), true
	case float32:
		return c.float(float64(x), path)
	case float64:
		return c.float(x, path)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, true
		}
		f, err := x.Float64()
		if err != nil {
			c.Dropf("header %s: dropped number %s out of range", path, x)
			return nil, false
		}
		return c.float(f, path)
	case []byte:
		if utf8.Valid(x) {
			return string(x), true
		}
		return base64.StdEncoding.EncodeToString(x), true
	case time.Time:
		return x.UTC().Format(time.RFC3339), true
	case amqp.Table:
		return c.table(x, path, depth), true
	case map[string]any:
		return c.table(x, path, depth), true
	case []any:
		out := make([]any, 0, len(x))
		for i, e := range x {
			if ev, ok := c.value(e, fmt.Sprintf("%s[%d]", path, i), depth+1); ok {
				out = append(out, ev)
			}
		}
		return out, true
	case []amqp.Table:
		out := make([]any, 0, len(x))
		for i, e := range x {
			out = append(out, c.table(e, fmt.Sprintf("%s[%d]", path, i), depth+1))
		}
		return out, true
	default:
		c.Dropf("header %s: dropped a value of unsupported type %T", path, v)
		return nil, false
	}
}

func (c *HeaderConverter) float(f float64, path string) (any, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		c.Dropf("header %s: dropped non-finite number", path)
		return nil, false
	}
	return f, true
}

// table converts a nested table; its entries are one level deeper than the table.
func (c *HeaderConverter) table(t map[string]any, path string, depth int) map[string]any {
	out := make(map[string]any, len(t))
	for _, k := range slices.Sorted(maps.Keys(t)) {
		if v, ok := c.value(t[k], path+"."+k, depth+1); ok {
			out[k] = v
		}
	}
	return out
}

// HeaderInt64 widens any AMQP integer to int64; false for a uint64 beyond its range or a
// value that is not an integer.
func HeaderInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

// AMQPHeaders turns carried headers, as they come out of JSON (through Temporal's data
// converter), into an AMQP table: denied headers are left out, integral numbers become int64
// (a consumer reading a count expects an integer, not a double), objects become tables. It
// fails when a value has no AMQP encoding.
func AMQPHeaders(h map[string]any) (amqp.Table, error) {
	t := make(amqp.Table, len(h))
	for k, v := range h {
		if HeaderDenied(k) {
			continue
		}
		t[k] = amqpValue(v)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	return t, nil
}

// amqpValue converts one JSON-decoded value; anything it does not know is returned unchanged
// for Table.Validate to judge.
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
		return amqpTable(x)
	case amqp.Table:
		return amqpTable(x)
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

func amqpTable(m map[string]any) amqp.Table {
	t := make(amqp.Table, len(m))
	for k, e := range m {
		t[k] = amqpValue(e)
	}
	return t
}

// unsignedValue fits an unsigned integer into an AMQP signed 64-bit field where it can.
func unsignedValue(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u // no AMQP encoding: Validate rejects it
}
