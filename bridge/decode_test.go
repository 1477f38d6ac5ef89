package bridge

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeResolver routes "billing" to its own dead-letter queue and honours any override but
// "bogus", which it reports in a note, as policy.Catalog does.
type fakeResolver struct{}

func (fakeResolver) RuleCategory(policy.Origin, policy.Failure, string) (policy.Category, string, bool) {
	return "", "", false
}

func (fakeResolver) Choose(o policy.Origin, override string) (policy.Policy, string, string) {
	queue := o.Queue
	name, note := "standard", ""
	switch override {
	case "":
	case "bogus":
		note = `unknown policy "bogus"; used "standard"`
	default:
		name = override
	}
	dlq := ""
	if queue == "billing" {
		dlq = "billing.dlq"
	}
	return policy.Policy{Name: name, MaxRetries: 3}, dlq, note
}

func testOptions() DecodeOptions {
	return DecodeOptions{
		Resolver:               fakeResolver{},
		DefaultDeadLetterQueue: "manual-review.pending",
		Now:                    func() time.Time { return testNow },
	}
}

func jsonBody(t testing.TB, fields map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(fields)
	require.NoError(t, err)
	return b
}

func validRetryMessage() map[string]any {
	return map[string]any{
		"message_id":       "m-1",
		"original_payload": base64.StdEncoding.EncodeToString([]byte(`{"order":42}`)),
		"original_queue":   "orders",
		"error_reason":     "upstream timeout",
		"retry_count":      1,
		"max_retries":      3,
		"next_retry_at_ms": 1767225600000,
	}
}

func decodeJSONFields(t *testing.T, fields map[string]any) (message.FailureReport, error) {
	t.Helper()
	return Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, fields)}, testOptions())
}

func requirePoison(t *testing.T, err error) *PoisonError {
	t.Helper()
	var pe *PoisonError
	require.Error(t, err)
	require.True(t, errors.As(err, &pe), "want *PoisonError, got %T: %v", err, err)
	return pe
}

func TestDecodeJSONFull(t *testing.T) {
	f := validRetryMessage()
	f["original_exchange"] = "orders.x"
	f["original_routing_key"] = "orders.created"
	f["original_headers"] = map[string]any{
		"trace-id":    "abc",
		"attempts":    2,
		"ratio":       0.5,
		"flag":        true,
		"nested":      map[string]any{"a": []any{1, "b"}},
		"CC":          []any{"other"},
		"x-death":     []any{},
		"X-Error-Foo": "x",
		"x-retry-key": "k",
	}
	f["error_category"] = "transient"
	f["http_status"] = 503
	f["error_code"] = "ETIMEDOUT"
	f["retry_after_ms"] = 1500
	f["policy"] = "patient"
	f["tenant_id"] = "t-9"
	f["correlation_id"] = "c-7"
	f["retry_key"] = "m-1:1"
	f["service"] = "order-service"
	f["service_version"] = "1.2.3"
	f["original_content_type"] = "application/json"
	f["unknown_future_field"] = "ignored"

	rep, err := decodeJSONFields(t, f)
	require.NoError(t, err)

	assert.Equal(t, "m-1", rep.Message.MessageID)
	assert.Equal(t, []byte(`{"order":42}`), rep.Message.Payload)
	assert.Equal(t, "orders", rep.Message.OriginalQueue)
	assert.Equal(t, "orders.x", rep.Message.OriginalExchange)
	assert.Equal(t, "orders.created", rep.Message.OriginalRoutingKey)
	assert.Equal(t, map[string]any{
		"trace-id": "abc",
		"attempts": int64(2),
		"ratio":    0.5,
		"flag":     true,
		"nested":   map[string]any{"a": []any{int64(1), "b"}},
	}, rep.Message.Headers)
	assert.Equal(t, "application/json", rep.Message.Properties.ContentType)
	assert.Equal(t, "t-9", rep.Message.TenantID)
	assert.Equal(t, "c-7", rep.Message.CorrelationID)
	assert.Equal(t, 1, rep.RetryCount)
	assert.Equal(t, 3, rep.MaxRetries)
	assert.Equal(t, "m-1:1", rep.RetryKey)
	assert.Equal(t, policy.Failure{
		Category: "transient", HTTPStatus: 503, ErrorCode: "ETIMEDOUT", Reason: "upstream timeout",
		RetryAfter: 1500 * time.Millisecond,
	}, rep.Failure)
	assert.Equal(t, "patient", rep.Policy.Name)
	assert.Equal(t, "manual-review.pending", rep.DeadLetterQueue)
	assert.Equal(t, SourceRetryMessage, rep.Source)
	assert.Equal(t, "order-service", rep.Service)
	assert.Equal(t, "1.2.3", rep.ServiceVersion)
	assert.Equal(t, testNow, rep.ReportedAt)
	assert.Empty(t, rep.Notes)
}

