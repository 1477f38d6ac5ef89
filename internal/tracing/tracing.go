// Package tracing sets up OpenTelemetry tracing for the service, off unless the standard
// OTEL_* variables ask for it, and carries trace context through AMQP headers (amqp.go).
//
// When on, a failed message's trace continues through the scheduler: the bridge's delivery
// span is a child of the message's traceparent header, the Temporal SDK's interceptor carries
// it through the workflow's start and signals into its activities, and the republish stamps
// the retried message with a traceparent of the same trace.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// The standard variables that decide whether tracing is on and how spans are exported. The
// exporters read the rest of OTEL_EXPORTER_OTLP_* (headers, timeouts, TLS, compression), the
// SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*, and the resource OTEL_RESOURCE_ATTRIBUTES,
// all from the process environment.
const (
	EnvSDKDisabled          = "OTEL_SDK_DISABLED"
	EnvTracesExporter       = "OTEL_TRACES_EXPORTER"
	EnvEndpoint             = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint       = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol             = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol       = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvServiceName          = "OTEL_SERVICE_NAME"
	EnvResourceAttributes   = "OTEL_RESOURCE_ATTRIBUTES"
	ProtocolGRPC            = "grpc"
	ProtocolHTTPProtobuf    = "http/protobuf"
	temporalInstrumentation = "temporal-sdk-go"
)

// Options describe the process to the tracing backend.
type Options struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME (or service.name in
	// OTEL_RESOURCE_ATTRIBUTES) says otherwise: the SERVICE_NAME setting.
	ServiceName string
	// ServiceVersion is service.version.
	ServiceVersion string
	// Logger receives the SDK's errors (a failed export, say); slog.Default() when nil.
	Logger *slog.Logger
}

// settings is what the environment asks of tracing.
type settings struct {
	on       bool
	protocol string // ProtocolHTTPProtobuf or ProtocolGRPC, when on
}

// readSettings decides from the environment: tracing is on when OTEL_TRACES_EXPORTER is
// "otlp", or when it is unset and an OTLP endpoint is; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off whatever else is set. An empty value counts as unset,
// as for every other setting of the service. Exporters other than otlp are refused rather
// than ignored, so that a misspelt value fails the start instead of silently tracing nothing.
func readSettings(lookupEnv func(string) (string, bool)) (settings, error) {
	get := func(name string) string {
		v, _ := lookupEnv(name)
		return strings.TrimSpace(v)
	}
	if v := get(EnvSDKDisabled); v != "" {
		switch strings.ToLower(v) {
		case "true":
			return settings{}, nil
		case "false":
		default:
			return settings{}, fmt.Errorf("%s=%q: want true or false", EnvSDKDisabled, v)
		}
	}
	on := get(EnvEndpoint) != "" || get(EnvTracesEndpoint) != ""
	if v := get(EnvTracesExporter); v != "" {
		on = false
		for _, e := range strings.Split(v, ",") {
			switch e = strings.ToLower(strings.TrimSpace(e)); e {
			case "otlp":
				on = true
			case "none", "":
			default:
				return settings{}, fmt.Errorf("%s=%q: exporter %q is not supported (want otlp or none)", EnvTracesExporter, v, e)
			}
		}
	}
	if !on {
		return settings{}, nil
	}
	name, protocol := EnvTracesProtocol, get(EnvTracesProtocol)
	if protocol == "" {
		name, protocol = EnvProtocol, get(EnvProtocol)
	}
	switch protocol {
	case "", ProtocolHTTPProtobuf:
		return settings{on: true, protocol: ProtocolHTTPProtobuf}, nil
	case ProtocolGRPC:
		return settings{on: true, protocol: ProtocolGRPC}, nil
	}
	return settings{}, fmt.Errorf("%s=%q: want %s or %s (the Go OTLP exporter has no http/json)", name, protocol, ProtocolHTTPProtobuf, ProtocolGRPC)
}

// Setup returns the process's tracer provider and the function that flushes and stops it.
//
// Off (the environment does not ask for tracing) it returns a no-op provider and touches no
// global, so that tracing costs next to nothing; with one exception: a provider of the SDK
// already installed as the global one (otel.SetTracerProvider, by a program or test that
// embeds the service) is returned as is, with a shutdown that leaves it to its owner.
//
// On, it builds an OTLP exporter (HTTP/protobuf, or gRPC when the protocol says so) behind a
// batching processor, with the resource's service.name and service.version, and installs the
// provider and the W3C trace-context and baggage propagator as the otel globals, which the
// bridge and the activities use. The on/off decision reads lookupEnv; the exporter, sampler
// and resource read their own variables from the process environment.
func Setup(ctx context.Context, lookupEnv func(string) (string, bool), opts Options) (trace.TracerProvider, func(context.Context) error, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	s, err := readSettings(lookupEnv)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	if !s.on {
		if tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
			return tp, func(context.Context) error { return nil }, nil
		}
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}

	res, err := newResource(ctx, lookupEnv, opts)
	if err != nil {
		return nil, nil, err
	}
	var exp sdktrace.SpanExporter
	switch s.protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP %s exporter: %w", s.protocol, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry error", "component", "tracing", "error", err)
	}))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	shutdown := func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush and stop the tracer provider: %w", err)
		}
		return nil
	}
	return tp, shutdown, nil
}

// newResource describes the process: service.name from OTEL_SERVICE_NAME, else
// opts.ServiceName; service.version; then OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME of
// the process environment (resource.WithFromEnv) over those.
func newResource(ctx context.Context, lookupEnv func(string) (string, bool), opts Options) (*resource.Resource, error) {
	name := opts.ServiceName
	if v, _ := lookupEnv(EnvServiceName); strings.TrimSpace(v) != "" {
		name = strings.TrimSpace(v)
	}
	attrs := []resource.Option{resource.WithTelemetrySDK()}
	if name != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceName(name)))
	}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(opts.ServiceVersion)))
	}
	res, err := resource.New(ctx, append(attrs, resource.WithFromEnv())...)
	// A partial resource (one malformed OTEL_RESOURCE_ATTRIBUTES pair) is still usable: keep
	// it and say what was wrong rather than refuse to start.
	if err != nil && (res == nil || !errors.Is(err, resource.ErrPartialResource)) {
		return nil, fmt.Errorf("tracing: resource (%s): %w", EnvResourceAttributes, err)
	}
	if err != nil {
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("tracing resource partly read", "component", "tracing", "error", err)
	}
	return res, nil
}

// Propagator is the W3C trace context and baggage propagator Setup installs.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// TemporalInterceptor is the Temporal SDK's tracing interceptor over tp, for
// client.Options.Interceptors (workers built from the client inherit it), or nil when tp is
// the no-op provider of tracing off. It carries the span context in Temporal headers with the
// W3C propagator, and makes spans for starts, signals, workflows and activities.
func TemporalInterceptor(tp trace.TracerProvider) (interceptor.ClientInterceptor, error) {
	if !Enabled(tp) {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:            tp.Tracer(temporalInstrumentation),
		TextMapPropagator: Propagator(),
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
	}
	return i, nil
}

// Enabled reports whether tp can record spans: false for nil and for the no-op provider of
// tracing off.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}
