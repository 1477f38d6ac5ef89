//go:build integration

package retryclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/clients/go/retryclient"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// dial connects to the real broker for the test's lifetime.
func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(brokertest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// testQueue declares a queue the test owns and deletes it at the end.
func testQueue(t *testing.T, conn *amqp.Connection, name string) {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(name, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false); _ = ch.Close() })
}

// A report of a consumed delivery arrives on the ingress, confirmed, as the scheduler reads it.
func TestReportReachesTheIngress(t *testing.T) {
	conn := dial(t)
	prefix := devserver.UniqueName("retryclient")
	orders, ingress := prefix+".orders", prefix+".ingress"
	testQueue(t, conn, orders)
	testQueue(t, conn, ingress)

	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ch.PublishWithContext(ctx, "", orders, false, false, amqp.Publishing{
		MessageId: "o-1", CorrelationId: "c-1", ContentType: "text/plain", Type: "order.created", Body: []byte("order 1"),
		Headers: amqp.Table{"x-retry-count": int32(1), "x-retry-key": "o-1:1", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}))
	d := receive(t, ch, orders)

	reports, err := retryclient.New(conn, retryclient.Options{IngressQueue: ingress, Service: "orders-api"})
	require.NoError(t, err)
	defer reports.Close()
	require.NoError(t, reports.Report(ctx, d, orders, &retryclient.HTTPError{Status: 503}))
	require.NoError(t, d.Ack(false))

	got := receive(t, ch, ingress)
	require.Equal(t, "application/json", got.ContentType)
	require.Equal(t, "o-1", got.MessageId)
	require.Equal(t, amqp.Persistent, got.DeliveryMode)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(got.Body, &fields))
	require.Equal(t, map[string]any{
		"message_id": "o-1", "original_payload": "b3JkZXIgMQ==", "original_queue": orders,
		"error_reason": "http status 503", "retry_count": 1.0, "max_retries": 0.0, "next_retry_at_ms": 0.0,
		"original_headers":      map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"original_content_type": "text/plain", "http_status": 503.0, "correlation_id": "c-1", "retry_key": "o-1:1",
		"service": "orders-api", "event_type": "order.created",
	}, fields)
}

// A report the broker cannot route (no ingress queue) is an error, never a silent loss; the
// client goes on once the queue exists.
func TestReportToMissingIngressFails(t *testing.T) {
	conn := dial(t)
	ingress := devserver.UniqueName("retryclient-ingress")
	reports, err := retryclient.New(conn, retryclient.Options{IngressQueue: ingress})
	require.NoError(t, err)
	defer reports.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := amqp.Delivery{MessageId: "m", Body: []byte("x")}
	err = reports.Report(ctx, d, "q", errors.New("boom"))
	require.ErrorContains(t, err, "returned by the broker")

	testQueue(t, conn, ingress)
	require.NoError(t, reports.Report(ctx, d, "q", errors.New("boom")))
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.Equal(t, "m", receive(t, ch, ingress).MessageId)
}

func TestReportNeedsTheQueue(t *testing.T) {
	reports, err := retryclient.New(dial(t), retryclient.Options{})
	require.NoError(t, err)
	defer reports.Close()
	require.ErrorContains(t, reports.Report(context.Background(), amqp.Delivery{}, "", errors.New("x")), "queue")
}

// receive takes the next message from queue, unacknowledged.
func receive(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	tag := devserver.UniqueName("receive")
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	require.NoError(t, err)
	defer func() { _ = ch.Cancel(tag, false) }()
	select {
	case d := <-deliveries:
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing on %s within 10s", queue)
		return amqp.Delivery{}
	}
}