func TestDecodeJSONVariants(t *testing.T) {
	t.Run("default exchange republishes to the queue by name", func(t *testing.T) {
		f := validRetryMessage()
		f["original_exchange"] = ""
		f["original_routing_key"] = "elsewhere"
		rep, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		assert.Empty(t, rep.Message.OriginalExchange)
		assert.Empty(t, rep.Message.OriginalRoutingKey)
	})
	t.Run("no content type but a JSON object with original_queue", func(t *testing.T) {
		rep, err := Decode(Delivery{Body: jsonBody(t, validRetryMessage())}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, "orders", rep.Message.OriginalQueue)
	})
	t.Run("content type with parameters and odd case", func(t *testing.T) {
		rep, err := Decode(Delivery{ContentType: "Application/JSON; charset=utf-8", Body: jsonBody(t, validRetryMessage())}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, "m-1", rep.Message.MessageID)
	})
	t.Run("missing message_id gets the fallback", func(t *testing.T) {
		f := validRetryMessage()
		delete(f, "message_id")
		rep, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		assert.Equal(t, message.FallbackMessageID("orders", []byte(`{"order":42}`)), rep.Message.MessageID)
		assert.Len(t, rep.Notes, 1)
	})
	t.Run("oversized message_id gets the fallback", func(t *testing.T) {
		f := validRetryMessage()
		f["message_id"] = strings.Repeat("x", message.MaxMessageIDLen+1)
		rep, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(rep.Message.MessageID, "sha256-"))
		assert.Contains(t, rep.Notes[0], "fallback")
	})
	t.Run("a tenant id too long for a search attribute is poison", func(t *testing.T) {
		f := validRetryMessage()
		f["tenant_id"] = strings.Repeat("t", maxKeywordLen)
		_, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		f["tenant_id"] = strings.Repeat("t", maxKeywordLen+1)
		_, err = decodeJSONFields(t, f)
		var pe *PoisonError
		require.ErrorAs(t, err, &pe)
		assert.Contains(t, pe.Reason, "tenant id is 256 bytes long")
		assert.Equal(t, "m-1", pe.MessageID)
	})
	t.Run("null optionals are absent", func(t *testing.T) {
		f := validRetryMessage()
		for _, k := range []string{"message_id", "error_reason", "retry_count", "max_retries", "http_status", "retry_after_ms", "original_headers", "policy"} {
			f[k] = nil
		}
		rep, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		assert.Equal(t, 0, rep.RetryCount)
		assert.Nil(t, rep.Message.Headers)
	})
	t.Run("integral float counts", func(t *testing.T) {
		body := `{"original_queue":"q","original_payload":"","retry_count":2.0,"max_retries":1e1}`
		rep, err := Decode(Delivery{ContentType: "application/json", Body: []byte(body)}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, 2, rep.RetryCount)
		assert.Equal(t, 10, rep.MaxRetries)
		assert.Equal(t, []byte{}, rep.Message.Payload)
	})
	t.Run("route's dead-letter queue and unknown policy note", func(t *testing.T) {
		f := validRetryMessage()
		f["original_queue"] = "billing"
		f["policy"] = "bogus"
		rep, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		assert.Equal(t, "billing.dlq", rep.DeadLetterQueue)
		assert.Equal(t, "standard", rep.Policy.Name)
		assert.Equal(t, []string{`unknown policy "bogus"; used "standard"`}, rep.Notes)
	})
	t.Run("allow list keeps only listed headers, deny list still wins", func(t *testing.T) {
		f := validRetryMessage()
		f["original_headers"] = map[string]any{"Trace-Id": "a", "other": "b", "bcc": "c"}
		opts := testOptions()
		opts.AllowHeaders = []string{"trace-id", "BCC"}
		rep, err := Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f)}, opts)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{"Trace-Id": "a"}, rep.Message.Headers)
	})
	t.Run("correlation id falls back to the delivery's", func(t *testing.T) {
		rep, err := Decode(Delivery{ContentType: "application/json", CorrelationID: "c-d", Body: jsonBody(t, validRetryMessage())}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, "c-d", rep.Message.CorrelationID)
	})
	t.Run("default resolver is the built-in catalogue", func(t *testing.T) {
		rep, err := Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, validRetryMessage())}, DecodeOptions{})
		require.NoError(t, err)
		assert.Equal(t, policy.DefaultName, rep.Policy.Name)
		assert.Equal(t, DefaultDeadLetterQueue, rep.DeadLetterQueue)
		assert.False(t, rep.ReportedAt.IsZero())
	})
}

