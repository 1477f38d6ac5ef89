package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
)

// The connection carries the configured name (for the management UI) and heartbeat.
func TestDialOpensANamedConnectionWithTheConfiguredHeartbeat(t *testing.T) {
	b := newFakeBroker(t)
	conn, err := Dial(Config{URL: "amqp://svc:pw@rabbit-1/vh", ConnectionName: "test.dial", Heartbeat: 7 * time.Second})
	require.NoError(t, err)
	defer conn.Close()

	assert.Equal(t, []string{"rabbit-1:5672"}, b.dials())
	assert.Equal(t, 7*time.Second, conn.Config.Heartbeat, "the broker left the choice to the client")
	assert.Equal(t, "vh", conn.Config.Vhost)
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Equal(t, "test.dial", b.clientProps["connection_name"])
}

// A broker that is down costs a Dial nothing but the attempt: it opens on the next one.
func TestDialSkipsABrokerThatIsDown(t *testing.T) {
	b := newFakeBroker(t)
	b.down["rabbit-1:5672"] = errors.New("connect: connection refused")
	for range 8 { // in either order
		conn, err := Dial(Config{URL: "amqp://svc:pw@rabbit-1/,amqp://svc:pw@rabbit-2/"})
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		dials := b.dials()
		assert.Equal(t, "rabbit-2:5672", dials[len(dials)-1], "the last dial is the one that opened")
	}
	assert.Contains(t, b.dials(), "rabbit-1:5672", "the broker that is down was tried too")
}

// The handshake deadline is set on the new transport; a transport that cannot take one is
// closed, and the error names the broker.
func TestDialFailsOnATransportThatTakesNoDeadline(t *testing.T) {
	var closed net.Conn
	old := dialNet
	t.Cleanup(func() { dialNet = old })
	dialNet = func(*net.Dialer, string, string) (net.Conn, error) {
		c, other := net.Pipe()
		_ = other.Close()
		_ = c.Close() // a closed pipe refuses SetDeadline
		closed = c
		return c, nil
	}
	_, err := Dial(Config{URL: "amqp://svc:topsecret@rabbit-1/"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dial rabbit-1:5672")
	assert.Contains(t, err.Error(), "closed pipe")
	assert.NotContains(t, err.Error(), "topsecret")
	assert.NotNil(t, closed, "the transport was dialed")
}

// amqp091 writes ServerName into the TLS config it is given: Dial gives it a copy, so the
// caller's config, shared by every dial, keeps verifying each broker by its own host name.
func TestDialLeavesTheCallersTLSConfigAlone(t *testing.T) {
	ca := brokertest.NewCA(t, "fake-broker-ca")
	leaf := ca.Server(t, "rabbit-1")
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	require.NoError(t, err)
	b := newFakeBroker(t)
	b.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	caller := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}

	conn, err := Dial(Config{URL: "amqps://svc:pw@rabbit-1/", TLS: caller})
	require.NoError(t, err)
	defer conn.Close()
	assert.True(t, conn.ConnectionState().HandshakeComplete)
	assert.Equal(t, []string{"rabbit-1:5671"}, b.dials())
	assert.Empty(t, caller.ServerName)
}

// dialOne checks the URL itself before amqp091 sees it: url.Parse errors quote the whole URL.
func TestDialOneHidesThePasswordOfAnUnparsableURL(t *testing.T) {
	b := newFakeBroker(t)
	_, err := dialOne(Config{}, "amqp://svc:topsecret%zz@rabbit-1/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "parse AMQP URL of "+UnparseableURL)
	assert.Contains(t, err.Error(), "invalid URL escape")
	assert.NotContains(t, err.Error(), "topsecret")
	assert.Empty(t, b.dials())
}

// A URL net/url takes but amqp091 does not (a port beyond 32 bits) fails before any dial.
func TestDialRejectsAPortAMQPCannotUse(t *testing.T) {
	b := newFakeBroker(t)
	_, err := Dial(Config{URL: "amqp://svc:topsecret@rabbit-1:99999999999/"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "parse AMQP URL of rabbit-1:99999999999")
	assert.Contains(t, err.Error(), "out of range")
	assert.NotContains(t, err.Error(), "topsecret")
	assert.Empty(t, b.dials())
}
