package bridge

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// The bad-input catalogue (issue 6): every kind of bad input a producer can send, and what
// becomes of it. Each is either accepted as a report (with a note where something was dropped
// or replaced) or refused as poison/oversize with a reason naming the problem, and the
// dead-letter envelope the bridge publishes for it carries the delivery's bytes unchanged.
// e2e/badinput_test.go runs a selection through the real broker and Temporal.

// badInput is one catalogue entry.
type badInput struct {
	name string
	d    Delivery
	opts *DecodeOptions // nil: catalogueOptions
	// kind is KindPoison or KindOversize for a refusal, "" for an accepted report.
	kind string
	// reason is a substring of the refusal's reason.
	reason string
	// check inspects an accepted report.
	check func(t *testing.T, rep message.FailureReport)
}

// catalogueOptions are the service's defaults: the 512 KiB limit and the built-in catalogue.
func catalogueOptions() DecodeOptions {
	return DecodeOptions{Now: func() time.Time { return testNow }}
}

func retryJSON(t testing.TB, edit func(map[string]any)) Delivery {
	f := validRetryMessage()
	if edit != nil {
		edit(f)
	}
	return Delivery{ContentType: "application/json", MessageID: "amqp-id", Body: jsonBody(t, f)}
}

func rawJSON(body string) Delivery {
	return Delivery{ContentType: "application/json", MessageID: "amqp-id", Body: []byte(body)}
}

func payloadOf(n int) []byte { return bytes.Repeat([]byte("p"), n) }

// manyHeaders is n headers h00000... with value v: an int64 encodes in 16 bytes in an AMQP
// table (10,000 of them do not fit one frame), a bool in 9 (10,000 fit).
func manyHeaders(n int, v any) map[string]any {
	h := make(map[string]any, n)
	for i := 0; i < n; i++ {
		h[fmt.Sprintf("h%05d", i)] = v
	}
	return h
}

func deadLettered(queue string, headers amqp.Table, body []byte) Delivery {
	h := xDeath(queue, "", queue)
	for k, v := range headers {
		h[k] = v
	}
	return Delivery{Headers: h, MessageID: "svc-1", Body: body}
}

func nested(depth int) any {
	var v any = "bottom"
	for i := 0; i < depth; i++ {
		v = map[string]any{"n": v}
	}
	return v
}