func TestDecodeJSONPoison(t *testing.T) {
	long := strings.Repeat("q", 256)
	cases := []struct {
		name   string
		body   string
		edit   func(map[string]any)
		reason string // substring of the reason
		queue  string // OriginalQueue expected on the error
	}{
		{name: "not JSON", body: `{"original_queue":`, reason: "not a JSON object"},
		{name: "JSON array", body: `[1,2]`, reason: "body is not a JSON object: got an array"},
		{name: "JSON string", body: `"orders"`, reason: "body is not a JSON object: got a string"},
		{name: "JSON null", body: `null`, reason: "JSON null"},
		{name: "trailing garbage", body: `{"original_queue":"q","original_payload":""} x`, reason: "not a JSON object"},
		{name: "missing original_queue", edit: func(f map[string]any) { delete(f, "original_queue") }, reason: "original_queue is missing"},
		{name: "null original_queue", edit: func(f map[string]any) { f["original_queue"] = nil }, reason: "original_queue is missing"},
		{name: "empty original_queue", edit: func(f map[string]any) { f["original_queue"] = "" }, reason: "original_queue is empty"},
		{name: "original_queue not a string", edit: func(f map[string]any) { f["original_queue"] = 7 }, reason: "original_queue must be a string, got a number"},
		{name: "original_queue too long", edit: func(f map[string]any) { f["original_queue"] = long }, reason: "original_queue is 256 bytes long", queue: long},
		{name: "missing original_payload", edit: func(f map[string]any) { delete(f, "original_payload") }, reason: "original_payload is missing", queue: "orders"},
		{name: "original_payload not a string", edit: func(f map[string]any) { f["original_payload"] = []any{1} }, reason: "original_payload must be a string, got an array", queue: "orders"},
		{name: "original_payload bad base64", edit: func(f map[string]any) { f["original_payload"] = "%%%" }, reason: "original_payload is not standard base64", queue: "orders"},
		{name: "original_payload url-safe base64", edit: func(f map[string]any) { f["original_payload"] = "-_-_" }, reason: "original_payload is not standard base64", queue: "orders"},
		{name: "message_id not a string", edit: func(f map[string]any) { f["message_id"] = 12 }, reason: "message_id must be a string, got a number", queue: "orders"},
		{name: "retry_count a string", edit: func(f map[string]any) { f["retry_count"] = "1" }, reason: "retry_count must be an integer, got a string", queue: "orders"},
		{name: "retry_count fractional", edit: func(f map[string]any) { f["retry_count"] = 1.5 }, reason: "retry_count must be an integer, got 1.5", queue: "orders"},
		{name: "retry_count negative", edit: func(f map[string]any) { f["retry_count"] = -1 }, reason: "retry_count is negative", queue: "orders"},
		{name: "retry_count too large", edit: func(f map[string]any) { f["retry_count"] = 10001 }, reason: "retry_count is 10001, over the limit of 10000", queue: "orders"},
		{name: "max_retries negative", edit: func(f map[string]any) { f["max_retries"] = -3 }, reason: "max_retries is negative", queue: "orders"},
		{name: "max_retries a boolean", edit: func(f map[string]any) { f["max_retries"] = true }, reason: "max_retries must be an integer, got a boolean", queue: "orders"},
		{name: "retry_after_ms negative", edit: func(f map[string]any) { f["retry_after_ms"] = -1 }, reason: "retry_after_ms is negative", queue: "orders"},
		{name: "retry_after_ms over 30 days", edit: func(f map[string]any) { f["retry_after_ms"] = (30*24*time.Hour + time.Millisecond).Milliseconds() }, reason: "retry_after_ms is 2592000001, over the limit of 30 days", queue: "orders"},
		{name: "http_status out of range", edit: func(f map[string]any) { f["http_status"] = 1000 }, reason: "http_status 1000 is not an HTTP status code", queue: "orders"},
		{name: "error_reason not a string", edit: func(f map[string]any) { f["error_reason"] = map[string]any{} }, reason: "error_reason must be a string, got an object", queue: "orders"},
		{name: "original_headers an array", edit: func(f map[string]any) { f["original_headers"] = []any{} }, reason: "original_headers must be an object, got an array", queue: "orders"},
		{name: "original_exchange too long", edit: func(f map[string]any) { f["original_exchange"] = long }, reason: "original_exchange is 256 bytes long", queue: "orders"},
		{name: "original_routing_key too long", edit: func(f map[string]any) { f["original_routing_key"] = long }, reason: "original_routing_key is 256 bytes long", queue: "orders"},
		{name: "next_retry_at_ms a string", edit: func(f map[string]any) { f["next_retry_at_ms"] = "soon" }, reason: "next_retry_at_ms must be an integer, got a string", queue: "orders"},
		{name: "http_status fractional", edit: func(f map[string]any) { f["http_status"] = 503.5 }, reason: "http_status must be an integer, got 503.5", queue: "orders"},
		{name: "retry_after_ms an object", edit: func(f map[string]any) { f["retry_after_ms"] = map[string]any{} }, reason: "retry_after_ms must be an integer, got an object", queue: "orders"},
		{name: "tenant_id a boolean", edit: func(f map[string]any) { f["tenant_id"] = false }, reason: "tenant_id must be a string, got a boolean", queue: "orders"},
		{name: "retry_count overflows int64", body: `{"original_queue":"orders","original_payload":"","retry_count":1e30}`, reason: "retry_count must be an integer", queue: "orders"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if tc.edit != nil {
				f := validRetryMessage()
				tc.edit(f)
				body = jsonBody(t, f)
			}
			_, err := Decode(Delivery{ContentType: "application/json", MessageID: "amqp-id", Body: body}, testOptions())
			pe := requirePoison(t, err)
			assert.Equal(t, KindPoison, pe.Kind)
			assert.Contains(t, pe.Reason, tc.reason)
			assert.Equal(t, tc.queue, pe.OriginalQueue)
			assert.NotEmpty(t, pe.MessageID)
		})
	}
}

