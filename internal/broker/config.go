// Package broker is the AMQP plumbing shared by the activities, the bridge and the tests:
// dialing with explicit timeouts, a confirm-mode publisher pool and queue declaration.
//
// Automatic connection recovery of amqp091-go is deliberately not used: after it recovers,
// acking a delivery received before the recovery acks a different message, one that may not
// have been handled. Callers reconnect explicitly instead, and never ack a delivery from an
// older connection; the Publisher reconnects on the next Publish after a connection loss.
package broker

import (
	"crypto/tls"
	"net/url"
	"time"
)

// Config says how to reach RabbitMQ. The zero value of every field but URL has a default.
type Config struct {
	URL            string        // amqp:// or amqps://, or a comma-separated list of them: the nodes of one cluster (Dial)
	TLS            *tls.Config   // optional; used with amqps
	ConnectionName string        // shows in the RabbitMQ management UI. Defaults to "retry-scheduler".
	DialTimeout    time.Duration // TCP connect plus TLS and AMQP handshake. Defaults to 10s.
	Heartbeat      time.Duration // Defaults to 10s.
	PublishTimeout time.Duration // deadline for a publisher confirm. Defaults to 10s.
	Channels       int           // publisher channel pool size. Defaults to 16.
	QueueType      string        // QueueTypeClassic or QueueTypeQuorum for queues this service declares. Defaults to classic.
}

// DefaultURL is the broker of a local installation (RabbitMQ's default guest account).
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// UnparseableURL is what RedactURL shows in place of a URL that does not parse.
const UnparseableURL = "(unparseable URL)"

// Queue types of the queues this service declares (Config.QueueType).
const (
	QueueTypeClassic = "classic"
	QueueTypeQuorum  = "quorum"
)

// Defaults applied by WithDefaults.
const (
	DefaultConnectionName = "retry-scheduler"
	DefaultDialTimeout    = 10 * time.Second
	DefaultHeartbeat      = 10 * time.Second
	DefaultPublishTimeout = 10 * time.Second
	DefaultChannels       = 16
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

// RedactURL returns raw with its password replaced by "xxxxx" (net/url's marker), so that a
// URL can appear in logs, errors and the configuration's String. A URL that does not parse is
// hidden whole: guessing where its password ends could leak part of it.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return UnparseableURL
	}
	return u.Redacted()
}
