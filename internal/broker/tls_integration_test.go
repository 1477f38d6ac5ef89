//go:build integration

package broker_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

// This file is an external test (package broker_test) because it loads the service's settings
// with config, which imports broker.

// AMQP over TLS against a private RabbitMQ node whose certificates the test made itself
// (brokertest.StartTLSNode): the shared broker on 5672 is not touched.
func TestTLS(t *testing.T) {
	node := brokertest.StartTLSNode(t)

	t.Run("publishes and consumes with the CA and a client certificate", func(t *testing.T) {
		cfg := broker.Config{URL: node.URL, TLS: node.TLSConfig(t), ConnectionName: "test.broker.tls"}
		conn, err := broker.Dial(cfg)
		require.NoError(t, err)
		defer conn.Close()
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		require.NoError(t, err)
		deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
		require.NoError(t, err)

		pub := broker.NewPublisher(cfg, nil)
		defer pub.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, pub.Publish(ctx, "", q.Name, true, amqp.Publishing{MessageId: "tls-1", Body: []byte("over TLS")}))
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-ctx.Done():
			t.Fatal("no message within 10s")
		}
		assert.Equal(t, "tls-1", d.MessageId)
		assert.Equal(t, []byte("over TLS"), d.Body)

		// The broker saw a TLS connection with our client certificate.
		out, err := node.Ctl("list_connections", "ssl", "peer_cert_subject", "-q", "--no-table-headers")
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "true")
		assert.Contains(t, string(out), "CN=retry-scheduler-test-client")
	})

	t.Run("the service's settings: RABBITMQ_CA_FILE, RABBITMQ_CERT_FILE, RABBITMQ_KEY_FILE", func(t *testing.T) {
		env := map[string]string{
			"RABBITMQ_URL": node.URL, "RABBITMQ_CA_FILE": node.Files.CA,
			"RABBITMQ_CERT_FILE": node.Files.ClientCert, "RABBITMQ_KEY_FILE": node.Files.ClientKey,
		}
		cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		require.NoError(t, err)
		tc, err := cfg.RabbitMQTLS()
		require.NoError(t, err)
		conn, err := broker.Dial(broker.Config{URL: cfg.RabbitMQURL, TLS: tc})
		require.NoError(t, err)
		_ = conn.Close()
	})

	t.Run("a wrong CA fails with a clear error", func(t *testing.T) {
		other := brokertest.NewCA(t, "not-the-brokers-ca")
		pool := x509.NewCertPool()
		pool.AddCert(other.Cert)
		tc := node.TLSConfig(t)
		tc.RootCAs = pool
		_, err := broker.Dial(broker.Config{URL: node.URL, TLS: tc, DialTimeout: 5 * time.Second})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "certificate signed by unknown authority")
		assert.Contains(t, err.Error(), "localhost:", "the broker named by host:port")
		assert.NotContains(t, err.Error(), "guest:guest")
	})

	t.Run("no client certificate is refused by the broker", func(t *testing.T) {
		tc := node.TLSConfig(t)
		tc.Certificates = nil
		_, err := broker.Dial(broker.Config{URL: node.URL, TLS: tc, DialTimeout: 5 * time.Second})
		require.Error(t, err)
		t.Logf("without a client certificate: %v", err)
	})

	t.Run("plain amqp to the TLS port fails", func(t *testing.T) {
		_, err := broker.Dial(broker.Config{URL: strings.Replace(node.URL, "amqps://", "amqp://", 1), DialTimeout: 3 * time.Second})
		require.Error(t, err)
	})
}