// Integer fields and integer headers take JSON's number syntax, with an integral value when
// written as a fraction or with an exponent.
func TestParseInteger(t *testing.T) {
	for s, want := range map[string]int64{
		"3": 3, "-3": -3, "+3": 3, "3.0": 3, "1e2": 100, "1E+2": 100, "-0": 0, "-0.0": 0,
		"9223372036854775807": math.MaxInt64, "2.5e1": 25,
	} {
		n, ok := parseInteger(s)
		if assert.True(t, ok, "%q", s) {
			assert.Equal(t, want, n, "%q", s)
		}
	}
	for _, s := range []string{"", "1.5", "1e30", "1e400", "0x10", "1_000", "Inf", "NaN", " 3", "3 ", ".5", "1.", "--1", "1e", "true"} {
		_, ok := parseInteger(s)
		assert.False(t, ok, "%q", s)
	}
	for s, want := range map[string]float64{"1.5": 1.5, "-2.25e1": -22.5, "0": 0} {
		f, ok := parseDecimal(s)
		if assert.True(t, ok, "%q", s) {
			assert.Equal(t, want, f, "%q", s)
		}
	}
	for _, s := range []string{"", "1e400", "0x1p3", "1_0.5", "NaN", "-Inf", ".5", "+1.5", "1.5 x"} {
		_, ok := parseDecimal(s)
		assert.False(t, ok, "%q", s)
	}
}

func TestDecodeNeitherForm(t *testing.T) {
	for name, d := range map[string]Delivery{
		"plain text":                    {ContentType: "text/plain", Body: []byte("hello")},
		"no content type, not JSON":     {Body: []byte("hello")},
		"no content type, JSON without": {Body: []byte(`{"queue":"orders"}`)},
		"empty":                         {},
		"JSON with other content type":  {ContentType: "text/plain", Body: jsonBody(t, validRetryMessage())},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(d, testOptions())
			pe := requirePoison(t, err)
			assert.Equal(t, KindPoison, pe.Kind)
			assert.Equal(t, "not a RetryMessage and no x-death header", pe.Reason)
		})
	}
}

func TestDecodeOversize(t *testing.T) {
	opts := testOptions()
	opts.MaxMessageBytes = 100
	body := make([]byte, 101)

	_, err := Decode(Delivery{ContentType: "application/json", MessageID: "big-1", Body: body}, opts)
	pe := requirePoison(t, err)
	assert.Equal(t, KindOversize, pe.Kind)
	assert.Contains(t, pe.Reason, "101 bytes, over the limit of 100 bytes")
	assert.Equal(t, "big-1", pe.MessageID)

	_, err = Decode(Delivery{Headers: xDeath("orders", "", "orders"), Body: body}, opts)
	pe = requirePoison(t, err)
	assert.Equal(t, KindOversize, pe.Kind)
	assert.Equal(t, "orders", pe.OriginalQueue)

	_, err = Decode(Delivery{ContentType: "application/json", Body: body[:100]}, opts)
	pe = requirePoison(t, err)
	assert.Equal(t, KindPoison, pe.Kind, "at the limit is not oversize")

	_, err = Decode(Delivery{ContentType: "text/plain", Body: make([]byte, DefaultMaxMessageBytes+1)}, testOptions())
	assert.Equal(t, KindOversize, requirePoison(t, err).Kind, "default limit is 512 KiB")
}

// protoMessage encodes RetryMessage's protobuf form by hand.
type protoMessage struct {
	id, queue, reason   string
	payload             []byte
	retryCount, maxRet  int32
	nextRetryAt         int64
	omitQueue, omitBody bool
}

