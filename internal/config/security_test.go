package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
)

// securityTested lists the settings TestSecurityEnvAndFlags covers, for TestEnvAndFlags.
var securityTested = func() map[string]bool {
	m := map[string]bool{}
	for _, tt := range securityCases(Files{}) {
		m[tt.env] = true
	}
	return m
}()

// Files are the PEM fixtures of the security tests.
type Files = brokertest.Files

func pemFiles(t *testing.T) Files {
	t.Helper()
	return brokertest.NewCA(t, "config-test-ca").WriteFiles(t, t.TempDir())
}

func b64Key(t testing.TB) string {
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(k)
}

// read is a test file's text without surrounding space (settings trim it); "" for no file
// (securityTested lists the cases without files).
func read(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}

type securityCase struct {
	env, flag string
	// base is the environment the setting needs to be valid (its partner settings).
	base              []string
	envVal, flagVal   string
	get               func(Config) any
	fromEnv, fromFlag any
}

var (
	testKey1 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	testKey2 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
)

func securityCases(f Files) []securityCase {
	amqps := []string{"RABBITMQ_URL", "amqps://u:p@mq:5671/"}
	keys := "k1=" + testKey1 + ",k2=" + testKey2
	return []securityCase{
		{"RABBITMQ_CA_FILE", "rabbitmq-ca-file", amqps, f.CA, f.CA, func(c Config) any { return c.RabbitMQCAFile }, f.CA, f.CA},
		{"RABBITMQ_CERT_FILE", "rabbitmq-cert-file", append([]string{"RABBITMQ_KEY_FILE", f.ClientKey}, amqps...), f.ClientCert, f.ClientCert, func(c Config) any { return c.RabbitMQCertFile }, f.ClientCert, f.ClientCert},
		{"RABBITMQ_KEY_FILE", "rabbitmq-key-file", append([]string{"RABBITMQ_CERT_FILE", f.ClientCert}, amqps...), f.ClientKey, f.ClientKey, func(c Config) any { return c.RabbitMQKeyFile }, f.ClientKey, f.ClientKey},
		{"TEMPORAL_TLS", "temporal-tls", nil, "TRUE", "false", func(c Config) any { return c.TemporalTLS }, "true", "false"},
		{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "temporal-tls-server-ca-cert-path", nil, f.CA, f.CA, func(c Config) any { return c.TemporalCAFile }, f.CA, f.CA},
		{"TEMPORAL_TLS_SERVER_CA_CERT_DATA", "temporal-tls-server-ca-cert-data", nil, read(f.CA), read(f.CA) + "\n", func(c Config) any { return c.TemporalCAData }, read(f.CA), read(f.CA)},
		{"TEMPORAL_TLS_CLIENT_CERT_PATH", "temporal-tls-client-cert-path", []string{"TEMPORAL_TLS_CLIENT_KEY_PATH", f.ClientKey}, f.ClientCert, f.ClientCert, func(c Config) any { return c.TemporalCertFile }, f.ClientCert, f.ClientCert},
		{"TEMPORAL_TLS_CLIENT_CERT_DATA", "temporal-tls-client-cert-data", []string{"TEMPORAL_TLS_CLIENT_KEY_PATH", f.ClientKey}, read(f.ClientCert), read(f.ClientCert) + "\n", func(c Config) any { return c.TemporalCertData }, read(f.ClientCert), read(f.ClientCert)},
		{"TEMPORAL_TLS_CLIENT_KEY_PATH", "temporal-tls-client-key-path", []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", f.ClientCert}, f.ClientKey, f.ClientKey, func(c Config) any { return c.TemporalKeyFile }, f.ClientKey, f.ClientKey},
		{"TEMPORAL_TLS_CLIENT_KEY_DATA", "temporal-tls-client-key-data", []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", f.ClientCert}, read(f.ClientKey), read(f.ClientKey) + "\n", func(c Config) any { return c.TemporalKeyData.Reveal() }, read(f.ClientKey), read(f.ClientKey)},
		{"TEMPORAL_TLS_SERVER_NAME", "temporal-tls-server-name", nil, "t.env", "t.flag", func(c Config) any { return c.TemporalServerName }, "t.env", "t.flag"},
		{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "temporal-tls-disable-host-verification", nil, "1", "false", func(c Config) any { return c.TemporalInsecureSkipVerify }, true, false},
		{"TEMPORAL_CLIENT_AUTHORITY", "temporal-client-authority", nil, "a.env", "a.flag", func(c Config) any { return c.TemporalAuthority }, "a.env", "a.flag"},
		{"TEMPORAL_API_KEY", "temporal-api-key", nil, "key-env", "key-flag", func(c Config) any { return c.TemporalAPIKey.Reveal() }, "key-env", "key-flag"},
		{"PAYLOAD_KEYS", "payload-keys", nil, "k1=" + testKey1, "k2=" + testKey2, func(c Config) any { return c.PayloadKeys.Reveal() }, "k1=" + testKey1, "k2=" + testKey2},
		{"PAYLOAD_KEY_ID", "payload-key-id", []string{"PAYLOAD_KEYS", keys}, "k1", "k2", func(c Config) any { return c.PayloadKeyID }, "k1", "k2"},
		{"CODEC_TOKEN", "codec-token", []string{"PAYLOAD_KEYS", keys, "PAYLOAD_KEY_ID", "k1"}, "token-from-the-env", "token-from-the-flag", func(c Config) any { return c.CodecToken.Reveal() }, "token-from-the-env", "token-from-the-flag"},
		{"CODEC_CORS_ORIGINS", "codec-cors-origins", nil, "https://ui.example", "http://a:1, http://b:2/", func(c Config) any { return c.CodecOrigins() }, []string{"https://ui.example"}, []string{"http://a:1", "http://b:2"}},
	}
}

// Every security setting: env overrides the default; a flag overrides the env.
func TestSecurityEnvAndFlags(t *testing.T) {
	f := pemFiles(t)
	for _, tt := range securityCases(f) {
		t.Run(tt.env, func(t *testing.T) {
			c, err := Load(nil, env(append(tt.base, tt.env, tt.envVal)...))
			require.NoError(t, err)
			assert.Equal(t, tt.fromEnv, tt.get(c), "env")

			c, err = Load([]string{"-" + tt.flag, tt.flagVal}, env(append(tt.base, tt.env, tt.envVal)...))
			require.NoError(t, err)
			assert.Equal(t, tt.fromFlag, tt.get(c), "flag over env")
		})
	}
}

func TestRabbitMQTLS(t *testing.T) {
	f := pemFiles(t)
	c, err := Load(nil, env("RABBITMQ_URL", "amqps://u:p@mq:5671/", "RABBITMQ_CA_FILE", f.CA,
		"RABBITMQ_CERT_FILE", f.ClientCert, "RABBITMQ_KEY_FILE", f.ClientKey))
	require.NoError(t, err)
	tc, err := c.RabbitMQTLS()
	require.NoError(t, err)
	require.NotNil(t, tc)
	assert.NotNil(t, tc.RootCAs)
	assert.Len(t, tc.Certificates, 1)

	c, err = Load(nil, env("RABBITMQ_URL", "amqps://u:p@mq:5671/"))
	require.NoError(t, err)
	tc, err = c.RabbitMQTLS()
	require.NoError(t, err)
	assert.Nil(t, tc, "amqps without files: amqp091's default (system roots)")
}

func TestTemporalTLS(t *testing.T) {
	f := pemFiles(t)
	for _, tt := range []struct {
		name    string
		env     []string
		enabled bool
	}{
		{"default: off", nil, false},
		{"forced on", []string{"TEMPORAL_TLS", "true"}, true},
		{"auto with a CA", []string{"TEMPORAL_CA_FILE", f.CA}, true},
		{"auto with an API key", []string{"TEMPORAL_API_KEY", "k"}, true},
		{"auto with a server name", []string{"TEMPORAL_SERVER_NAME", "temporal.internal"}, true},
		{"off with an API key on loopback", []string{"TEMPORAL_TLS", "0", "TEMPORAL_API_KEY", "k"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(nil, env(tt.env...))
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, c.TemporalTLSEnabled())
			tc, err := c.TemporalTLSConfig()
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, tc != nil)
		})
	}
	c, err := Load(nil, env("TEMPORAL_CA_FILE", f.CA, "TEMPORAL_CERT_FILE", f.ClientCert, "TEMPORAL_KEY_FILE", f.ClientKey, "TEMPORAL_SERVER_NAME", "temporal.internal"))
	require.NoError(t, err)
	tc, err := c.TemporalTLSConfig()
	require.NoError(t, err)
	assert.Equal(t, "temporal.internal", tc.ServerName)
	assert.NotNil(t, tc.RootCAs)
	assert.Len(t, tc.Certificates, 1)
}

