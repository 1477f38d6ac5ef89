//go:build integration

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/codec"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/service"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, codec.KeySize)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// lockedBuffer collects a process's or a logger's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// assertNoSecrets fails for each secret found in the output.
func assertNoSecrets(t *testing.T, what, out string, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		assert.NotContains(t, out, s, "%s shows the %s", what, name)
	}
}

// The whole service, built and run as the binary, over AMQPS with a client certificate (a
// private RabbitMQ node with a CA the test made), with a password in RABBITMQ_URL, a Temporal
// API key, payload keys, a codec token and an ops API token, logging at debug: a message goes
// through, and none of the secrets appears anywhere in its output.
func TestSecurityServiceOverTLSLogsNoSecrets(t *testing.T) {
	node := brokertest.StartTLSNode(t)
	temporal := devserver.StartForTest(t)
	bin := buildBinary(t)

	password := "amqp-pw-" + randomHex(t, 12)
	out, err := node.Ctl("add_user", "retry-app", password)
	require.NoError(t, err, "%s", out)
	out, err = node.Ctl("set_permissions", "-p", "/", "retry-app", ".*", ".*", ".*")
	require.NoError(t, err, "%s", out)
	url := strings.Replace(node.URL, "guest:guest", "retry-app:"+password, 1)

	secrets := map[string]string{
		"AMQP password":    password,
		"Temporal API key": "temporal-api-key-" + randomHex(t, 12),
		"payload key":      randomKey(t),
		"codec token":      "codec-token-" + randomHex(t, 12),
		"ops API token":    "ops-token-" + randomHex(t, 12),
	}
	prefix := "e2e-tls-" + randomHex(t, 4)
	ingress, dlq, orders := prefix+".retry", prefix+".dead", prefix+".orders"
	dir := t.TempDir()
	pf := filepath.Join(dir, "policies.yaml")
	require.NoError(t, os.WriteFile(pf, []byte(policyFile), 0o600))
	port, err := freeport.Get()
	require.NoError(t, err)
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)

	cmd := exec.Command(bin, "all")
	cmd.Env = append(os.Environ(),
		"RABBITMQ_URL="+url,
		"RABBITMQ_CA_FILE="+node.Files.CA,
		"RABBITMQ_CERT_FILE="+node.Files.ClientCert,
		"RABBITMQ_KEY_FILE="+node.Files.ClientKey,
		"TEMPORAL_ADDRESS="+temporal.Address,
		"TEMPORAL_NAMESPACE="+temporal.Namespace,
		"TEMPORAL_TASK_QUEUE="+prefix,
		// The dev server has no TLS: the key goes in plaintext, allowed on loopback only.
		"TEMPORAL_TLS=false",
		"TEMPORAL_API_KEY="+secrets["Temporal API key"],
		"PAYLOAD_KEYS=k1="+secrets["payload key"],
		"CODEC_TOKEN="+secrets["codec token"],
		"API_TOKENS=alice:admin="+secrets["ops API token"],
		"RETRY_QUEUE="+ingress,
		"MANUAL_REVIEW_QUEUE="+dlq,
		"POLICY_FILE="+pf,
		"HTTP_ADDR="+httpAddr,
		"LOG_LEVEL=debug",
	)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("service output:\n%s", logs.String())
		}
	})
	require.Eventually(t, func() bool { return httpOK("http://" + httpAddr + "/readyz") }, patience, 100*time.Millisecond, "service not ready")

	// The test's own connection to the TLS node, with the client certificate.
	bcfg := broker.Config{URL: node.URL, TLS: node.TLSConfig(t), ConnectionName: "e2e-tls-test"}
	conn, err := broker.Dial(bcfg)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(orders, true, false, false, false, nil)
	require.NoError(t, err)
	deliveries, err := ch.Consume(orders, "", true, false, false, false, nil)
	require.NoError(t, err)
	pub := broker.NewPublisher(bcfg, discard())
	defer pub.Close()
	body, err := json.Marshal(message.RetryMessage{MessageID: "tls-1", OriginalPayload: []byte("over TLS"), OriginalQueue: orders, ErrorReason: "503"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, "", ingress, true, amqp.Publishing{ContentType: "application/json", MessageId: "tls-1", Body: body}))
	select {
	case d := <-deliveries:
		assert.Equal(t, []byte("over TLS"), d.Body)
		assert.Equal(t, "tls-1:1", d.Headers["x-retry-key"])
	case <-time.After(patience):
		t.Fatalf("no republish over TLS within %s", patience)
	}

	// Requests with wrong credentials, which a careless handler might log.
	req, _ := http.NewRequest(http.MethodPost, "http://"+httpAddr+service.CodecPath+"decode", strings.NewReader(`{"payloads":[]}`))
	req.Header.Set("Authorization", "Bearer wrong-"+secrets["codec token"])
	if resp, err := httpClient.Do(req); err == nil {
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		resp.Body.Close()
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(patience):
		t.Fatalf("service did not stop within %s of SIGTERM", patience)
	}
	output := logs.String()
	require.Contains(t, output, "failure report accepted", "the log covers the message's path")
	require.Contains(t, output, "retry-app:xxxxx@localhost", "the URL is logged, redacted")
	assertNoSecrets(t, "the service's log", output, secrets)
}