func (m protoMessage) encode() []byte {
	var b []byte
	if m.id != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, m.id)
	}
	if !m.omitBody {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, m.payload)
	}
	if !m.omitQueue {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, m.queue)
	}
	if m.reason != "" {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, m.reason)
	}
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(m.retryCount)))
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(m.maxRet)))
	b = protowire.AppendTag(b, 7, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.nextRetryAt))
	return b
}

func decodeProto(body []byte) (message.FailureReport, error) {
	return Decode(Delivery{ContentType: "application/x-protobuf", CorrelationID: "c-1", Body: body}, testOptions())
}

func TestDecodeProtobuf(t *testing.T) {
	pm := protoMessage{id: "p-1", payload: []byte{0, 1, 2, 0xff}, queue: "orders", reason: "boom", retryCount: 2, maxRet: 5, nextRetryAt: 1767225600000}
	rep, err := decodeProto(pm.encode())
	require.NoError(t, err)
	assert.Equal(t, "p-1", rep.Message.MessageID)
	assert.Equal(t, []byte{0, 1, 2, 0xff}, rep.Message.Payload)
	assert.Equal(t, "orders", rep.Message.OriginalQueue)
	assert.Equal(t, "boom", rep.Failure.Reason)
	assert.Equal(t, 2, rep.RetryCount)
	assert.Equal(t, 5, rep.MaxRetries)
	assert.Equal(t, "c-1", rep.Message.CorrelationID)
	assert.Equal(t, SourceRetryMessage, rep.Source)
	assert.Equal(t, "standard", rep.Policy.Name)

	t.Run("unknown fields are skipped", func(t *testing.T) {
		b := pm.encode()
		b = protowire.AppendTag(b, 99, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, 100, protowire.BytesType)
		b = protowire.AppendString(b, "x")
		b = protowire.AppendTag(b, 101, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, 1)
		b = protowire.AppendTag(b, 102, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, 1)
		rep, err := decodeProto(b)
		require.NoError(t, err)
		assert.Equal(t, "p-1", rep.Message.MessageID)
	})
	t.Run("absent payload is empty (proto3)", func(t *testing.T) {
		rep, err := decodeProto(protoMessage{id: "p-2", queue: "orders", omitBody: true}.encode())
		require.NoError(t, err)
		assert.Equal(t, []byte{}, rep.Message.Payload)
	})
	t.Run("no id gets the fallback", func(t *testing.T) {
		rep, err := decodeProto(protoMessage{queue: "orders", payload: []byte("x")}.encode())
		require.NoError(t, err)
		assert.Equal(t, message.FallbackMessageID("orders", []byte("x")), rep.Message.MessageID)
	})
	t.Run("id that is not UTF-8 gets the fallback", func(t *testing.T) {
		rep, err := decodeProto(protoMessage{id: "\xff\xfe", queue: "orders"}.encode())
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(rep.Message.MessageID, "sha256-"))
		assert.Contains(t, strings.Join(rep.Notes, ";"), "not valid UTF-8")
	})
	t.Run("application/protobuf too", func(t *testing.T) {
		_, err := Decode(Delivery{ContentType: "application/protobuf", Body: pm.encode()}, testOptions())
		require.NoError(t, err)
	})
}

func TestDecodeProtobufPoison(t *testing.T) {
	good := protoMessage{id: "p-1", payload: []byte("x"), queue: "orders"}.encode()
	wrongType := protowire.AppendTag(nil, 3, protowire.VarintType)
	wrongType = protowire.AppendVarint(wrongType, 1)
	wrongVarint := protowire.AppendTag(nil, 3, protowire.BytesType)
	wrongVarint = protowire.AppendString(wrongVarint, "orders")
	wrongVarint = protowire.AppendTag(wrongVarint, 5, protowire.BytesType)
	wrongVarint = protowire.AppendString(wrongVarint, "1")
	badUnknown := append(append([]byte(nil), good...), protowire.AppendTag(nil, 50, protowire.BytesType)...)
	badUnknown = append(badUnknown, 5, 'a')
	cases := map[string]struct {
		body   []byte
		reason string
	}{
		"truncated":             {good[:len(good)-1], "malformed protobuf"},
		"field number zero":     {[]byte{0x00, 0x01}, "malformed protobuf"},
		"bad wire type":         {protowire.AppendVarint(nil, 100<<3|7), "malformed protobuf"},
		"known field bad type":  {[]byte{0x1f}, "original_queue (field 3) has wire type 7"},
		"queue with varint":     {wrongType, "original_queue (field 3) has wire type 0, want length-delimited"},
		"retry_count as bytes":  {wrongVarint, "retry_count (field 5) has wire type 2, want varint"},
		"missing queue":         {protoMessage{id: "p", omitQueue: true}.encode(), "original_queue (field 3) is missing"},
		"empty queue":           {protoMessage{id: "p"}.encode(), "original_queue is empty"},
		"queue not UTF-8":       {protoMessage{queue: "\xff"}.encode(), "original_queue (field 3) is not valid UTF-8"},
		"queue too long":        {protoMessage{queue: strings.Repeat("q", 300)}.encode(), "original_queue is 300 bytes long"},
		"negative retry_count":  {protoMessage{queue: "orders", retryCount: -1}.encode(), "retry_count is negative"},
		"negative max_retries":  {protoMessage{queue: "orders", maxRet: -2}.encode(), "max_retries is negative"},
		"retry_count too large": {protoMessage{queue: "orders", retryCount: 20000}.encode(), "retry_count is 20000"},
		"truncated unknown":     {badUnknown, "malformed protobuf in unknown field 50"},
		"JSON body":             {jsonBody(t, validRetryMessage()), "malformed protobuf"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := decodeProto(tc.body)
			pe := requirePoison(t, err)
			assert.Equal(t, KindPoison, pe.Kind)
			assert.Contains(t, pe.Reason, tc.reason)
		})
	}
}

