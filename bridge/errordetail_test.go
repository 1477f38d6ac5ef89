package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The reporter's error detail (exception class, stack trace), its service metadata and the
// message's event type, from each form.

// errorDetail is what these tests read of a report: the failure's detail, who reported it
// and the message's event type.
type errorDetail struct {
	ErrorType, StackTrace, Service, ServiceVersion, EventType string
}

func detailOf(rep message.FailureReport) errorDetail {
	return errorDetail{rep.ErrorType, rep.StackTrace, rep.Service, rep.ServiceVersion, rep.Message.EventType}
}

func TestDecodeJSONErrorDetailAndEventType(t *testing.T) {
	f := validRetryMessage()
	f["error_type"] = "TimeoutError"
	f["stack_trace"] = "TimeoutError: upstream\n    at call (app.js:1:1)"
	f["service"] = "outbound-transformer"
	f["service_version"] = "1.4.2"
	f["event_type"] = "order.created"
	rep, err := decodeJSONFields(t, f)
	require.NoError(t, err)
	assert.Equal(t, errorDetail{"TimeoutError", "TimeoutError: upstream\n    at call (app.js:1:1)", "outbound-transformer", "1.4.2", "order.created"},
		detailOf(rep))

	t.Run("event type from the original headers", func(t *testing.T) {
		f := validRetryMessage()
		f["original_headers"] = map[string]any{"x-event-type": "order.paid"}
		rep, err := decodeJSONFields(t, f)
		require.NoError(t, err)
		assert.Equal(t, "order.paid", rep.Message.EventType)
		assert.Equal(t, "order.paid", rep.Message.Headers["x-event-type"], "kept on republish")
	})
	t.Run("not the report's own type property", func(t *testing.T) {
		rep, err := Decode(Delivery{ContentType: "application/json", Type: "RetryMessage", Body: jsonBody(t, validRetryMessage())}, testOptions())
		require.NoError(t, err)
		assert.Empty(t, rep.Message.EventType)
	})
	t.Run("wrong type is poison", func(t *testing.T) {
		f := validRetryMessage()
		f["stack_trace"] = []string{"a"}
		_, err := decodeJSONFields(t, f)
		assert.Contains(t, requirePoison(t, err).Reason, "stack_trace must be a string")
	})
}

func TestDecodeStackTraceIsBounded(t *testing.T) {
	f := validRetryMessage()
	f["stack_trace"] = strings.Repeat("é", message.MaxStackTraceBytes) // 2 bytes each
	f["error_type"] = strings.Repeat("E", 300)
	rep, err := decodeJSONFields(t, f)
	require.NoError(t, err, "a long trace is cut, not poison")
	assert.LessOrEqual(t, len(rep.StackTrace), message.MaxStackTraceBytes)
	assert.Greater(t, len(rep.StackTrace), message.MaxStackTraceBytes-8)
	assert.True(t, strings.HasSuffix(rep.StackTrace, "…"))
	assert.True(t, strings.HasPrefix(rep.StackTrace, "éé"))
	assert.LessOrEqual(t, len(rep.ErrorType), message.MaxErrorTypeBytes)
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "stack trace cut from 16384 to 8192 bytes")
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "error type cut from 300 to 255 bytes")
}

func TestDecodeXDeathErrorDetailAndEventType(t *testing.T) {
	h := xDeath("orders", "", "orders")
	h["x-error-type"] = "HttpError"
	h["x-stack-trace"] = []byte("HttpError: 503\n  at pay")
	h["x-service"] = "payments"
	h["x-service-version"] = "2.0.0"
	h["x-event-type"] = "payment.requested"
	h["trace-id"] = "tr-1"
	rep, err := Decode(Delivery{Body: []byte("b"), Headers: h, MessageID: "p-1", Type: "ignored.when.header"}, testOptions())
	require.NoError(t, err)
	assert.Equal(t, errorDetail{"HttpError", "HttpError: 503\n  at pay", "payments", "2.0.0", "payment.requested"}, detailOf(rep))
	assert.NotContains(t, rep.Message.Headers, "x-error-type", "failure detail is not republished")
	assert.NotContains(t, rep.Message.Headers, "x-stack-trace", "failure detail is not republished")
	assert.Equal(t, "payment.requested", rep.Message.Headers["x-event-type"])

	t.Run("event type from the type property", func(t *testing.T) {
		rep, err := Decode(Delivery{Body: []byte("b"), Headers: xDeath("orders", "", "orders"), Type: "order.created"}, testOptions())
		require.NoError(t, err)
		assert.Equal(t, "order.created", rep.Message.EventType)
		assert.Empty(t, rep.ErrorType)
		assert.Empty(t, rep.StackTrace)
	})
}