// Error paths, where credentials most often leak: a refused AMQP password, and an API key
// sent over TLS to a server without it. The returned errors and the debug log keep them out.
func TestSecurityCredentialErrorsLogNoSecrets(t *testing.T) {
	temporal := devserver.StartForTest(t)
	run := func(t *testing.T, env map[string]string) (string, error) {
		base := map[string]string{
			"TEMPORAL_ADDRESS": temporal.Address, "TEMPORAL_NAMESPACE": temporal.Namespace,
			"HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "debug", "TEMPORAL_TASK_QUEUE": "e2e-sec-" + randomHex(t, 4),
			"RETRY_QUEUE": "e2e-sec.retry", "MANUAL_REVIEW_QUEUE": "e2e-sec.dead",
		}
		for k, v := range env {
			base[k] = v
		}
		cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := base[k]; return v, ok })
		require.NoError(t, err)
		var logs lockedBuffer
		logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		logger.Info("starting", "config", cfg.String())
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err = service.Run(ctx, cfg, logger)
		return logs.String(), err
	}

	t.Run("AMQP password refused", func(t *testing.T) {
		pw := "wrong-amqp-pw-" + randomHex(t, 8)
		u := strings.Replace(brokertest.URL(), "guest:guest", "guest:"+pw, 1)
		logs, err := run(t, map[string]string{"RABBITMQ_URL": u})
		require.Error(t, err)
		t.Logf("error: %v", err)
		assert.Contains(t, err.Error(), "dial 127.0.0.1:", "the broker named by host:port")
		assertNoSecrets(t, "the error", err.Error(), map[string]string{"password": pw})
		assertNoSecrets(t, "the log", logs, map[string]string{"password": pw})
	})

	t.Run("API key over TLS to a plaintext server", func(t *testing.T) {
		key := "api-key-" + randomHex(t, 12)
		// TEMPORAL_TLS=auto: the key switches TLS on, and the dev server does not speak it.
		logs, err := run(t, map[string]string{"TEMPORAL_API_KEY": key})
		require.Error(t, err)
		t.Logf("error: %v", err)
		assertNoSecrets(t, "the error", err.Error(), map[string]string{"API key": key})
		assertNoSecrets(t, "the log", logs, map[string]string{"API key": key})
	})
}

