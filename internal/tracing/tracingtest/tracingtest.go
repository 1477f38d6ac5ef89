// Package tracingtest installs an in-memory span recorder as the process's OpenTelemetry
// provider for one test, with the service's propagator, and puts the no-op one back after it.
package tracingtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retry-scheduler/retry-scheduler/internal/tracing"
)

// Record installs the recorder (a synchronous processor: a span is recorded when it ends).
// Call it before starting what the test traces: its cleanup, registered first, runs after
// the test's other cleanups have stopped the service, so later tests trace nothing.
func Record(tb testing.TB) *tracetest.SpanRecorder {
	tb.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(tracing.Propagator())
	tb.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		_ = tp.Shutdown(context.Background())
	})
	return rec
}