func badInputCatalogue(t *testing.T) []badInput {
	const kib, mib = 1 << 10, 1 << 20
	hugeID := strings.Repeat("x", 10*kib)
	return []badInput{
		// Empty and not-JSON bodies.
		{name: "empty body, no content type", d: Delivery{MessageID: "e-1"}, kind: KindPoison, reason: "not a RetryMessage and no x-death header"},
		{name: "empty body, JSON content type", d: rawJSON(""), kind: KindPoison, reason: "body is not a JSON object"},
		{name: "not JSON", d: rawJSON("hello, I am text"), kind: KindPoison, reason: "body is not a JSON object"},
		{name: "truncated JSON", d: rawJSON(`{"original_queue":"orders","original_pay`), kind: KindPoison, reason: "body is not a JSON object"},
		{name: "JSON but an array", d: rawJSON(`[{"original_queue":"orders"}]`), kind: KindPoison, reason: "body is not a JSON object"},
		{name: "JSON null", d: rawJSON(`null`), kind: KindPoison, reason: "JSON null"},
		{name: "binary garbage as protobuf", d: Delivery{ContentType: "application/x-protobuf", Body: []byte{0xff, 0xff, 0xff, 0x0f}}, kind: KindPoison},

		// Wrong types.
		{name: "message_id a number", d: retryJSON(t, func(f map[string]any) { f["message_id"] = 42 }), kind: KindPoison, reason: "message_id must be a string, got a number"},
		{name: "original_queue an object", d: retryJSON(t, func(f map[string]any) { f["original_queue"] = map[string]any{} }), kind: KindPoison, reason: "original_queue must be a string, got an object"},
		{name: "original_payload a number", d: retryJSON(t, func(f map[string]any) { f["original_payload"] = 7 }), kind: KindPoison, reason: "original_payload must be a string, got a number"},
		{name: "retry_count a string", d: retryJSON(t, func(f map[string]any) { f["retry_count"] = "2" }), kind: KindPoison, reason: "retry_count must be an integer, got a string"},
		{name: "retry_count fractional", d: retryJSON(t, func(f map[string]any) { f["retry_count"] = 0.5 }), kind: KindPoison, reason: "retry_count must be an integer, got 0.5"},
		{name: "http_status a boolean", d: retryJSON(t, func(f map[string]any) { f["http_status"] = true }), kind: KindPoison, reason: "http_status must be an integer, got a boolean"},
		{name: "original_headers a string", d: retryJSON(t, func(f map[string]any) { f["original_headers"] = "x-a: 1" }), kind: KindPoison, reason: "original_headers must be an object, got a string"},
		{name: "x-death a string", d: Delivery{Headers: amqp.Table{"x-death": "orders"}, Body: []byte("b")}, kind: KindPoison, reason: "x-death header is not an array of tables"},
		{name: "x-retry-count a table", d: deadLettered("orders", amqp.Table{"x-retry-count": amqp.Table{"n": 1}}, []byte("b")), kind: KindPoison, reason: "x-retry-count header must be an integer, got a value of type amqp091.Table"},

		// Missing or huge message_id: a documented fallback id, not poison (message.MessageIDOrFallback).
		{name: "missing message_id", d: retryJSON(t, func(f map[string]any) { delete(f, "message_id") }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, message.FallbackMessageID("orders", []byte(`{"order":42}`)), rep.Message.MessageID)
			assert.Contains(t, strings.Join(rep.Notes, "|"), "message has no id; using fallback sha256-")
		}},
		{name: "huge message_id (10 KiB)", d: retryJSON(t, func(f map[string]any) { f["message_id"] = hugeID }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, message.FallbackMessageID("orders", []byte(`{"order":42}`)), rep.Message.MessageID)
			assert.Contains(t, strings.Join(rep.Notes, "|"), "message id unusable")
		}},
		{name: "message_id with a newline", d: retryJSON(t, func(f map[string]any) { f["message_id"] = "a\nb" }), check: func(t *testing.T, rep message.FailureReport) {
			assert.True(t, strings.HasPrefix(rep.Message.MessageID, "sha256-"))
		}},
		{name: "dead-lettered without message_id property", d: func() Delivery { d := deadLettered("orders", nil, []byte("b")); d.MessageID = ""; return d }(), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, message.FallbackMessageID("orders", []byte("b")), rep.Message.MessageID)
		}},

		// Base64 that is not.
		{name: "base64 with bad characters", d: retryJSON(t, func(f map[string]any) { f["original_payload"] = "not base64!" }), kind: KindPoison, reason: "original_payload is not standard base64"},
		{name: "base64 without padding", d: retryJSON(t, func(f map[string]any) { f["original_payload"] = "YWJj ZA" }), kind: KindPoison, reason: "original_payload is not standard base64"},
		{name: "base64 URL alphabet", d: retryJSON(t, func(f map[string]any) { f["original_payload"] = "-_8=" }), kind: KindPoison, reason: "original_payload is not standard base64"},

		// Payload sizes against the default 512 KiB limit.
		{name: "256 KiB payload (RetryMessage)", d: retryJSON(t, func(f map[string]any) {
			f["original_payload"] = base64.StdEncoding.EncodeToString(payloadOf(256 * kib))
		}), check: func(t *testing.T, rep message.FailureReport) {
			assert.Len(t, rep.Message.Payload, 256*kib)
		}},
		{name: "256 KiB payload (dead-lettered)", d: deadLettered("orders", nil, payloadOf(256*kib)), check: func(t *testing.T, rep message.FailureReport) {
			assert.Len(t, rep.Message.Payload, 256*kib)
		}},
		{name: "2 MiB payload", d: retryJSON(t, func(f map[string]any) { f["original_payload"] = base64.StdEncoding.EncodeToString(payloadOf(2 * mib)) }), kind: KindOversize, reason: "over the limit of 524288 bytes"},
		{name: "2 MiB dead-lettered", d: deadLettered("orders", nil, payloadOf(2*mib)), kind: KindOversize, reason: "message body is 2097152 bytes, over the limit of 524288 bytes"},
		{name: "16 MiB dead-lettered", d: deadLettered("orders", nil, payloadOf(16*mib)), kind: KindOversize, reason: "message body is 16777216 bytes"},

		// 10,000 headers: kept when the republish can carry them (one AMQP frame, MaxHeaderBytes),
		// else refused now rather than failing every republish (found by this catalogue).
		// 10,000 headers: more than an AMQP client reads in one table (amqp091-go: 8192) and,
		// as integers, more than one frame holds. A republish carrying them could never be
		// consumed, so they are refused now (found by this catalogue). 8,000 small ones travel.
		{name: "10,000 original_headers", d: retryJSON(t, func(f map[string]any) { f["original_headers"] = manyHeaders(10000, true) }), kind: KindPoison, reason: "headers hold 10000 entries, over the limit of 8192 that AMQP clients (amqp091-go) read"},
		{name: "10,000 AMQP headers", d: deadLettered("orders", amqp.Table(manyHeaders(10000, true)), []byte("b")), kind: KindPoison, reason: "headers hold 10000 entries"},
		{name: "10,000 entries in one header", d: retryJSON(t, func(f map[string]any) { f["original_headers"] = map[string]any{"list": make([]any, 10000)} }), kind: KindPoison, reason: "header list hold 10000 entries"},
		{name: "8,000 small original_headers", d: retryJSON(t, func(f map[string]any) { f["original_headers"] = manyHeaders(8000, true) }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Len(t, rep.Message.Headers, 8000)
			assert.Equal(t, true, rep.Message.Headers["h07999"])
		}},
		{name: "8,000 headers too large for one frame", d: retryJSON(t, func(f map[string]any) { f["original_headers"] = manyHeaders(8000, 12345) }), kind: KindPoison, reason: "headers encode to 128004 bytes, over the limit of 126976: the republish must fit in one AMQP frame"},

		// Header values of forbidden types: dropped with a note naming the header, never poison
		// (the message can be retried without them), except where the count would be guessed.
		{name: "header of unsupported type", d: deadLettered("orders", amqp.Table{"x-price": amqp.Decimal{Scale: 2, Value: 1999}, "ok": "kept"}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, map[string]any{"ok": "kept"}, rep.Message.Headers)
			assert.Contains(t, strings.Join(rep.Notes, "|"), "header x-price: dropped a value of unsupported type amqp091.Decimal")
		}},
		{name: "header NaN and Inf", d: deadLettered("orders", amqp.Table{"nan": math.NaN(), "inf": float32(math.Inf(1))}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			assert.Empty(t, rep.Message.Headers)
			notes := strings.Join(rep.Notes, "|")
			assert.Contains(t, notes, "header nan: dropped non-finite number")
			assert.Contains(t, notes, "header inf: dropped non-finite number")
		}},
		{name: "header nested 40 deep", d: retryJSON(t, func(f map[string]any) { f["original_headers"] = map[string]any{"deep": nested(40), "ok": 1} }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Contains(t, strings.Join(rep.Notes, "|"), "nested deeper than 31 levels")
			assert.Equal(t, int64(1), rep.Message.Headers["ok"])
		}},
		{name: "routing headers CC and BCC never travel", d: deadLettered("orders", amqp.Table{"CC": []any{"audit"}, "BCC": []any{"spy"}, "user-id": "bob"}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			assert.NotContains(t, rep.Message.Headers, "CC")
			assert.NotContains(t, rep.Message.Headers, "BCC")
		}},
		{name: "error-detail headers of wrong types", d: deadLettered("orders", amqp.Table{"x-http-status": "teapot", "x-retry-after": amqp.Table{}, "x-error-reason": int32(5)}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			notes := strings.Join(rep.Notes, "|")
			assert.Contains(t, notes, "x-http-status header ignored")
			assert.Contains(t, notes, "x-retry-after header ignored")
			assert.Contains(t, notes, "x-error-reason header ignored: not a string")
			assert.Equal(t, "dead-lettered from queue orders (rejected)", rep.Failure.Reason)
		}},

		// original_queue that does not exist: the decoder cannot know; the republish is
		// unroutable and the workflow dead-letters it (e2e TestBadInputUnknownQueue).
		{name: "original_queue that does not exist", d: retryJSON(t, func(f map[string]any) { f["original_queue"] = "no.such.queue" }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, "no.such.queue", rep.Message.OriginalQueue)
		}},

		// Negative or enormous counts and retry-after.
		{name: "retry_count negative", d: retryJSON(t, func(f map[string]any) { f["retry_count"] = -1 }), kind: KindPoison, reason: "retry_count is negative (-1)"},
		{name: "retry_count enormous", d: retryJSON(t, func(f map[string]any) { f["retry_count"] = 1e12 }), kind: KindPoison, reason: "retry_count is 1000000000000, over the limit of 10000"},
		{name: "retry_count beyond int64", d: rawJSON(`{"original_queue":"orders","original_payload":"","retry_count":99999999999999999999999}`), kind: KindPoison, reason: "retry_count must be an integer"},
		{name: "max_retries negative", d: retryJSON(t, func(f map[string]any) { f["max_retries"] = -5 }), kind: KindPoison, reason: "max_retries is negative (-5)"},
		{name: "retry_after_ms negative", d: retryJSON(t, func(f map[string]any) { f["retry_after_ms"] = -1000 }), kind: KindPoison, reason: "retry_after_ms is negative (-1000)"},
		{name: "retry_after_ms enormous", d: retryJSON(t, func(f map[string]any) { f["retry_after_ms"] = int64(math.MaxInt64) }), kind: KindPoison, reason: "over the limit of 30 days"},
		{name: "x-retry-count negative", d: deadLettered("orders", amqp.Table{"x-retry-count": int32(-1)}, []byte("b")), kind: KindPoison, reason: "x-retry-count header is negative (-1)"},
		{name: "x-retry-count enormous", d: deadLettered("orders", amqp.Table{"x-retry-count": int64(math.MaxInt64)}, []byte("b")), kind: KindPoison, reason: "over the limit of 10000"},
		// A header-borne Retry-After only shapes the delay: a bad one is ignored, not fatal.
		{name: "x-retry-after negative", d: deadLettered("orders", amqp.Table{"x-retry-after": int32(-30)}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			assert.Zero(t, rep.Failure.RetryAfter)
			assert.Contains(t, strings.Join(rep.Notes, "|"), "x-retry-after header ignored: -30 seconds is negative")
		}},
		{name: "x-retry-after enormous", d: deadLettered("orders", amqp.Table{"x-retry-after": "99999999999"}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			assert.Zero(t, rep.Failure.RetryAfter)
			assert.Contains(t, strings.Join(rep.Notes, "|"), "over the limit of 30 days")
		}},

		// Unknown policy: the routed policy, and a note in the state.
		{name: "unknown policy name", d: retryJSON(t, func(f map[string]any) { f["policy"] = "no-such-policy" }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, policy.DefaultName, rep.Policy.Name)
			assert.Contains(t, rep.Notes, `unknown policy "no-such-policy"; used "default"`)
		}},
		{name: "unknown policy header", d: deadLettered("orders", amqp.Table{"x-retry-policy": "nope"}, []byte("b")), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, policy.DefaultName, rep.Policy.Name)
			assert.Contains(t, rep.Notes, `unknown policy "nope"; used "default"`)
		}},

		// Unknown category: kept as reported, ignored by classification (status, code, reason decide).
		{name: "unknown category with a status", d: retryJSON(t, func(f map[string]any) { f["error_category"] = "cosmic-rays"; f["http_status"] = 503 }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, "cosmic-rays", rep.Failure.Category)
			assert.Equal(t, policy.Transient, policy.Classify(rep.Failure))
		}},
		{name: "unknown category alone", d: retryJSON(t, func(f map[string]any) { f["error_category"] = "cosmic-rays"; f["error_reason"] = "?" }), check: func(t *testing.T, rep message.FailureReport) {
			assert.Equal(t, policy.Unknown, policy.Classify(rep.Failure))
		}},
	}
}

