package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial opens a connection with cfg's dial timeout (covering TCP connect and the TLS and AMQP
// handshakes), heartbeat and connection name. Automatic recovery stays off (see the package doc).
// Errors never contain the password.
func Dial(cfg Config) (*amqp.Connection, error) {
	cfg = cfg.WithDefaults()
	safeURL := RedactURL(cfg.URL)

	// Parse first: url.Parse errors quote the whole URL, password included, so they must not
	// reach a log through amqp.DialConfig.
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			return nil, fmt.Errorf("parse AMQP URL %s: %v", safeURL, urlErr.Err)
		}
		return nil, fmt.Errorf("parse AMQP URL %s: %w", safeURL, err)
	}

	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(cfg.ConnectionName)

	var tlsConfig = cfg.TLS
	if tlsConfig != nil {
		// amqp091 writes ServerName into the config it is given; keep the caller's untouched.
		tlsConfig = tlsConfig.Clone()
	}

	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{
		Heartbeat:       cfg.Heartbeat,
		TLSClientConfig: tlsConfig,
		Properties:      props,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialer.Dial(network, addr)
			if err != nil {
				return nil, err
			}
			// The handshakes have no timeout of their own; amqp091 clears this deadline
			// once the connection is open and the heartbeater takes over.
			if err := c.SetDeadline(time.Now().Add(cfg.DialTimeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			return c, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", safeURL, err)
	}
	return conn, nil
}
