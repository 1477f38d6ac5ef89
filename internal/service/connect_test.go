package service

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

// tracingOff clears the variables that switch tracing on, for the test.
func tracingOff(t *testing.T) {
	t.Helper()
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(v, "")
	}
}

// policyFile writes a policy file whose "orders" policy dead-letters to orders.dead.
func policyFile(t *testing.T) string {
	t.Helper()
	return writePolicyFile(t, `policies:
  orders:
    backoff: {type: schedule, delays: [1s]}
    max_retries: 1
    dead_letter_queue: orders.dead
`)
}

// writePolicyFile writes yaml to a policy file in a temporary directory and returns its path.
func writePolicyFile(t *testing.T, yaml string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o600))
	return file
}

// A bridge process loads the policy catalogue it routes by before declaring its queues, and
// names its broker connection after the service and the mode; the declare's failure is
// wrapped.
func TestDeclareTopologyOfABridgeLoadsTheCatalogue(t *testing.T) {
	cfg := unitConfig(config.ModeBridge)
	cfg.RabbitMQURL, cfg.PolicyFile = noBroker, policyFile(t)
	p := &process{cfg: cfg, logger: discard}

	err := p.declareTopology()

	require.ErrorContains(t, err, "declare topology: ")
	assert.ErrorContains(t, err, "no host")
	require.NotNil(t, p.catalog)
	assert.Contains(t, p.catalog.Policies, "orders")
	assert.Equal(t, cfg.ServiceName+"-bridge", p.bcfg.ConnectionName)
	assert.Equal(t, noBroker, p.bcfg.URL)
}

// A worker process routes nothing: it loads no catalogue.
func TestDeclareTopologyOfAWorkerLoadsNoCatalogue(t *testing.T) {
	cfg := unitConfig(config.ModeWorker)
	cfg.RabbitMQURL, cfg.PolicyFile = noBroker, filepath.Join(t.TempDir(), "missing.yaml")
	p := &process{cfg: cfg, logger: discard}

	require.ErrorContains(t, p.declareTopology(), "declare topology: ", "the missing policy file is not read")
	assert.Nil(t, p.catalog)
}

// A bad policy file or broker TLS setting stops the process before it declares anything.
func TestDeclareTopologyRefusesBadSettings(t *testing.T) {
	cfg := unitConfig(config.ModeBridge)
	cfg.RabbitMQURL, cfg.PolicyFile = noBroker, filepath.Join(t.TempDir(), "missing.yaml")
	err := (&process{cfg: cfg, logger: discard}).declareTopology()
	require.ErrorContains(t, err, "policy file")
	assert.NotContains(t, err.Error(), "declare topology")

	cfg = unitConfig(config.ModeBridge)
	cfg.RabbitMQURL, cfg.RabbitMQCAFile = noBroker, filepath.Join(t.TempDir(), "missing-ca.pem")
	assert.ErrorContains(t, (&process{cfg: cfg, logger: discard}).declareTopology(), "RABBITMQ_CA_FILE")
}

// Run refuses bad ops API tokens before it connects to anything.
func TestRunRefusesBadTokensBeforeConnecting(t *testing.T) {
	tracingOff(t)
	front := startTemporalFake(t, nil)
	cfg := unitConfig(config.ModeBridge)
	cfg.TemporalAddress, cfg.RabbitMQURL = front.addr, noBroker
	cfg.APITokensFile = filepath.Join(t.TempDir(), "missing")

	require.ErrorContains(t, Run(context.Background(), cfg, discard), "API_TOKENS_FILE")
	assert.Zero(t, front.called("GetSystemInfo"), "Temporal was not dialed")
}

// A tracing setting Run cannot honour stops it before it connects.
func TestRunRefusesABadTracingSetting(t *testing.T) {
	tracingOff(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	front := startTemporalFake(t, nil)
	cfg := unitConfig(config.ModeWorker)
	cfg.TemporalAddress, cfg.RabbitMQURL = front.addr, noBroker

	require.ErrorContains(t, Run(context.Background(), cfg, discard), "OTEL_EXPORTER_OTLP_PROTOCOL")
	assert.Zero(t, front.called("GetSystemInfo"), "Temporal was not dialed")
}

// Run connects to Temporal, then declares the topology; a broker it cannot declare on stops
// it with that error, before any part starts.
func TestRunStopsWhenTheTopologyCannotBeDeclared(t *testing.T) {
	tracingOff(t)
	front := startTemporalFake(t, nil)
	cfg := unitConfig(config.ModeAll)
	cfg.TemporalAddress, cfg.RabbitMQURL, cfg.APIAuth = front.addr, noBroker, config.APIAuthOff

	err := Run(context.Background(), cfg, discard)

	require.ErrorContains(t, err, "declare topology")
	assert.Positive(t, front.called("GetSystemInfo"), "Temporal was dialed first")
	assert.Zero(t, front.called("DescribeNamespace"), "no worker started")
}

// A frontend that refuses the client fails the dial, naming its address; a dialled client
// carries the process's interceptors.
func TestDialTemporal(t *testing.T) {
	front := startTemporalFake(t, map[string]error{"GetSystemInfo": status.Error(codes.PermissionDenied, "who are you")})
	cfg := unitConfig(config.ModeWorker)
	cfg.TemporalAddress = front.addr
	err := (&process{cfg: cfg, logger: discard}).dialTemporal(nil)
	require.ErrorContains(t, err, "connect to temporal at "+front.addr)
	assert.ErrorContains(t, err, "who are you")

	front = startTemporalFake(t, nil)
	cfg.TemporalAddress = front.addr
	p := &process{cfg: cfg, logger: discard, interceptors: []interceptor.ClientInterceptor{&interceptor.ClientInterceptorBase{}}}
	require.NoError(t, p.dialTemporal(nil))
	defer p.tc.Close()
	assert.Equal(t, p.interceptors, p.topts.Interceptors)
	assert.NotNil(t, p.topts.Logger)
}

// setupTracing's error is the tracing package's, unwrapped.
func TestSetupTracingRefusesAnUnknownProtocol(t *testing.T) {
	tracingOff(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := (&process{cfg: config.Default(), logger: discard}).setupTracing(context.Background())
	assert.ErrorContains(t, err, "tracing: ")
}
