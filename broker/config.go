// Package broker is the AMQP plumbing shared by the activities, the bridge and the tests:
// dialing with explicit timeouts, a confirm-mode publisher pool and queue declaration.
//
// Automatic connection recovery of amqp091-go is deliberately not used: after it recovers,
// delivery tags from the old connection ack different messages (SPEC §8). Callers reconnect
// explicitly instead; the Publisher does so on the next Publish after a connection loss.
package broker

import (
	"crypto/tls"
	"net/url"
	"strings"
	"time"
)

// Config says how to reach RabbitMQ. The zero value of every field but URL has a default.
type Config struct {
	URL            string        // amqp:// or amqps://
	TLS            *tls.Config   // optional; used with amqps
	ConnectionName string        // shows in the RabbitMQ management UI. Defaults to "retry-scheduler".
	DialTimeout    time.Duration // TCP connect plus TLS and AMQP handshake. Defaults to 10s.
	Heartbeat      time.Duration // Defaults to 10s.
	PublishTimeout time.Duration // deadline for a publisher confirm. Defaults to 10s.
	Channels       int           // publisher channel pool size. Defaults to 16.
	QueueType      string        // "classic" or "quorum" for queues this service declares. Defaults to "classic".
}

// Defaults applied by WithDefaults.
const (
	DefaultConnectionName = "retry-scheduler"
	DefaultDialTimeout    = 10 * time.Second
	DefaultHeartbeat      = 10 * time.Second
	DefaultPublishTimeout = 10 * time.Second
	DefaultChannels       = 16
	QueueTypeClassic      = "classic"
	QueueTypeQuorum       = "quorum"
)

// WithDefaults returns c with every unset (zero or negative) field set to its default.
func (c Config) WithDefaults() Config {
	if c.ConnectionName == "" {
		c.ConnectionName = DefaultConnectionName
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.Channels <= 0 {
		c.Channels = DefaultChannels
	}
	if c.QueueType == "" {
		c.QueueType = QueueTypeClassic
	}
	return c
}

// redacted is what RedactURL puts in place of a password (the same marker as net/url's Redacted).
const redacted = "xxxxx"

// RedactURL returns raw with its password replaced by "xxxxx", so that a URL can appear in logs
// and errors. A URL that does not parse is redacted by hand rather than returned as is, since
// an unparsable URL is exactly the one that ends up in an error message.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	// By hand: scheme://user:password@host... → scheme://user:xxxxx@host...
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		// Not a URL we understand; it may still carry a secret, so show none of it.
		return redacted
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	userinfo, host := rest[:at], rest[at+1:]
	user, _, hasPassword := strings.Cut(userinfo, ":")
	if !hasPassword {
		return raw
	}
	return scheme + "://" + user + ":" + redacted + "@" + host
}
