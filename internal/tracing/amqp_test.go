package tracing

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

var (
	testTraceID = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testSpanID  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// spanContext is a context carrying the test span context, with a tracestate, and baggage.
func spanContext(t *testing.T) context.Context {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=v1")
	require.NoError(t, err)
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: testTraceID, SpanID: testSpanID, TraceFlags: trace.FlagsSampled, TraceState: ts,
	}))
	m, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	return baggage.ContextWithBaggage(ctx, b)
}

func TestCarrierGetSetKeys(t *testing.T) {
	c := AMQPCarrier(amqp.Table{"Traceparent": []byte("bytes-value"), "count": int32(3), "x": "y"})
	assert.Equal(t, "bytes-value", c.Get("traceparent"), "case-insensitive, byte arrays read as text")
	assert.Equal(t, "", c.Get("count"), "not text")
	assert.Equal(t, "", c.Get("missing"))
	assert.Equal(t, "y", c.Get("x"))

	c.Set("traceparent", "new")
	assert.Equal(t, amqp.Table{"traceparent": "new", "count": int32(3), "x": "y"}, amqp.Table(c), "other spellings replaced")
	assert.ElementsMatch(t, []string{"traceparent", "count", "x"}, c.Keys())
}

func TestInjectExtractRoundTrip(t *testing.T) {
	resetGlobals(t)
	otel.SetTextMapPropagator(Propagator())

	// A stored header from an earlier hop, in other spellings: replaced, not duplicated.
	h := amqp.Table{"TraceParent": "00-11111111111111111111111111111111-2222222222222222-01", "TRACESTATE": "old=1", "tenant": "acme"}
	InjectAMQP(spanContext(t), h)
	assert.Equal(t, amqp.Table{
		"traceparent": testTraceparent,
		"tracestate":  "vendor=v1",
		"baggage":     "tenant=acme",
		"tenant":      "acme",
	}, h)
	require.NoError(t, h.Validate(), "the headers are a valid AMQP table")

	ctx := ExtractAMQP(context.Background(), h)
	sc := trace.SpanContextFromContext(ctx)
	assert.True(t, sc.IsRemote())
	assert.Equal(t, testTraceID, sc.TraceID())
	assert.Equal(t, testSpanID, sc.SpanID())
	assert.True(t, sc.IsSampled())
	assert.Equal(t, "vendor=v1", sc.TraceState().String())
	assert.Equal(t, "acme", baggage.FromContext(ctx).Member("tenant").Value())
}

func TestInjectWithoutASpanLeavesTheHeaders(t *testing.T) {
	resetGlobals(t)
	otel.SetTextMapPropagator(Propagator())
	h := amqp.Table{"traceparent": testTraceparent, "tracestate": "vendor=v1"}
	InjectAMQP(context.Background(), h)
	assert.Equal(t, amqp.Table{"traceparent": testTraceparent, "tracestate": "vendor=v1"}, h)
}

func TestTracingOffPropagatesNothing(t *testing.T) {
	resetGlobals(t) // the globals are no-ops: tracing off
	stale := "00-11111111111111111111111111111111-2222222222222222-01"
	h := amqp.Table{"traceparent": stale}
	InjectAMQP(spanContext(t), h)
	assert.Equal(t, amqp.Table{"traceparent": stale}, h, "the stored header goes out unchanged")

	ctx := ExtractAMQP(context.Background(), amqp.Table{"traceparent": testTraceparent})
	assert.False(t, trace.SpanContextFromContext(ctx).IsValid())
}