func TestBadInputCatalogue(t *testing.T) {
	for _, tc := range badInputCatalogue(t) {
		t.Run(tc.name, func(t *testing.T) {
			opts := catalogueOptions()
			if tc.opts != nil {
				opts = *tc.opts
			}
			rep, err := Decode(tc.d, opts)
			if tc.kind == "" {
				require.NoError(t, err, "want an accepted report")
				assert.NotEmpty(t, rep.Message.MessageID)
				assert.NotEmpty(t, rep.Message.OriginalQueue)
				// What the bridge hands Temporal survives its JSON encoding unchanged.
				b, err := json.Marshal(rep)
				require.NoError(t, err)
				var back message.FailureReport
				require.NoError(t, json.Unmarshal(b, &back))
				assert.Equal(t, rep.Message.Payload, back.Message.Payload)
				if tc.check != nil {
					tc.check(t, rep)
				}
				return
			}

			pe := requirePoison(t, err)
			assert.Equal(t, tc.kind, pe.Kind)
			assert.Contains(t, pe.Reason, tc.reason)
			// Refused means dead-lettered with the reason and the delivery's bytes as they came.
			env := envelopeFor(t, tc.d, pe, opts)
			assert.Equal(t, tc.kind, env.DeadReason)
			assert.Equal(t, pe.Reason, env.DeadDetail)
			assert.NotEmpty(t, env.MessageID)
			assert.True(t, bytes.Equal(tc.d.Body, env.OriginalMessage.Payload), "the envelope lost bytes of the delivery")
		})
	}
}

