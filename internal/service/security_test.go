package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

const testPayloadKey = "k1=AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="

func load(t *testing.T, kv ...string) config.Config {
	t.Helper()
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := m[k]; return v, ok })
	require.NoError(t, err)
	return cfg
}

// The dev server has no TLS: these tests check the client options, then a TLS gRPC endpoint
// made here (with the test's own CA) checks what actually goes over the wire.
func TestTemporalOptionsCarryTLSAndCredentials(t *testing.T) {
	f := brokertest.NewCA(t, "temporal-test-ca").WriteFiles(t, t.TempDir())
	cfg := load(t,
		"TEMPORAL_ADDRESS", "temporal.example:7233", "TEMPORAL_NAMESPACE", "prod",
		"TEMPORAL_CA_FILE", f.CA, "TEMPORAL_CERT_FILE", f.ClientCert, "TEMPORAL_KEY_FILE", f.ClientKey,
		"TEMPORAL_SERVER_NAME", "temporal.internal", "TEMPORAL_API_KEY", "api-key-1",
		"PAYLOAD_KEYS", testPayloadKey)
	opts, err := TemporalOptions(cfg)
	require.NoError(t, err)
	assert.Equal(t, "temporal.example:7233", opts.HostPort)
	assert.Equal(t, "prod", opts.Namespace)
	tc := opts.ConnectionOptions.TLS
	require.NotNil(t, tc)
	assert.Equal(t, "temporal.internal", tc.ServerName)
	assert.NotNil(t, tc.RootCAs)
	require.Len(t, tc.Certificates, 1)
	assert.False(t, opts.ConnectionOptions.TLSDisabled)
	assert.NotNil(t, opts.Credentials)
	_, isCodec := opts.DataConverter.(*converter.CodecDataConverter)
	assert.True(t, isCodec, "PAYLOAD_KEYS puts the codec in the data converter")

	plain, err := TemporalOptions(config.Default())
	require.NoError(t, err)
	assert.Nil(t, plain.ConnectionOptions.TLS)
	assert.Nil(t, plain.Credentials)
	assert.Nil(t, plain.DataConverter, "no codec: the SDK's default converter")

	// TLS explicitly off with an API key on loopback: the SDK must not switch TLS on by itself.
	local, err := TemporalOptions(load(t, "TEMPORAL_TLS", "false", "TEMPORAL_API_KEY", "k"))
	require.NoError(t, err)
	assert.Nil(t, local.ConnectionOptions.TLS)
	assert.True(t, local.ConnectionOptions.TLSDisabled)
}

// A bad CA file is refused at start, naming the setting, before anything dials.
func TestTemporalBadCAFileRefused(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(bad, []byte("-----BEGIN CERTIFICATE-----\nnot a cert\n-----END CERTIFICATE-----\n"), 0o600))
	_, err := config.Load(nil, func(k string) (string, bool) {
		return map[string]string{"TEMPORAL_CA_FILE": bad}[k], k == "TEMPORAL_CA_FILE"
	})
	require.ErrorContains(t, err, "TEMPORAL_TLS_SERVER_CA_CERT_PATH: "+bad+" holds no PEM certificate", "an older name is reported by its standard one")

	cfg := config.Default()
	cfg.TemporalCAFile = bad // as if Validate had been skipped
	err = Run(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "TEMPORAL_TLS_SERVER_CA_CERT_PATH")

	cfg = config.Default()
	cfg.RabbitMQURL = "amqps://u:p@127.0.0.1:1/"
	cfg.RabbitMQCAFile = bad
	_, err = cfg.RabbitMQTLS()
	require.ErrorContains(t, err, "RABBITMQ_CA_FILE")
}

// fakeFrontend is a TLS gRPC endpoint that answers GetSystemInfo and records what callers sent.
type fakeFrontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	addr string
	stop func()

	mu       sync.Mutex
	auth     []string
	team     []string
	clientCN []string
}

func (f *fakeFrontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{Capabilities: &workflowservice.GetSystemInfoResponse_Capabilities{}}, nil
}

func startFakeFrontend(t *testing.T, ca *brokertest.CA, requireClientCert bool) *fakeFrontend {
	t.Helper()
	leaf := ca.Server(t, "localhost", "127.0.0.1")
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tc := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	if requireClientCert {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	f := &fakeFrontend{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			f.mu.Lock()
			f.auth = append(f.auth, md.Get("authorization")...)
			f.team = append(f.team, md.Get("x-team")...)
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
					f.clientCN = append(f.clientCN, ti.State.PeerCertificates[0].Subject.CommonName)
				}
			}
			f.mu.Unlock()
			return h(ctx, req)
		}))
	f.addr, f.stop = serveFrontend(t, srv, f), srv.Stop
	return f
}

// dialOnce connects to Temporal with cfg's options (the fake frontend records what came).
func dialOnce(t *testing.T, cfg config.Config) {
	t.Helper()
	opts, err := TemporalOptions(cfg)
	require.NoError(t, err)
	c, err := client.Dial(opts)
	require.NoError(t, err)
	c.Close()
}

func TestTemporalDialSendsClientCertificateAndAPIKey(t *testing.T) {
	ca := brokertest.NewCA(t, "temporal-test-ca")
	f := ca.WriteFiles(t, t.TempDir())
	front := startFakeFrontend(t, ca, true)

	cfg := load(t, "TEMPORAL_ADDRESS", front.addr, "TEMPORAL_CA_FILE", f.CA,
		"TEMPORAL_CERT_FILE", f.ClientCert, "TEMPORAL_KEY_FILE", f.ClientKey, "TEMPORAL_API_KEY", "api-key-over-tls")
	dialOnce(t, cfg)
	front.mu.Lock()
	defer front.mu.Unlock()
	assert.Contains(t, front.auth, "Bearer api-key-over-tls")
	assert.Contains(t, front.clientCN, "retry-scheduler-test-client")
}

