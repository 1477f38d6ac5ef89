package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/codec"
)

// Values of TemporalTLS.
const (
	// TLSAuto: TLS when a CA file, client certificate, server name or API key is set.
	TLSAuto = "auto"
	TLSOn   = "true"
	TLSOff  = "false"
)

// minCodecTokenLen keeps the codec token from being guessable.
const minCodecTokenLen = 16

// securitySettings are the TLS, credential and payload-encryption settings (docs/security.md).
func (c *Config) securitySettings() []setting {
	return []setting{
		{"RABBITMQ_CA_FILE", "PEM CA bundle that signed the broker's certificate (amqps); empty: the system roots", (*text)(&c.RabbitMQCAFile)},
		{"RABBITMQ_CERT_FILE", "PEM client certificate for amqps (with RABBITMQ_KEY_FILE)", (*text)(&c.RabbitMQCertFile)},
		{"RABBITMQ_KEY_FILE", "PEM private key of the client certificate", (*text)(&c.RabbitMQKeyFile)},
		{"TEMPORAL_TLS", "TLS to Temporal: auto (when a CA, certificate, server name or API key is set), true or false", (*tlsMode)(&c.TemporalTLS)},
		{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "PEM CA bundle that signed Temporal's certificate; empty: the system roots", (*text)(&c.TemporalCAFile)},
		{"TEMPORAL_TLS_SERVER_CA_CERT_DATA", "the same CA bundle as PEM text", (*text)(&c.TemporalCAData)},
		{"TEMPORAL_TLS_CLIENT_CERT_PATH", "PEM client certificate for mTLS to Temporal (with TEMPORAL_TLS_CLIENT_KEY_PATH)", (*text)(&c.TemporalCertFile)},
		{"TEMPORAL_TLS_CLIENT_CERT_DATA", "the client certificate as PEM text", (*text)(&c.TemporalCertData)},
		{"TEMPORAL_TLS_CLIENT_KEY_PATH", "PEM private key of the Temporal client certificate", (*text)(&c.TemporalKeyFile)},
		{"TEMPORAL_TLS_CLIENT_KEY_DATA", "the client key as PEM text (secret: prefer the environment)", &c.TemporalKeyData},
		{"TEMPORAL_TLS_SERVER_NAME", "name to verify Temporal's certificate against; empty: the TEMPORAL_ADDRESS host", (*text)(&c.TemporalServerName)},
		{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "skip verifying Temporal's certificate (development only)", (*boolean)(&c.TemporalInsecureSkipVerify)},
		{"TEMPORAL_CLIENT_AUTHORITY", "gRPC :authority sent to Temporal; empty: the address", (*text)(&c.TemporalAuthority)},
		{"TEMPORAL_CONFIG_FILE", "Temporal client TOML file read beneath the environment; empty: the user's temporalio/temporal.toml when it exists", (*text)(&c.TemporalConfigFile)},
		{"TEMPORAL_PROFILE", "profile of that file (default \"default\"; a named one must exist)", (*text)(&c.TemporalProfile)},
		{"TEMPORAL_API_KEY", "API key sent to Temporal (secret: prefer the environment)", &c.TemporalAPIKey},
		{"PAYLOAD_KEYS", "AES-256 keys that encrypt Temporal payloads: id=base64key,... (secret: prefer the environment)", (*payloadKeys)(&c.PayloadKeys)},
		{"PAYLOAD_KEY_ID", "id of the PAYLOAD_KEYS key that encrypts new payloads; empty: the only key", (*text)(&c.PayloadKeyID)},
		{"CODEC_TOKEN", "bearer token of the codec endpoint /codec/ (secret: prefer the environment)", &c.CodecToken},
		{"CODEC_CORS_ORIGINS", "Web UI origins allowed to call /codec/ from a browser, comma-separated", (*text)(&c.CodecCORSOrigins)},
	}
}

// tlsMode is TEMPORAL_TLS: auto or a boolean (1, t, TRUE, false, ...) kept as TLSAuto, TLSOn or
// TLSOff; anything else is kept for Validate to refuse.
type tlsMode string

func (m *tlsMode) Set(v string) error {
	v = strings.ToLower(strings.TrimSpace(v))
	if b, err := strconv.ParseBool(v); err == nil {
		v = strconv.FormatBool(b)
	}
	*m = tlsMode(v)
	return nil
}

func (m *tlsMode) String() string { return string(*m) }

// payloadKeys is PAYLOAD_KEYS, a Secret that shows its key ids (not secret, and what an
// operator rotating keys needs to see) with each key redacted.
type payloadKeys Secret

func (k *payloadKeys) Set(v string) error { return (*Secret)(k).Set(v) }

