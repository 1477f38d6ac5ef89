package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial opens a connection to one of cfg's brokers (cfg.URL, a comma-separated list), trying
// them in a random order until one accepts; the error of a failed Dial names every broker
// tried, by host:port. Each attempt has cfg's dial timeout (covering TCP connect and the TLS
// and AMQP handshakes); the connection has cfg's heartbeat and connection name. Automatic
// recovery stays off (see the package doc). Errors never contain a password.
func Dial(cfg Config) (*amqp.Connection, error) {
	cfg = cfg.WithDefaults()
	urls, err := SplitURLs(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse AMQP URL: %w", err)
	}
	var errs []error
	for _, u := range shuffled(urls) {
		conn, err := dialOne(cfg, u)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, fmt.Errorf("no broker of %d accepted: %w", len(urls), errors.Join(errs...))
}

// dialNet opens a dial's transport; a variable so that unit tests can hand amqp091 an in-memory pipe.
var dialNet = (*net.Dialer).Dial

// dialOne opens a connection to the broker at rawURL.
func dialOne(cfg Config, rawURL string) (*amqp.Connection, error) {
	addr := Addr(rawURL)
	// Parse first: url.Parse errors quote the whole URL, password included, so they must not
	// reach a log through amqp.DialConfig.
	if _, err := amqp.ParseURI(rawURL); err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			return nil, fmt.Errorf("parse AMQP URL of %s: %v", addr, urlErr.Err)
		}
		return nil, fmt.Errorf("parse AMQP URL of %s: %w", addr, err)
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(cfg.ConnectionName)

	var tlsConfig = cfg.TLS
	if tlsConfig != nil {
		// amqp091 writes ServerName into the config it is given; keep the caller's untouched.
		tlsConfig = tlsConfig.Clone()
	}

	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	conn, err := amqp.DialConfig(rawURL, amqp.Config{
		Heartbeat:       cfg.Heartbeat,
		TLSClientConfig: tlsConfig,
		Properties:      props,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialNet(dialer, network, addr)
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
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}