func TestPayloadCodecSetting(t *testing.T) {
	c, err := Load(nil, env("PAYLOAD_KEYS", "only="+testKey1))
	require.NoError(t, err)
	cd, err := c.PayloadCodec()
	require.NoError(t, err)
	assert.Equal(t, "only", cd.ActiveKeyID(), "the only key is the active one")

	c, err = Load(nil, env("PAYLOAD_KEYS", "old="+testKey1+",new="+testKey2, "PAYLOAD_KEY_ID", "new"))
	require.NoError(t, err)
	cd, err = c.PayloadCodec()
	require.NoError(t, err)
	assert.Equal(t, "new", cd.ActiveKeyID())
	assert.Equal(t, []string{"new", "old"}, cd.KeyIDs())

	cd, err = Default().PayloadCodec()
	require.NoError(t, err)
	assert.Nil(t, cd)
}

// Each bad security setting is refused at start by a message naming it, without the secret.
func TestSecurityRefusals(t *testing.T) {
	f := pemFiles(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(dir, "missing.pem")
	amqps := "amqps://u:secretpw@mq:5671/"
	const apiKey = "secret-api-key"
	secretKey := b64Key(t)

	for _, tt := range []struct {
		name string
		env  []string
		want string
	}{
		{"rabbit CA missing", []string{"RABBITMQ_URL", amqps, "RABBITMQ_CA_FILE", missing}, "RABBITMQ_CA_FILE: open " + missing},
		{"rabbit CA not PEM", []string{"RABBITMQ_URL", amqps, "RABBITMQ_CA_FILE", notPEM}, "RABBITMQ_CA_FILE: " + notPEM + " holds no PEM certificate"},
		{"rabbit cert without key", []string{"RABBITMQ_URL", amqps, "RABBITMQ_CERT_FILE", f.ClientCert}, "RABBITMQ_KEY_FILE: must be set with RABBITMQ_CERT_FILE"},
		{"rabbit key without cert", []string{"RABBITMQ_URL", amqps, "RABBITMQ_KEY_FILE", f.ClientKey}, "RABBITMQ_CERT_FILE: must be set with RABBITMQ_KEY_FILE"},
		{"rabbit key does not match", []string{"RABBITMQ_URL", amqps, "RABBITMQ_CERT_FILE", f.ClientCert, "RABBITMQ_KEY_FILE", f.ServerKey}, "RABBITMQ_CERT_FILE/RABBITMQ_KEY_FILE: tls: private key does not match public key"},
		{"rabbit files with amqp", []string{"RABBITMQ_CA_FILE", f.CA}, "RABBITMQ_URL is amqp://, not amqps://"},
		{"temporal TLS word", []string{"TEMPORAL_TLS", "maybe"}, `TEMPORAL_TLS: "maybe" is not auto, true or false`},
		{"temporal CA missing", []string{"TEMPORAL_CA_FILE", missing}, "TEMPORAL_TLS_SERVER_CA_CERT_PATH: open " + missing},
		{"temporal CA not PEM", []string{"TEMPORAL_CA_FILE", notPEM}, "TEMPORAL_TLS_SERVER_CA_CERT_PATH: " + notPEM + " holds no PEM certificate"},
		{"temporal cert without key", []string{"TEMPORAL_CERT_FILE", f.ClientCert}, "TEMPORAL_TLS_CLIENT_KEY_PATH: must be set with TEMPORAL_TLS_CLIENT_CERT_PATH"},
		{"temporal cert not PEM", []string{"TEMPORAL_CERT_FILE", notPEM, "TEMPORAL_KEY_FILE", f.ClientKey}, "TEMPORAL_TLS_CLIENT_CERT_PATH/TEMPORAL_TLS_CLIENT_KEY_PATH: tls: failed to find any PEM data in certificate input"},
		{"temporal CA with TLS off", []string{"TEMPORAL_TLS", "false", "TEMPORAL_CA_FILE", f.CA}, "TEMPORAL_TLS_SERVER_CA_CERT_PATH: set, but TEMPORAL_TLS is false"},
		{"API key in plaintext off loopback", []string{"TEMPORAL_TLS", "false", "TEMPORAL_ADDRESS", "temporal.prod:7233", "TEMPORAL_API_KEY", apiKey}, "TEMPORAL_API_KEY: TEMPORAL_TLS is false and TEMPORAL_ADDRESS \"temporal.prod:7233\" is not a loopback address"},
		{"API key in plaintext, one frontend off loopback", []string{"TEMPORAL_TLS", "false", "TEMPORAL_ADDRESS", "127.0.0.1:7233,temporal.prod:7233", "TEMPORAL_API_KEY", apiKey}, "is not a loopback address"},
		{"payload keys not base64", []string{"PAYLOAD_KEYS", "k1=" + secretKey[:30] + "*"}, `PAYLOAD_KEYS: key "k1" is not base64`},
		{"payload key short", []string{"PAYLOAD_KEYS", "k1=" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))}, `PAYLOAD_KEYS: key "k1" is 16 bytes, want 32`},
		{"payload key without id", []string{"PAYLOAD_KEYS", secretKey}, "PAYLOAD_KEYS: entry 1: "},
		{"payload key without id, id-like", []string{"PAYLOAD_KEYS", testKey1}, "PAYLOAD_KEYS: entry 1: no key after the id"},
		{"two keys no active", []string{"PAYLOAD_KEYS", "a=" + testKey1 + ",b=" + testKey2}, "PAYLOAD_KEY_ID: must name the active key when PAYLOAD_KEYS holds 2 keys"},
		{"active key unknown", []string{"PAYLOAD_KEYS", "a=" + testKey1, "PAYLOAD_KEY_ID", "c"}, `PAYLOAD_KEY_ID: active key id "c" is not among the keys (a)`},
		{"key id without keys", []string{"PAYLOAD_KEY_ID", "a"}, "PAYLOAD_KEY_ID: set, but PAYLOAD_KEYS is empty"},
		{"codec token without keys", []string{"CODEC_TOKEN", "secret-codec-token-long"}, "CODEC_TOKEN: set, but PAYLOAD_KEYS is empty"},
		{"codec token short", []string{"PAYLOAD_KEYS", "a=" + testKey1, "CODEC_TOKEN", "secret"}, "CODEC_TOKEN: must be at least 16 characters"},
		{"codec origin with path", []string{"CODEC_CORS_ORIGINS", "http://ui:8233/namespaces"}, `CODEC_CORS_ORIGINS: "http://ui:8233/namespaces" is not an origin`},
		{"codec origin no scheme", []string{"CODEC_CORS_ORIGINS", "ui:8233"}, `CODEC_CORS_ORIGINS: "ui:8233" is not an origin`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(nil, env(tt.env...))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			for _, s := range []string{"secretpw", apiKey, secretKey[:20], testKey1[:20], "secret-codec-token-long"} {
				assert.NotContains(t, err.Error(), s, "a secret leaked into the error")
			}
		})
	}
}

