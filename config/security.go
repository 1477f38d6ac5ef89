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

	"retry-scheduler/codec"
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

// securitySettings are the TLS, credential and payload-encryption settings (SECURITY.md).
func (c *Config) securitySettings() []setting {
	return []setting{
		{"RABBITMQ_CA_FILE", "PEM CA bundle that signed the broker's certificate (amqps); empty: the system roots", (*text)(&c.RabbitMQCAFile)},
		{"RABBITMQ_CERT_FILE", "PEM client certificate for amqps (with RABBITMQ_KEY_FILE)", (*text)(&c.RabbitMQCertFile)},
		{"RABBITMQ_KEY_FILE", "PEM private key of the client certificate", (*text)(&c.RabbitMQKeyFile)},
		{"TEMPORAL_TLS", "TLS to Temporal: auto (when a CA, certificate, server name or API key is set), true or false", (*tlsMode)(&c.TemporalTLS)},
		{"TEMPORAL_CA_FILE", "PEM CA bundle that signed Temporal's certificate; empty: the system roots", (*text)(&c.TemporalCAFile)},
		{"TEMPORAL_CERT_FILE", "PEM client certificate for mTLS to Temporal (with TEMPORAL_KEY_FILE)", (*text)(&c.TemporalCertFile)},
		{"TEMPORAL_KEY_FILE", "PEM private key of the Temporal client certificate", (*text)(&c.TemporalKeyFile)},
		{"TEMPORAL_SERVER_NAME", "name to verify Temporal's certificate against; empty: the TEMPORAL_ADDRESS host", (*text)(&c.TemporalServerName)},
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
	if u, err := url.Parse(c.RabbitMQURL); err == nil && u.Scheme == "amqp" && rabbitFiles {
		bad("RABBITMQ_CA_FILE/RABBITMQ_CERT_FILE/RABBITMQ_KEY_FILE: set, but RABBITMQ_URL is amqp://, not amqps://: the connection would not use TLS")
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
			"TEMPORAL_CA_FILE": c.TemporalCAFile, "TEMPORAL_CERT_FILE": c.TemporalCertFile,
			"TEMPORAL_KEY_FILE": c.TemporalKeyFile, "TEMPORAL_SERVER_NAME": c.TemporalServerName,
		} {
			if v != "" {
				bad("%s: set, but TEMPORAL_TLS is false", env)
			}
		}
		if c.TemporalAPIKey != "" && !loopbackAddress(c.TemporalAddress) {
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
	return loadTLS("RABBITMQ", c.RabbitMQCAFile, c.RabbitMQCertFile, c.RabbitMQKeyFile, "")
}

// TemporalTLSEnabled reports whether the Temporal connection uses TLS.
func (c Config) TemporalTLSEnabled() bool {
	switch c.TemporalTLS {
	case TLSOn:
		return true
	case TLSOff:
		return false
	}
	return c.TemporalCAFile != "" || c.TemporalCertFile != "" || c.TemporalKeyFile != "" ||
		c.TemporalServerName != "" || c.TemporalAPIKey != ""
}

// TemporalTLSConfig is the TLS configuration for Temporal, nil when TLS is off.
func (c Config) TemporalTLSConfig() (*tls.Config, error) {
	if !c.TemporalTLSEnabled() {
		return nil, nil
	}
	return loadTLS("TEMPORAL", c.TemporalCAFile, c.TemporalCertFile, c.TemporalKeyFile, c.TemporalServerName)
}

// loadTLS builds a client TLS configuration (TLS 1.2 or later), naming the setting at fault.
func loadTLS(prefix, caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CA_FILE: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CA_FILE: %s holds no PEM certificate", prefix, caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "":
		return nil, fmt.Errorf("%s_CERT_FILE: must be set with %s_KEY_FILE", prefix, prefix)
	case keyFile == "":
		return nil, fmt.Errorf("%s_KEY_FILE: must be set with %s_CERT_FILE", prefix, prefix)
	default:
		// tls.LoadX509KeyPair's errors name files and formats, never key material.
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CERT_FILE/%s_KEY_FILE: %w", prefix, prefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
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
