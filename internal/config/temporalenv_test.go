package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// profileTested are the settings TestTemporalProfile covers, for TestEnvAndFlags.
var profileTested = map[string]bool{"TEMPORAL_CONFIG_FILE": true, "TEMPORAL_PROFILE": true}

func writeProfile(t *testing.T, toml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o600))
	return path
}

// Temporal's client TOML: a profile sets the connection; the environment and flags win over it.
func TestTemporalProfile(t *testing.T) {
	f := pemFiles(t)
	path := writeProfile(t, `
[profile.default]
address = "default.example:7233"
namespace = "from-default"

[profile.prod]
address = "prod.tmprl.cloud:7233"
namespace = "prod-ns"
api_key = "profile-key"
[profile.prod.tls]
server_ca_cert_path = "`+f.CA+`"
server_name = "prod.internal"
[profile.prod.grpc_meta]
x_team = "payments"
`)
	c, err := Load(nil, env("TEMPORAL_CONFIG_FILE", path))
	require.NoError(t, err)
	assert.Equal(t, "default.example:7233", c.TemporalAddress)
	assert.Equal(t, "from-default", c.Namespace)
	assert.False(t, c.TemporalTLSEnabled())

	c, err = Load(nil, env("TEMPORAL_CONFIG_FILE", path, "TEMPORAL_PROFILE", "prod", "TEMPORAL_NAMESPACE", "env-ns"))
	require.NoError(t, err)
	assert.Equal(t, "prod.tmprl.cloud:7233", c.TemporalAddress)
	assert.Equal(t, "env-ns", c.Namespace, "the environment wins over the profile")
	assert.Equal(t, "profile-key", c.TemporalAPIKey.Reveal())
	assert.Equal(t, f.CA, c.TemporalCAFile)
	assert.Equal(t, "prod.internal", c.TemporalServerName)
	assert.Equal(t, TLSOn, c.TemporalTLS)
	assert.Equal(t, map[string]Secret{"x-team": "payments"}, c.TemporalGRPCMeta)
	assert.NotContains(t, c.String(), "profile-key")

	// Flags name the file and profile too, and win over the profile's values.
	c, err = Load([]string{"-temporal-config-file", path, "-temporal-profile", "prod", "-temporal-address", "flag:7233"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "flag:7233", c.TemporalAddress)
	assert.Equal(t, "prod-ns", c.Namespace)

	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"missing profile": {[]string{"TEMPORAL_CONFIG_FILE", path, "TEMPORAL_PROFILE", "staging"}, "unable to find profile staging"},
		"missing file":    {[]string{"TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "nope.toml")}, "TEMPORAL_CONFIG_FILE:"},
		"unknown key":     {[]string{"TEMPORAL_CONFIG_FILE", writeProfile(t, "[profile.default]\nadress = \"x:1\"\n")}, "adress"},
		"remote codec":    {[]string{"TEMPORAL_CONFIG_FILE", writeProfile(t, "[profile.default.codec]\nendpoint = \"http://c\"\n")}, "remote codec is not supported"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(nil, env(tc.env...))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// The older names of the Temporal TLS settings still work; the standard one wins only when
// both agree, and a disagreement is refused rather than resolved silently.
func TestTemporalAliases(t *testing.T) {
	f := pemFiles(t)
	c, err := Load(nil, env("TEMPORAL_CA_FILE", f.CA, "TEMPORAL_CERT_FILE", f.ClientCert, "TEMPORAL_KEY_FILE", f.ClientKey, "TEMPORAL_SERVER_NAME", "old.name"))
	require.NoError(t, err)
	assert.Equal(t, [4]string{f.CA, f.ClientCert, f.ClientKey, "old.name"}, [4]string{c.TemporalCAFile, c.TemporalCertFile, c.TemporalKeyFile, c.TemporalServerName})

	c, err = Load(nil, env("TEMPORAL_TLS_SERVER_NAME", "same", "TEMPORAL_SERVER_NAME", "same"))
	require.NoError(t, err)
	assert.Equal(t, "same", c.TemporalServerName)

	_, err = Load(nil, env("TEMPORAL_TLS_SERVER_NAME", "new", "TEMPORAL_SERVER_NAME", "old"))
	require.ErrorContains(t, err, "TEMPORAL_TLS_SERVER_NAME: set, and its older name TEMPORAL_SERVER_NAME differs")

	// The older flags too.
	c, err = Load([]string{"-temporal-server-name", "flag.name"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "flag.name", c.TemporalServerName)

	for _, old := range []string{"TEMPORAL_CA_FILE", "TEMPORAL_CERT_FILE", "TEMPORAL_KEY_FILE", "TEMPORAL_SERVER_NAME"} {
		assert.True(t, KnownEnv(old), old)
	}
}

// PEM given inline works like a file, and inline and file together are refused.
func TestTemporalPEMData(t *testing.T) {
	f := pemFiles(t)
	c, err := Load(nil, env("TEMPORAL_TLS_SERVER_CA_CERT_DATA", read(f.CA), "TEMPORAL_TLS_CLIENT_CERT_DATA", read(f.ClientCert), "TEMPORAL_TLS_CLIENT_KEY_DATA", read(f.ClientKey)))
	require.NoError(t, err)
	tc, err := c.TemporalTLSConfig()
	require.NoError(t, err)
	assert.NotNil(t, tc.RootCAs)
	assert.Len(t, tc.Certificates, 1)
	assert.NotContains(t, c.String(), "PRIVATE KEY")

	_, err = Load(nil, env("TEMPORAL_TLS_SERVER_CA_CERT_DATA", read(f.CA), "TEMPORAL_TLS_SERVER_CA_CERT_PATH", f.CA))
	require.ErrorContains(t, err, "TEMPORAL_TLS_SERVER_CA_CERT_PATH: set together with TEMPORAL_TLS_SERVER_CA_CERT_DATA")

	_, err = Load(nil, env("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "not pem"))
	require.ErrorContains(t, err, "TEMPORAL_TLS_SERVER_CA_CERT_DATA: the text holds no PEM certificate")
}

// Every name the process reads is known; misspellings and foreign names are not.
func TestKnownEnv(t *testing.T) {
	for _, n := range []string{"RETRY_QUEUE", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_PROFILE", "OTEL_EXPORTER_OTLP_ENDPOINT", "GOMEMLIMIT", "DEPTH_POLLER"} {
		assert.True(t, KnownEnv(n), n)
	}
	for _, n := range []string{"RETRY_QUEUES", "TEMPORAL_CODEC_ENDPOINT", "OTEL_", "HOME", ""} {
		assert.False(t, KnownEnv(n), n)
	}
}
