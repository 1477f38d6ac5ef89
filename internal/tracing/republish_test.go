package tracing_test

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/tracing/tracingtest"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// These tests run the republish activity with the global provider and propagator the way
// tracing.Setup leaves them, on and off.

type capture struct {
	mu  sync.Mutex
	got []amqp.Publishing
}

func (c *capture) Publish(_ context.Context, _, _ string, _ bool, msg amqp.Publishing) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, msg)
	return nil
}

// staleTraceparent is the header the failed message carried, stored in the workflow.
const staleTraceparent = "00-11111111111111111111111111111111-2222222222222222-01"

func republish(t *testing.T, ctx context.Context) amqp.Publishing {
	t.Helper()
	pub := &capture{}
	acts := &activities.Activities{Publisher: pub, Metrics: activities.NewMetrics(prometheus.NewRegistry())}
	_, err := acts.Republish(ctx, activities.RepublishInput{
		Message: message.Message{MessageID: "m-1", Payload: []byte("p"), OriginalQueue: "orders",
			Headers: map[string]any{"traceparent": staleTraceparent, "tracestate": "old=1", "tenant": "acme"}},
		Attempt: 2, Key: "m-1:2",
	})
	require.NoError(t, err)
	require.Len(t, pub.got, 1)
	return pub.got[0]
}

func TestRepublishContinuesTheActivitysTrace(t *testing.T) {
	rec := tracingtest.Record(t)

	// The activity's span, as the Temporal interceptor puts it in the activity's context.
	ctx, parent := otel.Tracer("test").Start(context.Background(), "RunActivity:Republish")
	p := republish(t, ctx)
	parent.End()

	var span sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "retry-scheduler.republish orders" {
			span = s
		}
	}
	require.NotNil(t, span, "the republish span")
	assert.Equal(t, trace.SpanKindProducer, span.SpanKind())
	assert.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID(), "a child of the activity's span")
	assert.Equal(t, parent.SpanContext().TraceID(), span.SpanContext().TraceID())
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	assert.Equal(t, "rabbitmq", attrs["messaging.system"].AsString())
	assert.Equal(t, "amq.default", attrs["messaging.destination.name"].AsString())
	assert.Equal(t, "orders", attrs["messaging.rabbitmq.destination.routing_key"].AsString())
	assert.Equal(t, "m-1", attrs["messaging.message.id"].AsString())
	assert.Equal(t, int64(2), attrs["retry_scheduler.attempt"].AsInt64())

	// The republished message's traceparent is the republish span's, not the stored one, and
	// the stale tracestate is gone (the span has none).
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	assert.Equal(t, want, p.Headers["traceparent"])
	assert.NotContains(t, p.Headers, "tracestate")
	assert.Equal(t, "acme", p.Headers["tenant"])
	assert.Equal(t, "m-1:2", p.Headers["x-retry-key"])
}

func TestRepublishWithTracingOffKeepsTheStoredTraceparent(t *testing.T) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())

	p := republish(t, context.Background())
	assert.Equal(t, staleTraceparent, p.Headers["traceparent"])
	assert.Equal(t, "old=1", p.Headers["tracestate"])
}
