package bridge

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxHeaderDepth bounds nesting of converted header values; deeper values are dropped. A
// consumer using amqp091-go closes its connection on a field table or array nested more than
// 32 deep (its maxFieldDepth, counting the headers table as 0), and a top-level header value
// is depth 1 there: 31 here keeps every republish readable (bridge/badinput_test.go).
const maxHeaderDepth = 31

// deniedHeader reports whether an original header must never travel with the message: RabbitMQ's
// own routing and death bookkeeping (copying it would confuse the next dead-lettering), the
// retry scheduler's own headers (the republish sets fresh ones), the failure detail of the
// dead-lettered form (x-error-*, x-stack-trace, x-http-status, x-retry-after: they describe one
// failure, not the message) and CC/BCC (they would re-route the copy to other queues). name is
// lower-case.
func deniedHeader(name string) bool {
	switch name {
	case "cc", "bcc", "x-death", "x-retry-count", "x-retry-key", "x-http-status", "x-retry-after", "x-stack-trace":
		return true
	}
	return strings.HasPrefix(name, "x-first-death-") ||
		strings.HasPrefix(name, "x-last-death-") ||
		strings.HasPrefix(name, "x-error-")
}

// keepHeader applies the deny list, then the allow list when there is one.
func (o DecodeOptions) keepHeader(name string) bool {
	if deniedHeader(strings.ToLower(name)) {
		return false
	}
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

// headerConverter turns header values into values that survive a JSON round trip through
// Temporal unchanged, noting what it had to drop.
type headerConverter struct {
	notes []string
}

func (c *headerConverter) dropf(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// amqpHeaders converts the kept headers of an AMQP table; nil when none are kept.
func (c *headerConverter) amqpHeaders(t amqp.Table, o DecodeOptions) map[string]any {
	var out map[string]any
	for _, k := range sortedKeys(t) {
		if !o.keepHeader(k) {
			continue
		}
		v, ok := c.value(t[k], k, 0)
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Sorted so that notes come out in a stable order.
	sort.Strings(keys)
	return keys
}

// value converts one AMQP (or already JSON-decoded) value: strings, int64, float64, bools,
// nil, and maps and slices of those. []byte becomes a string when it is UTF-8, else base64;
// times become RFC 3339 strings. Anything else, and non-finite floats, is dropped with a note.
func (c *headerConverter) value(v any, path string, depth int) (any, bool) {
	if depth > maxHeaderDepth {
		c.dropf("header %s: dropped, nested deeper than %d levels", path, maxHeaderDepth)
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
		n, _ := amqpInt(x)
		return n, true
	case uint64:
		if n, ok := amqpInt(x); ok {
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
			c.dropf("header %s: dropped number %s out of range", path, x)
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
		c.dropf("header %s: dropped a value of unsupported type %T", path, v)
		return nil, false
	}
}

func (c *headerConverter) float(f float64, path string) (any, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		c.dropf("header %s: dropped non-finite number", path)
		return nil, false
	}
	return f, true
}

func (c *headerConverter) table(t map[string]any, path string, depth int) map[string]any {
	out := make(map[string]any, len(t))
	for _, k := range sortedKeys(t) {
		if v, ok := c.value(t[k], path+"."+k, depth+1); ok {
			out[k] = v
		}
	}
	return out
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
		return amqpInt(x)
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

// amqpInt widens any AMQP integer to int64; false for a uint64 beyond its range or a
// value that is not an integer.
func amqpInt(v any) (int64, bool) {
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
