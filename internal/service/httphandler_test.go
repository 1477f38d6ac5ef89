package service

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/mocks"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/metrics"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// handlerProcess is a process of cfg as httpHandler sees it: its registry and checks.
func handlerProcess(t *testing.T, cfg config.Config) *process {
	t.Helper()
	return &process{cfg: cfg, logger: discard, reg: metrics.NewRegistry(), tc: mocks.NewClient(t),
		live: map[string]ops.Check{}, checks: map[string]ops.Check{}}
}

// serve serves p's HTTP handler until the test ends.
func serve(t *testing.T, p *process, auth *ops.Auth) *httptest.Server {
	t.Helper()
	h, err := p.httpHandler(auth)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// getStatus is the status of a GET of path on srv.
func getStatus(t *testing.T, srv *httptest.Server, path string) int {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// A worker process serves health, readiness and metrics, but not the ops API.
func TestHTTPHandlerOfAWorkerHasNoOpsAPI(t *testing.T) {
	p := handlerProcess(t, unitConfig(config.ModeWorker))
	p.checks["temporal"] = func(context.Context) error { return errors.New("frontend unavailable") }
	srv := serve(t, p, nil)

	assert.Equal(t, http.StatusOK, getStatus(t, srv, "/healthz"))
	assert.Equal(t, http.StatusServiceUnavailable, getStatus(t, srv, "/readyz"), "a failing readiness check")
	assert.Equal(t, http.StatusOK, getStatus(t, srv, "/metrics"))
	assert.Equal(t, http.StatusNotFound, getStatus(t, srv, "/api/whoami"))
	assert.Equal(t, http.StatusNotFound, getStatus(t, srv, CodecPath+"decode"), "no CODEC_TOKEN: no codec endpoint")
}

// A bridge process serves the ops API, behind its authentication.
func TestHTTPHandlerOfABridgeMountsTheOpsAPI(t *testing.T) {
	p := handlerProcess(t, unitConfig(config.ModeBridge))
	srv := serve(t, p, ops.Disabled())

	resp, err := http.Get(srv.URL + "/api/whoami")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var who map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&who))
	assert.Equal(t, "off", who["auth"])
	assert.Equal(t, ops.RoleAdmin.String(), who["role"])

	auth, err := ops.NewAuth(nil)
	require.NoError(t, err)
	srv = serve(t, handlerProcess(t, unitConfig(config.ModeBridge)), auth)
	assert.Equal(t, http.StatusUnauthorized, getStatus(t, srv, "/api/whoami"), "no tokens: refused")
}

// With PAYLOAD_KEYS and CODEC_TOKEN the codec endpoint is served beside the rest.
func TestHTTPHandlerMountsTheCodecEndpoint(t *testing.T) {
	cfg := load(t, "PAYLOAD_KEYS", testPayloadKey, "CODEC_TOKEN", "a-long-enough-codec-token")
	srv := serve(t, handlerProcess(t, cfg), ops.Disabled())

	resp, err := http.Post(srv.URL+CodecPath+"decode", "application/json", strings.NewReader(`{"payloads":[]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the codec endpoint wants its token")
}

// A handler that cannot be built fully is not served: the error says which part failed.
func TestHTTPHandlerErrors(t *testing.T) {
	cfg := unitConfig(config.ModeBridge)
	cfg.PolicyFile = filepath.Join(t.TempDir(), "missing.yaml")
	_, err := handlerProcess(t, cfg).httpHandler(ops.Disabled())
	assert.ErrorContains(t, err, "policy file")

	cfg = unitConfig(config.ModeWorker)
	cfg.CodecToken = "a-long-enough-codec-token"
	_, err = handlerProcess(t, cfg).httpHandler(nil)
	assert.ErrorContains(t, err, "CODEC_TOKEN")
}

// A pause starts a destination's breaker with the breaker settings of the policy the
// destination's messages are routed to, defaults filled in; an unrouted destination's with
// the default policy's.
func TestOpsAPIPauseStartsTheBreakerWithTheRoutedPolicysSettings(t *testing.T) {
	file := writePolicyFile(t, `policies:
  orders:
    backoff: {type: schedule, delays: [1s]}
    max_retries: 1
    breaker: {failure_ratio: 0.25, probes: 1}
routes:
  - queue: orders.*
    policy: orders
`)
	cfg := unitConfig(config.ModeBridge)
	cfg.PolicyFile = file
	tc := mocks.NewClient(t)
	started := map[string]workflows.BreakerInput{}
	tc.On("NewWithStartWorkflowOperation", mock.Anything, workflows.BreakerWorkflowName, mock.Anything).
		Run(func(args mock.Arguments) {
			in := args.Get(2).(workflows.BreakerInput)
			started[in.Queue] = in
		}).Return(nil)
	tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(nil, errors.New("temporal unavailable"))
	catalog, err := loadCatalog(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	require.NoError(t, mountOpsAPI(mux, cfg, catalog, tc, nil, ops.Disabled(), nil, discard))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, queue := range []string{"orders.created", "billing"} {
		resp, err := http.Post(srv.URL+"/api/breakers/"+queue+"/pause", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode, "Temporal is down: the pause fails")
	}

	require.Contains(t, started, "orders.created")
	assert.Equal(t, policy.Breaker{FailureRatio: 0.25, Probes: 1}.WithDefaults(), started["orders.created"].Settings)
	require.Contains(t, started, "billing")
	assert.Equal(t, policy.Default(cfg.DefaultMaxRetries, cfg.BaseDelay, cfg.MaxDelay).Breaker.WithDefaults(), started["billing"].Settings)
}

// The expired envelopes' archive is one of the scheduler's own queues, when there is one.
func TestOwnQueues(t *testing.T) {
	assert.Empty(t, ownQueues(config.Config{}))
	assert.Equal(t, []string{"dead.archive"}, ownQueues(config.Config{ExpiredArchiveQueue: "dead.archive"}))
}

// The policy file is read once a process: the ops API routes with the catalogue the bridge
// read, even when the file is gone (or changed) by the time the HTTP handler is built.
func TestThePolicyFileIsReadOnceAProcess(t *testing.T) {
	file := writePolicyFile(t, "policies:\n  orders:\n    backoff: {type: schedule, delays: [1s]}\n    max_retries: 1\nroutes:\n  - queue: orders.*\n    policy: orders\n")
	cfg := unitConfig(config.ModeAll)
	cfg.PolicyFile = file
	p := connectedProcess(t, cfg, mocks.NewClient(t))

	read, err := p.policyCatalog()
	require.NoError(t, err)
	require.NoError(t, os.Remove(file))

	again, err := p.policyCatalog()
	require.NoError(t, err)
	assert.Same(t, read, again)
	_, err = p.httpHandler(ops.Disabled())
	assert.NoError(t, err, "the handler is built from the catalogue already read")
}