func (k *payloadKeys) String() string {
	if *k == "" {
		return ""
	}
	keys, err := codec.ParseKeys(Secret(*k).Reveal())
	if err != nil {
		return Redacted
	}
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id+"="+Redacted)
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// validateSecurity checks the security settings, reading the certificate and key files so that
// a bad one is refused at start naming its setting. Messages never contain a secret.
func (c Config) validateSecurity() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	// RabbitMQ.
	rabbitFiles := c.RabbitMQCAFile != "" || c.RabbitMQCertFile != "" || c.RabbitMQKeyFile != ""
	if urls, err := broker.SplitURLs(c.BrokerURLs()); err == nil && rabbitFiles {
		for _, raw := range urls {
			if u, err := url.Parse(raw); err == nil && u.Scheme == "amqp" {
				bad("RABBITMQ_CA_FILE/RABBITMQ_CERT_FILE/RABBITMQ_KEY_FILE: set, but %s is amqp://, not amqps:// (%s): the connection would not use TLS", c.brokerURLsEnv(), broker.Addr(raw))
				break
			}
		}
	}
	if _, err := c.RabbitMQTLS(); err != nil {
		errs = append(errs, err)
	}

	// Temporal.
	switch c.TemporalTLS {
	case TLSAuto, TLSOn, TLSOff:
	default:
		bad("TEMPORAL_TLS: %q is not auto, true or false", c.TemporalTLS)
	}
	if c.TemporalTLS == TLSOff {
		for env, v := range map[string]string{
			"TEMPORAL_TLS_SERVER_CA_CERT_PATH": c.TemporalCAFile, "TEMPORAL_TLS_SERVER_CA_CERT_DATA": c.TemporalCAData,
			"TEMPORAL_TLS_CLIENT_CERT_PATH": c.TemporalCertFile, "TEMPORAL_TLS_CLIENT_CERT_DATA": c.TemporalCertData,
			"TEMPORAL_TLS_CLIENT_KEY_PATH": c.TemporalKeyFile, "TEMPORAL_TLS_CLIENT_KEY_DATA": string(c.TemporalKeyData),
			"TEMPORAL_TLS_SERVER_NAME": c.TemporalServerName,
		} {
			if v != "" {
				bad("%s: set, but TEMPORAL_TLS is false", env)
			}
		}
		if c.TemporalAPIKey != "" && !allLoopback(c.TemporalAddresses()) {
			bad("TEMPORAL_API_KEY: TEMPORAL_TLS is false and TEMPORAL_ADDRESS %q is not a loopback address: the key would cross the network in plaintext", c.TemporalAddress)
		}
	}
	if _, err := c.TemporalTLSConfig(); err != nil {
		errs = append(errs, err)
	}

	// Payload encryption and the codec endpoint.
	if c.PayloadKeys == "" {
		if c.PayloadKeyID != "" {
			bad("PAYLOAD_KEY_ID: set, but PAYLOAD_KEYS is empty")
		}
		if c.CodecToken != "" {
			bad("CODEC_TOKEN: set, but PAYLOAD_KEYS is empty: there is nothing for the codec endpoint to decode")
		}
	} else if _, err := c.PayloadCodec(); err != nil {
		errs = append(errs, err)
	}
	if c.CodecToken != "" && len(c.CodecToken) < minCodecTokenLen {
		bad("CODEC_TOKEN: must be at least %d characters", minCodecTokenLen)
	}
	for _, o := range c.CodecOrigins() {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			bad("CODEC_CORS_ORIGINS: %q is not an origin like http://127.0.0.1:8233", o)
		}
	}
	return errs
}

// allLoopback says whether every one of addrs is a loopback host:port (and there is one).
func allLoopback(addrs []string) bool {
	for _, a := range addrs {
		if !loopbackAddress(a) {
			return false
		}
	}
	return len(addrs) > 0
}