// Temporal's standard client settings: TEMPORAL_TLS_* in the environment (PEM text here), and
// a TOML profile beneath it whose grpc_meta goes out on every call.
func TestTemporalDialWithStandardSettings(t *testing.T) {
	ca := brokertest.NewCA(t, "temporal-test-ca")
	dir := t.TempDir()
	f := ca.WriteFiles(t, dir)
	front := startFakeFrontend(t, ca, true)
	pem := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	profile := filepath.Join(dir, "temporal.toml")
	require.NoError(t, os.WriteFile(profile, []byte("[profile.prod]\naddress = \""+front.addr+"\"\napi_key = \"profile-api-key\"\n[profile.prod.grpc_meta]\nx-team = \"payments\"\n"), 0o600))

	cfg := load(t, "TEMPORAL_CONFIG_FILE", profile, "TEMPORAL_PROFILE", "prod",
		"TEMPORAL_TLS_SERVER_CA_CERT_DATA", pem(f.CA), "TEMPORAL_TLS_CLIENT_CERT_DATA", pem(f.ClientCert),
		"TEMPORAL_TLS_CLIENT_KEY_DATA", pem(f.ClientKey))
	dialOnce(t, cfg)
	front.mu.Lock()
	defer front.mu.Unlock()
	assert.Contains(t, front.auth, "Bearer profile-api-key")
	assert.Contains(t, front.team, "payments")
	assert.Contains(t, front.clientCN, "retry-scheduler-test-client")
}

func TestTemporalDialRefusesWrongCA(t *testing.T) {
	front := startFakeFrontend(t, brokertest.NewCA(t, "the-real-ca"), false)
	other := brokertest.NewCA(t, "some-other-ca").WriteFiles(t, t.TempDir())
	opts, err := TemporalOptions(load(t, "TEMPORAL_ADDRESS", front.addr, "TEMPORAL_CA_FILE", other.CA))
	require.NoError(t, err)
	_, err = client.Dial(opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
}

func TestTemporalDialWithoutClientCertRefusedByMTLSServer(t *testing.T) {
	ca := brokertest.NewCA(t, "temporal-test-ca")
	f := ca.WriteFiles(t, t.TempDir())
	front := startFakeFrontend(t, ca, true)
	opts, err := TemporalOptions(load(t, "TEMPORAL_ADDRESS", front.addr, "TEMPORAL_CA_FILE", f.CA))
	require.NoError(t, err)
	_, err = client.Dial(opts)
	require.Error(t, err, "the server requires a client certificate")
}

func TestCodecEndpointMounted(t *testing.T) {
	h, err := codecHandler(config.Default())
	require.NoError(t, err)
	assert.Nil(t, h, "no CODEC_TOKEN: no endpoint")

	cfg := load(t, "PAYLOAD_KEYS", testPayloadKey, "CODEC_TOKEN", "a-long-enough-codec-token")
	h, err = codecHandler(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(CodecPath, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/codec/decode", "application/json", strings.NewReader(`{"payloads":[]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/codec/decode", strings.NewReader(`{"payloads":[]}`))
	req.Header.Set("Authorization", "Bearer a-long-enough-codec-token")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// calls is how many calls f answered.
func (f *fakeFrontend) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.auth)
}

// TEMPORAL_ADDRESS as a list of a cluster's frontends: calls are balanced over those that
// answer (one of them never does), and go on when a frontend is lost.
func TestTemporalDialBalancesOverAListOfFrontends(t *testing.T) {
	ca := brokertest.NewCA(t, "temporal-test-ca")
	f := ca.WriteFiles(t, t.TempDir())
	a, b := startFakeFrontend(t, ca, false), startFakeFrontend(t, ca, false)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := lis.Addr().String()
	require.NoError(t, lis.Close())

	cfg := load(t, "TEMPORAL_ADDRESS", down+", "+a.addr+","+b.addr, "TEMPORAL_CA_FILE", f.CA, "TEMPORAL_API_KEY", "k")
	opts, err := TemporalOptions(cfg)
	require.NoError(t, err)
	c, err := client.Dial(opts)
	require.NoError(t, err, "a frontend down among them")
	defer c.Close()
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{})
		return err
	}
	for i := 0; a.calls() < 2 || b.calls() < 2; i++ {
		require.Less(t, i, 200, "calls reach both frontends that answer")
		require.NoError(t, call(), "a frontend down among them")
	}

	a.stop()
	// A call on its way to the frontend as it goes fails (Unavailable: the SDK's callers
	// retry such calls); once the connection's loss is seen, the balancer leaves it out.
	require.Eventually(t, func() bool {
		for range 5 {
			if call() != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "calls go on with the frontend left")
	before := b.calls()
	for range 20 {
		require.NoError(t, call(), "a frontend lost: the other answers")
	}
	assert.GreaterOrEqual(t, b.calls()-before, 20)
}

// A setting whose payload keys do not parse is refused by both the client options and the
// codec endpoint, naming PAYLOAD_KEYS.
func TestBadPayloadKeysAreRefused(t *testing.T) {
	cfg := config.Default()
	cfg.PayloadKeys = "not-a-key"
	_, err := TemporalOptions(cfg)
	assert.ErrorContains(t, err, "PAYLOAD_KEYS")

	cfg.CodecToken = "a-long-enough-codec-token"
	_, err = codecHandler(cfg)
	assert.ErrorContains(t, err, "PAYLOAD_KEYS")
}
