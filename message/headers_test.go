package message

import (
	"encoding/json"
	"github.com/retry-scheduler/retry-scheduler/message/headertest"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeaderDenied(t *testing.T) {
	for _, name := range []string{
		"CC", "cc", "BCC", "Bcc", "x-death", "X-Death", "x-delay", "user-id", "User-Id",
		"x-first-death-queue", "x-first-death-anything", "X-Last-Death-Reason",
		"x-retry-count", "X-Retry-Count", "x-retry-key", "x-retry-republished-at", "X-Retry-Republished-At",
		"x-error-reason", "X-Error-Foo", "x-error-", "x-stack-trace", "x-http-status", "x-retry-after",
	} {
		assert.True(t, HeaderDenied(name), name)
	}
	for _, name := range []string{
		"", "trace-id", "x-tenant-id", "x-retry-policy", "x-event-type", "x-service", "x-service-version",
		"x-deaths", "x-delayed", "ccc", "x-error", "x-first-death", "x-retry-counts",
	} {
		assert.False(t, HeaderDenied(name), name)
	}
}

func TestConvert(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.FixedZone("X", 3600))
	in := amqp.Table{
		"trace-id": "t", "CC": []any{"x"}, "x-error-reason": "boom",
		"i8": int8(-1), "u32": uint32(7), "u64": uint64(math.MaxUint64), "f32": float32(1.5),
		"utf8": []byte("hi"), "raw": []byte{0xff, 0}, "at": at, "nil": nil, "ok": true,
		"n": json.Number("12"), "nf": json.Number("1.25"),
		"nan": math.NaN(), "inf": math.Inf(1), "decimal": amqp.Decimal{Scale: 1, Value: 5},
		"nested": amqp.Table{"l": []any{int16(3), math.NaN()}, "tables": []amqp.Table{{"k": "v"}}},
	}
	var c HeaderConverter
	got := c.Convert(in, nil)
	assert.Equal(t, map[string]any{
		"trace-id": "t", "i8": int64(-1), "u32": int64(7), "u64": float64(math.MaxUint64), "f32": 1.5,
		"utf8": "hi", "raw": "/wA=", "at": "2026-05-01T11:00:00Z", "nil": nil, "ok": true,
		"n": int64(12), "nf": 1.25,
		"nested": map[string]any{"l": []any{int64(3)}, "tables": []any{map[string]any{"k": "v"}}},
	}, got)
	assert.Equal(t, []string{
		"header decimal: dropped a value of unsupported type amqp091.Decimal",
		"header inf: dropped non-finite number",
		"header nan: dropped non-finite number",
		"header nested.l[1]: dropped non-finite number",
	}, c.Notes, "sorted by name, so stable")

	keepTrace := func(name string) bool { return strings.EqualFold(name, "Trace-Id") || name == "CC" }
	assert.Equal(t, map[string]any{"trace-id": "t"}, (&HeaderConverter{}).Convert(in, keepTrace),
		"the allow list narrows; it never lets a denied header through")
	assert.Nil(t, (&HeaderConverter{}).Convert(amqp.Table{"x-death": []any{}}, nil), "none kept: nil")
}

func TestConvertBoundsDepth(t *testing.T) {
	deep := func(levels int, leaf any) any {
		v := leaf
		for range levels {
			v = []any{v}
		}
		return v
	}
	var c HeaderConverter
	got, ok := c.Value(deep(MaxHeaderDepth, "leaf"), "h")
	require.True(t, ok)
	assert.Equal(t, deep(MaxHeaderDepth, "leaf"), got, "a leaf at depth MaxHeaderDepth is kept")
	assert.Empty(t, c.Notes)
	got, ok = c.Value(deep(MaxHeaderDepth+1, "leaf"), "h")
	require.True(t, ok)
	assert.Equal(t, deep(MaxHeaderDepth, []any{}), got, "one level deeper, the leaf is dropped")
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "nested deeper than 31 levels")
}

func TestAMQPHeadersFilters(t *testing.T) {
	got, err := AMQPHeaders(map[string]any{
		"tenant": "acme", "X-Trace": "t-1",
		"CC": []any{"other"}, "bcc": []any{"x"}, "User-Id": "root", "x-death": []any{map[string]any{"count": 1.0}},
		"x-first-death-queue": "q", "X-Last-Death-Reason": "rejected", "x-delay": 5000.0,
		"X-Retry-Count": 7.0, "x-retry-key": "old:7", "x-error-reason": "boom", "x-http-status": 503.0,
	})
	require.NoError(t, err)
	assert.Equal(t, amqp.Table{"tenant": "acme", "X-Trace": "t-1"}, got)
}

func TestAMQPValue(t *testing.T) {
	assert.Equal(t, int64(42), amqpValue(json.Number("42")))
	assert.Equal(t, 4.5, amqpValue(json.Number("4.5")))
	assert.Equal(t, int64(5), amqpValue(uint(5)))
	assert.Equal(t, 1e300, amqpValue(1e300), "too big for int64: stays a double")
	assert.True(t, math.IsNaN(amqpValue(math.NaN()).(float64)))
	assert.Equal(t, []any{"a", "b"}, amqpValue([]string{"a", "b"}))
	assert.Equal(t, amqp.Table{"n": int64(1)}, amqpValue(amqp.Table{"n": 1.0}))
	assert.Equal(t, amqp.Table{"n": int64(1)}, amqpValue(map[string]any{"n": 1.0}))
}