// envelopeFor is what lands on the dead-letter queue for a refused delivery, read back as a
// consumer of that queue reads it.
func envelopeFor(t *testing.T, d Delivery, pe *PoisonError, opts DecodeOptions) message.Envelope {
	t.Helper()
	ad := amqp.Delivery{Body: d.Body, Headers: d.Headers, ContentType: d.ContentType, MessageId: d.MessageID, CorrelationId: d.CorrelationID}
	pub, err := deadletter.Publishing(poisonEnvelope(ad, pe, opts.withDefaults(), testNow), deadletter.Options{})
	require.NoError(t, err)
	assert.Equal(t, pe.Kind, pub.Headers["x-dead-reason"])
	var env message.Envelope
	require.NoError(t, json.Unmarshal(pub.Body, &env))
	return env
}

// tableSize follows the AMQP 0-9-1 field-table encoding: 4 bytes of length, then per field a
// short-string name (1 + len), a type octet and the value.
func TestTableSize(t *testing.T) {
	assert.Equal(t, 4, tableSize(nil))
	assert.Equal(t, 4+1+1+1+8, tableSize(map[string]any{"a": int64(1)}))
	assert.Equal(t, 4+1+2+1+4+3, tableSize(map[string]any{"ab": "xyz"}))
	assert.Equal(t, 4+(1+1+1+1)+(1+1+1)+(1+1+1+8), tableSize(map[string]any{"b": true, "n": nil, "f": 1.5}))
	assert.Equal(t, 4+1+1+1+(4+1+1+1+8), tableSize(map[string]any{"t": map[string]any{"i": int64(2)}}))
	assert.Equal(t, 4+1+1+1+(4+(1+8)+(1+4+2)), tableSize(map[string]any{"a": []any{int64(1), "xy"}}))

	at := manyHeaders((MaxHeaderBytes-4)/16, int64(1)) // 16 bytes each: h + 5 digits, type, int64
	require.LessOrEqual(t, tableSize(at), MaxHeaderBytes)
	assert.Nil(t, headersTooLarge(at))
	at["h99999x"] = "just over the edge................"
	assert.NotNil(t, headersTooLarge(at))
}

// Nesting: amqp091-go refuses containers deeper than 32 (the headers table being 0), which a
// JSON original_headers could exceed; deeper values are dropped with a note, so the republish
// stays readable (found by the bad-input catalogue: the limit was one level too deep).
func TestHeaderNestingStaysReadable(t *testing.T) {
	for _, depth := range []int{31, 32, 33, 40} {
		d := retryJSON(t, func(f map[string]any) { f["original_headers"] = map[string]any{"deep": nested(depth)} })
		rep, err := Decode(d, catalogueOptions())
		require.NoError(t, err)
		assert.LessOrEqual(t, amqpDepth(rep.Message.Headers, 0), 32, "nested %d", depth)
	}
	rep, err := Decode(retryJSON(t, func(f map[string]any) { f["original_headers"] = map[string]any{"deep": nested(31)} }), catalogueOptions())
	require.NoError(t, err)
	assert.Equal(t, 31, amqpDepth(rep.Message.Headers, 0), "31 nested tables travel whole")
	assert.Empty(t, rep.Notes)
}