// With PAYLOAD_KEYS, what Temporal stores is ciphertext: the history holds neither the message
// body nor its headers, a client without the key cannot read the state, the message still goes
// round trip, and the codec endpoint decodes for a caller with the token.
func TestCodecPayloadsEncryptedInHistory(t *testing.T) {
	s := newStack(t)
	token := "codec-token-" + randomHex(t, 12)
	s.cfg.PayloadKeys = config.Secret("k1=" + randomKey(t))
	s.cfg.CodecToken = config.Secret(token)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)

	pii := []byte("Jane Doe, 12 Privet Drive, card 4111 1111 1111 1111, " + randomHex(t, 8))
	email := "jane-" + randomHex(t, 4) + "@example.com"
	s.publishRetry(message.RetryMessage{MessageID: "pii-1", OriginalPayload: pii, OriginalQueue: orders,
		ErrorReason: "503", HTTPStatus: 503, OriginalHeaders: map[string]any{"x-customer-email": email}})

	d := c.next(t, patience)
	require.Equal(t, pii, d.Body, "the message still goes round trip")
	require.Equal(t, email, d.Headers["x-customer-email"])

	opts, err := service.TemporalOptions(s.cfg)
	require.NoError(t, err)
	opts.Logger = nopLogger()
	withKey, err := client.Dial(opts)
	require.NoError(t, err)
	defer withKey.Close()
	id := message.WorkflowID(orders, "pii-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A client with the key reads the state.
	var st workflows.State
	eventually(t, patience, func() error {
		v, err := withKey.QueryWorkflow(ctx, id, "", workflows.QueryState)
		if err != nil {
			return err
		}
		if err := v.Get(&st); err != nil {
			return err
		}
		if st.RetryCount != 1 {
			return fmt.Errorf("retry count %d", st.RetryCount)
		}
		return nil
	})
	assert.Equal(t, pii, st.Message.Payload)

	// The raw history, read without the key.
	it := s.tc.GetWorkflowHistory(ctx, id, "", false, 0)
	var raw bytes.Buffer
	var sealed []*commonpb.Payload
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		b, err := proto.Marshal(e)
		require.NoError(t, err)
		raw.Write(b)
		if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			sealed = append(sealed, a.GetInput().GetPayloads()...)
		}
	}
	require.NotZero(t, raw.Len())
	for what, plain := range map[string][]byte{
		"body": pii, "body as base64": []byte(base64.StdEncoding.EncodeToString(pii)),
		"header": []byte(email), "a field name of the report": []byte("original_queue"),
	} {
		assert.False(t, bytes.Contains(raw.Bytes(), plain), "the history holds the %s in plaintext", what)
	}
	require.NotEmpty(t, sealed)
	for _, p := range sealed {
		assert.Equal(t, codec.EncodingEncrypted, string(p.Metadata[converter.MetadataEncoding]))
		assert.Equal(t, "k1", string(p.Metadata[codec.MetadataKeyID]))
	}

	// Without the key the state cannot be read.
	v, err := s.tc.QueryWorkflow(ctx, id, "", workflows.QueryState)
	require.NoError(t, err)
	var unreadable workflows.State
	require.Error(t, v.Get(&unreadable), "a client without the key decoded the state")

	// The codec endpoint, as the Web UI and `temporal --codec-endpoint` call it.
	reqBody, err := protojson.Marshal(&commonpb.Payloads{Payloads: sealed})
	require.NoError(t, err)
	endpoint := "http://" + s.cfg.HTTPAddr + service.CodecPath + "decode"
	post := func(auth string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(reqBody))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Namespace", s.cfg.Namespace)
		req.Header.Set("Origin", "http://127.0.0.1:8233")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp := post("")
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp = post("Bearer not-" + token)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp = post("Bearer " + token)
	decoded, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", decoded)
	assert.Equal(t, "http://127.0.0.1:8233", resp.Header.Get("Access-Control-Allow-Origin"))
	var ps commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(decoded, &ps))
	var in workflows.Input
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(&ps, &in))
	require.NotNil(t, in.Report)
	assert.Equal(t, pii, in.Report.Message.Payload)
}