func TestAMQPHeadersRejectsUnencodable(t *testing.T) {
	for name, v := range map[string]any{
		"struct":     struct{}{},
		"uint64 max": uint64(math.MaxUint64),
		"nested":     map[string]any{"x": []any{complex(1, 2)}},
	} {
		_, err := AMQPHeaders(map[string]any{"h": v})
		assert.Error(t, err, name)
	}
}

// roundTrip carries an AMQP table the way a message travels: converted by the bridge, through
// Temporal's JSON data converter (plain encoding/json), and back to AMQP on republish.
func roundTrip(t *testing.T, in amqp.Table) (carried map[string]any, out amqp.Table) {
	t.Helper()
	var c HeaderConverter
	carried = c.Convert(in, nil)
	b, err := json.Marshal(carried)
	require.NoError(t, err, "a carried header always encodes")
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	out, err = AMQPHeaders(back)
	require.NoError(t, err, "a carried header always has an AMQP encoding")
	return carried, out
}

// class is the kind of value a consumer sees: the converter turns byte arrays and times into
// strings and every integer width into one, and JSON does not tell 2.0 from 2.
func class(v any) string {
	switch v.(type) {
	case nil:
		return "void"
	case bool:
		return "bool"
	case string, []byte, time.Time:
		return "string"
	case int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64:
		return "number"
	case amqp.Table, map[string]any:
		return "table"
	case []any, []amqp.Table:
		return "array"
	}
	return "other"
}

// sameValue compares a value after the round trip with the carried one: numbers as float64
// (Temporal's JSON keeps 53 bits of an integer), tables and arrays element by element.
func sameValue(t *testing.T, path string, carried, out any) {
	t.Helper()
	if class(carried) != class(out) {
		t.Errorf("%s: %T became %T", path, carried, out)
		return
	}
	switch c := carried.(type) {
	case int64:
		assert.Equal(t, float64(c), number(out), path)
	case float64:
		assert.Equal(t, c, number(out), path)
	case map[string]any:
		o := out.(amqp.Table)
		assert.Len(t, o, len(c), path)
		for k, v := range c {
			sameValue(t, path+"."+k, v, o[k])
		}
	case []any:
		o := out.([]any)
		require.Len(t, o, len(c), path)
		for i := range c {
			sameValue(t, path, c[i], o[i])
		}
	default:
		assert.Equal(t, carried, out, path)
	}
}

func number(v any) float64 {
	if i, ok := v.(int64); ok {
		return float64(i)
	}
	return v.(float64)
}

// checkRoundTrip asserts that every header kept from in comes back from the republish with its
// class and value, that nothing else comes back, and that the republished table is valid.
func checkRoundTrip(t *testing.T, in amqp.Table) {
	t.Helper()
	carried, out := roundTrip(t, in)
	require.NoError(t, out.Validate())
	assert.Len(t, out, len(carried))
	for k, v := range carried {
		o, ok := out[k]
		if !assert.True(t, ok, "header %q lost", k) {
			continue
		}
		assert.Equal(t, class(in[k]), class(o), "header %q changed class", k)
		sameValue(t, k, v, o)
	}
	for k := range in {
		if HeaderDenied(k) {
			assert.NotContains(t, out, k)
		}
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	checkRoundTrip(t, amqp.Table{
		"s": "text", "b": true, "f": false, "nil": nil,
		"i8": int8(-8), "i16": int16(-16), "i32": int32(-32), "i64": int64(math.MinInt64),
		"u8": uint8(8), "u16": uint16(16), "u32": uint32(math.MaxUint32), "u64": uint64(math.MaxUint64),
		"big": int64(1<<53 + 1), "f32": float32(0.25), "f64": -1e-300, "whole": 2.0,
		"utf8": []byte("héllo"), "raw": []byte{0, 0xff}, "at": time.Unix(1_700_000_000, 0),
		"table":  amqp.Table{"n": int32(1), "t": amqp.Table{"deep": []any{"x", int64(2)}}},
		"array":  []any{"a", int16(3), 1.5, nil, amqp.Table{"k": true}, []any{}},
		"tables": []amqp.Table{{"q": "orders"}},
		// Dropped on the way in, never back out.
		"CC": []any{"x"}, "x-death": []any{amqp.Table{"queue": "q"}}, "X-Retry-Key": "k:1", "x-error-code": "E1",
	})
}

// FuzzHeadersRoundTrip checks the round trip on arbitrary tables: every kept header comes back
// from the republish with its class and value.
func FuzzHeadersRoundTrip(f *testing.F) {
	f.Add([]byte{3, 1, 'a', 1, 2, 'x', 5, 2, 'c', 'c', 5, 7, 1, 'n', 7, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	f.Add([]byte{2, 1, 't', 10, 2, 1, 'u', 4, 9, 9, 9, 9, 1, 'l', 11, 3, 1, 0, 8, 1})
	f.Fuzz(func(t *testing.T, spec []byte) {
		in := (&headertest.Gen{B: spec, Names: []string{"x-death", "CC", "X-Retry-Key"}, UTF8: true}).Table(0)
		checkRoundTrip(t, in)
	})
}