// xDeath is the x-death header RabbitMQ writes when it dead-letters a message rejected
// from queue, published to exchange with routing key key.
func xDeath(queue, exchange, key string) amqp.Table {
	return amqp.Table{"x-death": []any{
		amqp.Table{
			"count":        int64(1),
			"reason":       "rejected",
			"queue":        queue,
			"time":         testNow.Add(-time.Minute),
			"exchange":     exchange,
			"routing-keys": []any{key},
		},
		amqp.Table{"count": int64(1), "reason": "expired", "queue": "older", "exchange": "", "routing-keys": []any{"older"}},
	}}
}

func TestDecodeXDeath(t *testing.T) {
	h := xDeath("orders", "orders.x", "orders.created")
	h["x-first-death-queue"] = "orders"
	h["x-first-death-reason"] = "rejected"
	h["x-last-death-exchange"] = "orders.x"
	h["CC"] = []any{"audit"}
	h["bcc"] = []any{"secret"}
	h["x-retry-count"] = int32(2)
	h["x-retry-key"] = "o-1:2"
	h["X-Error-Reason"] = "payment gateway 503"
	h["x-error-category"] = "transient"
	h["x-error-code"] = int64(42)
	h["x-http-status"] = "503"
	h["x-retry-after"] = int32(30)
	h["x-retry-policy"] = "patient"
	h["x-tenant-id"] = "t-1"
	h["trace-id"] = "tr-1"
	h["bytes-utf8"] = []byte("hello")
	h["bytes-raw"] = []byte{0xff, 0x00}
	h["sent-at"] = testNow
	h["nested"] = amqp.Table{"n": int16(3), "f": float32(1.5), "l": []any{int8(1), uint8(2)}}
	h["nan"] = math.NaN()
	h["decimal"] = amqp.Decimal{Scale: 2, Value: 1234}

	d := Delivery{
		Body:            []byte("original body"),
		Headers:         h,
		ContentType:     "application/json",
		ContentEncoding: "identity",
		MessageID:       "o-1",
		CorrelationID:   "c-1",
		Type:            "order.created",
		AppID:           "order-service",
		ReplyTo:         "replies",
		Priority:        4,
		Timestamp:       testNow.Add(-time.Hour),
		Exchange:        "dlx",
		RoutingKey:      "orders.created",
	}
	rep, err := Decode(d, testOptions())
	require.NoError(t, err)

	m := rep.Message
	assert.Equal(t, "o-1", m.MessageID)
	assert.Equal(t, []byte("original body"), m.Payload)
	assert.Equal(t, "orders", m.OriginalQueue)
	assert.Empty(t, m.OriginalExchange, "republished to the failed queue by name, not through a possibly fanout exchange")
	assert.Empty(t, m.OriginalRoutingKey)
	assert.Equal(t, message.Properties{
		ContentType: "application/json", ContentEncoding: "identity", Type: "order.created",
		AppID: "order-service", ReplyTo: "replies", Priority: 4, Timestamp: testNow.Add(-time.Hour),
	}, m.Properties)
	assert.Equal(t, "c-1", m.CorrelationID)
	assert.Equal(t, "t-1", m.TenantID)
	assert.Equal(t, map[string]any{
		"x-retry-policy": "patient",
		"x-tenant-id":    "t-1",
		"trace-id":       "tr-1",
		"bytes-utf8":     "hello",
		"bytes-raw":      base64.StdEncoding.EncodeToString([]byte{0xff, 0x00}),
		"sent-at":        "2026-03-01T12:00:00Z",
		"nested":         map[string]any{"n": int64(3), "f": 1.5, "l": []any{int64(1), int64(2)}},
	}, m.Headers)
	assert.Equal(t, 2, rep.RetryCount)
	assert.Equal(t, "o-1:2", rep.RetryKey)
	assert.Equal(t, policy.Failure{
		Category: "transient", HTTPStatus: 503, ErrorCode: "42", Reason: "payment gateway 503", RetryAfter: 30 * time.Second,
	}, rep.Failure)
	assert.Equal(t, "patient", rep.Policy.Name)
	assert.Equal(t, SourceDeadLetter, rep.Source)
	assert.Equal(t, testNow, rep.ReportedAt)
	notes := strings.Join(rep.Notes, "\n")
	assert.Contains(t, notes, "header nan: dropped non-finite number")
	assert.Contains(t, notes, "header decimal: dropped a value of unsupported type amqp091.Decimal")

	// The report travels through Temporal as JSON.
	_, err = json.Marshal(rep)
	require.NoError(t, err)
}