// String and Usage never show a secret: not the AMQP password, the API key, the payload keys
// nor the codec token; they show whether each is set.
func TestStringHidesSecrets(t *testing.T) {
	k1 := b64Key(t)
	c, err := Load(nil, env(
		"RABBITMQ_URL", "amqps://app:amqp-pass-1@mq:5671/",
		"TEMPORAL_API_KEY", "api-key-value-2",
		"PAYLOAD_KEYS", "k1="+k1+",k2="+testKey2, "PAYLOAD_KEY_ID", "k1",
		"CODEC_TOKEN", "codec-token-value-3",
	))
	require.NoError(t, err)
	s := c.String()
	for _, secret := range []string{"amqp-pass-1", "api-key-value-2", k1, k1[:12], testKey2[:12], "codec-token-value-3"} {
		assert.NotContains(t, s, secret)
	}
	assert.Contains(t, s, `TEMPORAL_API_KEY="xxxxx"`)
	assert.Contains(t, s, `PAYLOAD_KEYS="k1=xxxxx,k2=xxxxx"`)
	assert.Contains(t, s, `PAYLOAD_KEY_ID="k1"`)
	assert.Contains(t, s, `CODEC_TOKEN="xxxxx"`)
	assert.Equal(t, "api-key-value-2", c.TemporalAPIKey.Reveal(), "String leaves the config alone")

	assert.Contains(t, Default().String(), `TEMPORAL_API_KEY=""`, "unset shows empty")

	var b strings.Builder
	Usage(&b)
	assert.Contains(t, b.String(), "-temporal-api-key  (env TEMPORAL_API_KEY)")
}