func TestDecodeEventTypeOverKeywordLimitIsPoison(t *testing.T) {
	f := validRetryMessage()
	f["event_type"] = strings.Repeat("e", maxKeywordLen)
	_, err := decodeJSONFields(t, f)
	require.NoError(t, err, "255 bytes fit")

	f["event_type"] = strings.Repeat("e", maxKeywordLen+1)
	_, err = decodeJSONFields(t, f)
	pe := requirePoison(t, err)
	assert.Contains(t, pe.Reason, "event type is 256 bytes long")
	assert.Equal(t, "orders", pe.OriginalQueue)

	h := xDeath("orders", "", "orders")
	h["x-event-type"] = strings.Repeat("e", maxKeywordLen+1)
	_, err = Decode(Delivery{Body: []byte("b"), Headers: h}, testOptions())
	requirePoison(t, err)
}

func TestProcessDeadLetterPublishFailsIsCounted(t *testing.T) {
	s, m := testSession(t, &fakeReporter{}, &fakePublisher{err: errors.New("nacked")})
	s.process(&entry{d: amqp.Delivery{Acknowledger: &fakeAck{}, ContentType: "text/plain", Body: []byte("junk")}})
	s.process(&entry{d: amqp.Delivery{Acknowledger: &fakeAck{}, ContentType: "text/plain", Body: []byte("junk")}})
	assert.Equal(t, 2.0, counterValue(m.dlqFailures.WithLabelValues("manual-review.pending")))
}

func TestPoisonEnvelopeNamesTheScheduler(t *testing.T) {
	pub := &fakePublisher{}
	s, _ := testSession(t, &fakeReporter{}, pub)
	s.b.cfg.ServiceName, s.b.cfg.ServiceVersion = "rs-eu", "1.2.3"
	s.process(&entry{d: amqp.Delivery{Acknowledger: &fakeAck{}, ContentType: "text/plain", Type: "order.created", Body: []byte("junk")}})
	require.Len(t, pub.msgs, 1)
	assert.Equal(t, "rs-eu", pub.msgs[0].msg.AppId)
	assert.Empty(t, pub.msgs[0].msg.Expiration, "a poison envelope is the only copy: it never expires")
	var env message.Envelope
	require.NoError(t, json.Unmarshal(pub.msgs[0].msg.Body, &env))
	assert.Equal(t, "rs-eu", env.Metadata.Service)
	assert.Equal(t, "1.2.3", env.Metadata.ServiceVersion)
	assert.Equal(t, "order.created", env.OriginalMessage.EventType)
}

func TestLogLinesCarryCorrelationID(t *testing.T) {
	var buf bytes.Buffer
	s, _ := testSession(t, &fakeReporter{}, &fakePublisher{})
	// Debug: an accepted report is a per-message event.
	s.b.log = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := validRetryMessage()
	f["correlation_id"] = "corr-9"
	s.process(&entry{d: amqp.Delivery{Acknowledger: &fakeAck{}, ContentType: "application/json", Body: jsonBody(t, f)}})
	s.process(&entry{d: amqp.Delivery{Acknowledger: &fakeAck{}, ContentType: "text/plain", CorrelationId: "corr-10", Body: []byte("junk")}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], `"correlation_id":"corr-9"`)
	assert.Contains(t, lines[1], `"correlation_id":"corr-10"`)

	buf.Reset()
	s.process(&entry{d: retryDelivery(t, &fakeAck{})})
	assert.NotContains(t, buf.String(), "correlation_id", "no empty key when there is none")
}

func TestDecodeEventTypeIsUTF8(t *testing.T) {
	rep, err := Decode(Delivery{Body: []byte("b"), Headers: xDeath("orders", "", "orders"), Type: "order\xff"}, testOptions())
	require.NoError(t, err)
	assert.Equal(t, "order\uFFFD", rep.Message.EventType)
}