func loopbackAddress(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// RabbitMQTLS is the TLS configuration for amqps:// from RABBITMQ_CA_FILE, RABBITMQ_CERT_FILE and
// RABBITMQ_KEY_FILE; nil when none is set (amqps then verifies against the system roots).
func (c Config) RabbitMQTLS() (*tls.Config, error) {
	if c.RabbitMQCAFile == "" && c.RabbitMQCertFile == "" && c.RabbitMQKeyFile == "" {
		return nil, nil
	}
	return loadTLS(tlsSource{
		ca:   pemSource{fileEnv: "RABBITMQ_CA_FILE", file: c.RabbitMQCAFile},
		cert: pemSource{fileEnv: "RABBITMQ_CERT_FILE", file: c.RabbitMQCertFile},
		key:  pemSource{fileEnv: "RABBITMQ_KEY_FILE", file: c.RabbitMQKeyFile},
	}, "")
}

// TemporalTLSEnabled reports whether the Temporal connection uses TLS.
func (c Config) TemporalTLSEnabled() bool {
	switch c.TemporalTLS {
	case TLSOn:
		return true
	case TLSOff:
		return false
	}
	return c.TemporalCAFile != "" || c.TemporalCAData != "" || c.TemporalCertFile != "" || c.TemporalCertData != "" ||
		c.TemporalKeyFile != "" || c.TemporalKeyData != "" || c.TemporalServerName != "" || c.TemporalAPIKey != "" ||
		c.TemporalInsecureSkipVerify
}

// TemporalTLSConfig is the TLS configuration for Temporal, nil when TLS is off.
func (c Config) TemporalTLSConfig() (*tls.Config, error) {
	if !c.TemporalTLSEnabled() {
		return nil, nil
	}
	cfg, err := loadTLS(tlsSource{
		ca:   pemSource{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", c.TemporalCAFile, "TEMPORAL_TLS_SERVER_CA_CERT_DATA", c.TemporalCAData},
		cert: pemSource{"TEMPORAL_TLS_CLIENT_CERT_PATH", c.TemporalCertFile, "TEMPORAL_TLS_CLIENT_CERT_DATA", c.TemporalCertData},
		key:  pemSource{"TEMPORAL_TLS_CLIENT_KEY_PATH", c.TemporalKeyFile, "TEMPORAL_TLS_CLIENT_KEY_DATA", c.TemporalKeyData.Reveal()},
	}, c.TemporalServerName)
	if err != nil {
		return nil, err
	}
	cfg.InsecureSkipVerify = c.TemporalInsecureSkipVerify
	return cfg, nil
}

// pemSource is one PEM input of a TLS configuration: a file or the PEM text itself, each
// named by its setting for error messages.
type pemSource struct {
	fileEnv, file, dataEnv, data string
}

func (p pemSource) set() bool { return p.file != "" || p.data != "" }

// read returns the PEM bytes; errors name the setting, never key material.
func (p pemSource) read() ([]byte, string, error) {
	switch {
	case p.file != "" && p.data != "":
		return nil, p.fileEnv, fmt.Errorf("%s: set together with %s; give one", p.fileEnv, p.dataEnv)
	case p.data != "":
		return []byte(p.data), p.dataEnv, nil
	}
	b, err := os.ReadFile(p.file)
	if err != nil {
		return nil, p.fileEnv, fmt.Errorf("%s: %w", p.fileEnv, err)
	}
	return b, p.fileEnv, nil
}

// tlsSource are the PEM inputs of a client TLS configuration.
type tlsSource struct{ ca, cert, key pemSource }

// loadTLS builds a client TLS configuration (TLS 1.2 or later), naming the setting at fault.
func loadTLS(src tlsSource, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if src.ca.set() {
		pem, name, err := src.ca.read()
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: %s holds no PEM certificate", name, describe(src.ca, name))
		}
		cfg.RootCAs = pool
	}
	switch {
	case !src.cert.set() && !src.key.set():
	case !src.cert.set():
		return nil, fmt.Errorf("%s: must be set with %s", src.cert.fileEnv, src.key.fileEnv)
	case !src.key.set():
		return nil, fmt.Errorf("%s: must be set with %s", src.key.fileEnv, src.cert.fileEnv)
	default:
		certPEM, certName, err := src.cert.read()
		if err != nil {
			return nil, err
		}
		keyPEM, keyName, err := src.key.read()
		if err != nil {
			return nil, err
		}
		// tls.X509KeyPair's errors name formats, never key material.
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", certName, keyName, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// describe names a PEM input in an error: its file, or "the text" for inline PEM.
func describe(p pemSource, name string) string {
	if name == p.dataEnv {
		return "the text"
	}
	return p.file
}

// PayloadCodec is the payload encryption codec from PAYLOAD_KEYS and PAYLOAD_KEY_ID; nil when
// PAYLOAD_KEYS is empty (payloads are stored in plaintext).
func (c Config) PayloadCodec() (*codec.Codec, error) {
	if c.PayloadKeys == "" {
		return nil, nil
	}
	keys, err := codec.ParseKeys(c.PayloadKeys.Reveal())
	if err != nil {
		return nil, fmt.Errorf("PAYLOAD_KEYS: %w", err)
	}
	active := c.PayloadKeyID
	if active == "" {
		if len(keys) > 1 {
			return nil, fmt.Errorf("PAYLOAD_KEY_ID: must name the active key when PAYLOAD_KEYS holds %d keys", len(keys))
		}
		for id := range keys {
			active = id
		}
	}
	cd, err := codec.New(keys, active)
	if err != nil {
		return nil, fmt.Errorf("PAYLOAD_KEY_ID: %w", err)
	}
	return cd, nil
}

// CodecOrigins lists CODEC_CORS_ORIGINS.
func (c Config) CodecOrigins() []string {
	var out []string
	for _, o := range strings.Split(c.CodecCORSOrigins, ",") {
		if o = strings.TrimRight(strings.TrimSpace(o), "/"); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// DefaultCodecOrigins is the Web UI of `make run` (the dev server's UI port).
const DefaultCodecOrigins = "http://127.0.0.1:8233,http://localhost:8233"