func TestDecodeXDeathVariants(t *testing.T) {
	t.Run("default exchange republishes to the queue by name", func(t *testing.T) {
		rep, err := Decode(Delivery{Headers: xDeath("orders", "", "orders"), Body: []byte("b")}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, "", rep.Message.OriginalExchange)
		assert.Equal(t, "", rep.Message.OriginalRoutingKey)
		assert.Equal(t, 0, rep.RetryCount)
		assert.Equal(t, "dead-lettered from queue orders (rejected)", rep.Failure.Reason)
		assert.Equal(t, message.FallbackMessageID("orders", []byte("b")), rep.Message.MessageID)
		assert.Nil(t, rep.Message.Headers)
	})
	t.Run("retry-after forms", func(t *testing.T) {
		for v, want := range map[any]time.Duration{
			"120":        2 * time.Minute,
			" 1.5 ":      1500 * time.Millisecond,
			float64(2.5): 2500 * time.Millisecond,
			int64(0):     0,
			testNow.Add(90 * time.Second).Format(http1123): 90 * time.Second,
			testNow.Add(-time.Hour).Format(http1123):       0,
		} {
			h := xDeath("orders", "", "orders")
			h["x-retry-after"] = v
			rep, err := Decode(Delivery{Headers: h}, testOptions())
			require.NoError(t, err)
			assert.Equal(t, want, rep.Failure.RetryAfter, "x-retry-after %v", v)
			assert.Empty(t, rep.Notes[1:], "x-retry-after %v", v) // notes[0] is the fallback id
		}
	})
	t.Run("malformed error detail is ignored with a note", func(t *testing.T) {
		for name, h := range map[string]amqp.Table{
			"retry-after garbage":  {"x-retry-after": "soon"},
			"retry-after negative": {"x-retry-after": int32(-5)},
			"retry-after too long": {"x-retry-after": int64(31 * 24 * 3600)},
			"retry-after NaN":      {"x-retry-after": math.NaN()},
			"http status garbage":  {"x-http-status": "five hundred"},
			"http status range":    {"x-http-status": int32(1000)},
			"reason not a string":  {"x-error-reason": int32(1)},
			"code not a string":    {"x-error-code": 1.5},
			"retry key too long":   {"x-retry-key": strings.Repeat("k", 2000)},
		} {
			full := xDeath("orders", "", "orders")
			for k, v := range h {
				full[k] = v
			}
			rep, err := Decode(Delivery{MessageID: "id", Headers: full}, testOptions())
			require.NoError(t, err, name)
			assert.Len(t, rep.Notes, 1, name)
			assert.Zero(t, rep.Failure.RetryAfter, name)
			assert.Zero(t, rep.Failure.HTTPStatus, name)
			assert.Empty(t, rep.RetryKey, name)
		}
	})
	t.Run("x-retry-count as a string", func(t *testing.T) {
		h := xDeath("orders", "", "orders")
		h["x-retry-count"] = "3"
		rep, err := Decode(Delivery{Headers: h}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, 3, rep.RetryCount)
	})
	t.Run("protobuf service payload is the original body", func(t *testing.T) {
		body := protoMessage{id: "x", queue: "y"}.encode()
		rep, err := Decode(Delivery{ContentType: "application/x-protobuf", Headers: xDeath("orders", "", "orders"), Body: body}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, SourceDeadLetter, rep.Source)
		assert.Equal(t, body, rep.Message.Payload)
	})
	t.Run("service JSON payload is the original body", func(t *testing.T) {
		body := []byte(`{"order":1}`)
		rep, err := Decode(Delivery{ContentType: "application/json", Headers: xDeath("orders", "", "orders"), Body: body}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, SourceDeadLetter, rep.Source)
		assert.Equal(t, body, rep.Message.Payload)
	})
	t.Run("dead-lettered RetryMessage is a RetryMessage", func(t *testing.T) {
		rep, err := Decode(Delivery{ContentType: "application/json", Headers: xDeath("retry.delay", "", "retry.delay"), Body: jsonBody(t, validRetryMessage())}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, SourceRetryMessage, rep.Source)
		assert.Equal(t, "orders", rep.Message.OriginalQueue)
	})
	t.Run("x-death as []amqp.Table", func(t *testing.T) {
		h := amqp.Table{"x-death": []amqp.Table{{"queue": "orders"}}}
		rep, err := Decode(Delivery{Headers: h}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, "orders", rep.Message.OriginalQueue)
	})
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"

func TestDecodeXDeathPoison(t *testing.T) {
	entry := func(e amqp.Table) amqp.Table { return amqp.Table{"x-death": []any{e}} }
	withCount := func(v any) amqp.Table {
		h := xDeath("orders", "", "orders")
		h["x-retry-count"] = v
		return h
	}
	cases := map[string]struct {
		headers amqp.Table
		reason  string
		queue   string
	}{
		"not an array":            {amqp.Table{"x-death": "orders"}, "x-death header is not an array of tables", ""},
		"null":                    {amqp.Table{"x-death": nil}, "x-death header is not an array of tables", ""},
		"empty":                   {amqp.Table{"x-death": []any{}}, "x-death header is an empty array", ""},
		"entry not a table":       {amqp.Table{"x-death": []any{"orders"}}, "x-death[0] is not a table", ""},
		"queue missing":           {entry(amqp.Table{"exchange": ""}), "x-death[0].queue is missing or not a string", ""},
		"queue not a string":      {entry(amqp.Table{"queue": int32(1)}), "x-death[0].queue is missing or not a string", ""},
		"queue empty":             {entry(amqp.Table{"queue": ""}), "x-death[0].queue is empty", ""},
		"queue too long":          {entry(amqp.Table{"queue": strings.Repeat("q", 256)}), "x-death[0].queue is 256 bytes long", ""},
		"exchange not a string":   {entry(amqp.Table{"queue": "q", "exchange": int32(1)}), "x-death[0].exchange is not a string", ""},
		"routing-keys not array":  {entry(amqp.Table{"queue": "q", "routing-keys": "k"}), "x-death[0].routing-keys is not an array", ""},
		"routing key not string":  {entry(amqp.Table{"queue": "q", "routing-keys": []any{int32(1)}}), "x-death[0].routing-keys[0] is not a string", ""},
		"x-retry-count garbage":   {withCount("three"), `x-retry-count header must be an integer, got "three"`, "orders"},
		"x-retry-count fraction":  {withCount(1.5), "x-retry-count header must be an integer", "orders"},
		"x-retry-count negative":  {withCount(int32(-1)), "x-retry-count header is negative", "orders"},
		"x-retry-count too large": {withCount(int64(10001)), "x-retry-count header is 10001, over the limit", "orders"},
		"x-retry-count a table":   {withCount(amqp.Table{}), "x-retry-count header must be an integer, got a value of type amqp091.Table", "orders"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(Delivery{MessageID: "m", Headers: tc.headers, Body: []byte("b")}, testOptions())
			pe := requirePoison(t, err)
			assert.Equal(t, KindPoison, pe.Kind)
			assert.Contains(t, pe.Reason, tc.reason)
			assert.Equal(t, tc.queue, pe.OriginalQueue)
			assert.Equal(t, "m", pe.MessageID)
		})
	}
}

func TestDeliveryFrom(t *testing.T) {
	ts := testNow
	d := amqp.Delivery{
		Body: []byte("b"), Headers: amqp.Table{"a": "b"}, ContentType: "ct", ContentEncoding: "ce",
		MessageId: "id", CorrelationId: "cid", Type: "ty", AppId: "app", ReplyTo: "rt", Priority: 3,
		Timestamp: ts, Exchange: "ex", RoutingKey: "rk", UserId: "billing-svc",
	}
	assert.Equal(t, Delivery{
		Body: []byte("b"), Headers: amqp.Table{"a": "b"}, ContentType: "ct", ContentEncoding: "ce",
		MessageID: "id", CorrelationID: "cid", Type: "ty", AppID: "app", ReplyTo: "rt", Priority: 3,
		Timestamp: ts, Exchange: "ex", RoutingKey: "rk", UserID: "billing-svc",
	}, DeliveryFrom(d))
}

func TestPoisonErrorMessage(t *testing.T) {
	assert.Equal(t, "poison message: x is bad", (&PoisonError{Kind: KindPoison, Reason: "x is bad"}).Error())
}

// The catalogue the service runs with satisfies the resolver interface.
var _ PolicyResolver = (*policy.Catalog)(nil)
