package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// env is an injected environment.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// resetGlobals puts the otel globals back to no-ops when the test ends, so that no test sees
// another's provider.
func resetGlobals(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
}

// clearProcessEnv unsets, for the test, the variables the exporters and the resource read
// from the process environment, so that the machine's own cannot leak in.
func clearProcessEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{
		EnvSDKDisabled, EnvTracesExporter, EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol,
		EnvServiceName, EnvResourceAttributes, "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	} {
		t.Setenv(k, "") // restores the original at the end
		require.NoError(t, os.Unsetenv(k))
	}
}

func TestReadSettings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      func(string) (string, bool)
		on       bool
		protocol string
		err      string
	}{
		{name: "nothing set: off", env: env()},
		{name: "empty values count as unset", env: env(EnvEndpoint, " ", EnvTracesExporter, "")},
		{name: "exporter otlp", env: env(EnvTracesExporter, "otlp"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "exporter OTLP in capitals", env: env(EnvTracesExporter, "OTLP"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "endpoint", env: env(EnvEndpoint, "http://collector:4318"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "traces endpoint", env: env(EnvTracesEndpoint, "http://collector:4318/v1/traces"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "exporter none beats an endpoint", env: env(EnvTracesExporter, "none", EnvEndpoint, "http://collector:4318")},
		{name: "sdk disabled beats an exporter", env: env(EnvSDKDisabled, "true", EnvTracesExporter, "otlp")},
		{name: "sdk disabled in capitals", env: env(EnvSDKDisabled, "TRUE", EnvEndpoint, "http://collector:4318")},
		{name: "sdk disabled false", env: env(EnvSDKDisabled, "false", EnvEndpoint, "http://collector:4318"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "sdk disabled not a boolean", env: env(EnvSDKDisabled, "yes"), err: EnvSDKDisabled},
		{name: "grpc", env: env(EnvEndpoint, "http://collector:4317", EnvProtocol, "grpc"), on: true, protocol: ProtocolGRPC},
		{name: "http/protobuf", env: env(EnvTracesExporter, "otlp", EnvProtocol, "http/protobuf"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "traces protocol beats the general one", env: env(EnvTracesExporter, "otlp", EnvProtocol, "http/protobuf", EnvTracesProtocol, "grpc"), on: true, protocol: ProtocolGRPC},
		{name: "traces protocol http over general grpc", env: env(EnvTracesExporter, "otlp", EnvProtocol, "grpc", EnvTracesProtocol, "http/protobuf"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "protocol ignored while off", env: env(EnvProtocol, "http/json")},
		{name: "http/json refused", env: env(EnvTracesExporter, "otlp", EnvTracesProtocol, "http/json"), err: EnvTracesProtocol},
		{name: "unknown exporter refused", env: env(EnvTracesExporter, "zipkin"), err: "zipkin"},
		{name: "list with otlp", env: env(EnvTracesExporter, "none, otlp"), on: true, protocol: ProtocolHTTPProtobuf},
		{name: "list with an unknown exporter", env: env(EnvTracesExporter, "otlp,console"), err: "console"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := readSettings(tc.env)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.on, s.on)
			assert.Equal(t, tc.protocol, s.protocol)
		})
	}
}

func TestSetupOffIsANoOpAndLeavesTheGlobals(t *testing.T) {
	resetGlobals(t)
	before, beforeProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()

	tp, shutdown, err := Setup(context.Background(), env(EnvTracesExporter, "none"), Options{ServiceName: "svc"})
	require.NoError(t, err)
	assert.False(t, Enabled(tp))
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	assert.False(t, span.IsRecording())
	ti, err := TemporalInterceptor(tp)
	require.NoError(t, err)
	assert.Nil(t, ti, "no Temporal interceptor while tracing is off")
	assert.Equal(t, before, otel.GetTracerProvider())
	assert.Equal(t, beforeProp, otel.GetTextMapPropagator())
	require.NoError(t, shutdown(context.Background()))
}

func TestSetupRefusesABadEnvironment(t *testing.T) {
	_, _, err := Setup(context.Background(), env(EnvTracesExporter, "jaeger"), Options{})
	require.ErrorContains(t, err, "jaeger")
}

func TestSetupOffKeepsAnInstalledSDKProvider(t *testing.T) {
	resetGlobals(t)
	rec := tracetest.NewSpanRecorder()
	installed := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = installed.Shutdown(context.Background()) })
	otel.SetTracerProvider(installed)

	tp, shutdown, err := Setup(context.Background(), env(), Options{})
	require.NoError(t, err)
	require.Same(t, installed, tp)
	assert.True(t, Enabled(tp))
	ti, err := TemporalInterceptor(tp)
	require.NoError(t, err)
	assert.NotNil(t, ti)

	// The shutdown leaves the provider to its owner: it still records.
	require.NoError(t, shutdown(context.Background()))
	_, span := tp.Tracer("t").Start(context.Background(), "after")
	span.End()
	require.Len(t, rec.Ended(), 1)
}

func TestNewResource(t *testing.T) {
	clearProcessEnv(t)
	t.Setenv(EnvResourceAttributes, "deployment.environment.name=test,service.namespace=payments")
	attrs := func(lookup func(string) (string, bool)) map[string]string {
		res, err := newResource(context.Background(), lookup, Options{ServiceName: "from-setting", ServiceVersion: "1.2.3"})
		require.NoError(t, err)
		m := map[string]string{}
		for _, kv := range res.Attributes() {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	got := attrs(env())
	assert.Equal(t, "from-setting", got["service.name"])
	assert.Equal(t, "1.2.3", got["service.version"])
	assert.Equal(t, "test", got["deployment.environment.name"], "OTEL_RESOURCE_ATTRIBUTES")
	assert.Equal(t, "payments", got["service.namespace"])
	assert.Equal(t, "go", got["telemetry.sdk.language"])
	assert.Equal(t, "from-otel", attrs(env(EnvServiceName, "from-otel"))["service.name"], "OTEL_SERVICE_NAME beats SERVICE_NAME")
}

// exported is what a fake collector received: resource attributes and span names.
type exported struct {
	mu       sync.Mutex
	resource map[string]string
	spans    []string
	// contentType is the HTTP request's, "" over gRPC.
	contentType string
}

func (e *exported) add(req *collectortrace.ExportTraceServiceRequest, contentType string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.contentType = contentType
	for _, rs := range req.GetResourceSpans() {
		e.resource = attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				e.spans = append(e.spans, s.GetName())
			}
		}
	}
}

func (e *exported) snapshot() (map[string]string, []string, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resource, append([]string(nil), e.spans...), e.contentType
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

// traceOneSpan sets tracing up from the process environment, records one span through the
// global provider, and flushes it with the shutdown.
func traceOneSpan(t *testing.T) {
	t.Helper()
	tp, shutdown, err := Setup(context.Background(), os.LookupEnv, Options{ServiceName: "retry-scheduler-test", ServiceVersion: "9.9.9"})
	require.NoError(t, err)
	require.True(t, Enabled(tp))
	_, sdk := tp.(*sdktrace.TracerProvider)
	require.True(t, sdk, "an SDK provider, got %T", tp)
	require.Equal(t, tp, otel.GetTracerProvider(), "on: the global provider is set")
	require.Contains(t, otel.GetTextMapPropagator().Fields(), HeaderTraceparent, "on: the global propagator is W3C")
	ti, err := TemporalInterceptor(tp)
	require.NoError(t, err)
	require.NotNil(t, ti)

	_, span := otel.Tracer("test").Start(context.Background(), "one-span", trace.WithSpanKind(trace.SpanKindInternal))
	span.End()
	require.NoError(t, shutdown(context.Background()))
}

func TestSetupExportsOverHTTPByDefault(t *testing.T) {
	resetGlobals(t)
	clearProcessEnv(t)
	var got exported
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "unexpected request", http.StatusNotFound)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got.add(&req, r.Header.Get("Content-Type"))
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	t.Setenv(EnvEndpoint, srv.URL)
	t.Setenv(EnvResourceAttributes, "deployment.environment.name=test")

	traceOneSpan(t)
	res, spans, contentType := got.snapshot()
	require.Equal(t, []string{"one-span"}, spans)
	assert.Equal(t, "application/x-protobuf", contentType)
	assert.Equal(t, "retry-scheduler-test", res["service.name"])
	assert.Equal(t, "9.9.9", res["service.version"])
	assert.Equal(t, "test", res["deployment.environment.name"])
}

// collector is a fake OTLP/gRPC trace receiver.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	got *exported
}

func (c collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.got.add(req, "")
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func TestSetupExportsOverGRPCWhenAsked(t *testing.T) {
	resetGlobals(t)
	clearProcessEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var got exported
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, collector{got: &got})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Setenv(EnvTracesExporter, "otlp")
	t.Setenv(EnvTracesEndpoint, "http://"+lis.Addr().String())
	t.Setenv(EnvTracesProtocol, "grpc")

	traceOneSpan(t)
	res, spans, _ := got.snapshot()
	require.Equal(t, []string{"one-span"}, spans)
	assert.Equal(t, "retry-scheduler-test", res["service.name"])
}
