//go:build integration

package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/message"
)

func rabbitCfg(t *testing.T) broker.Config {
	return broker.Config{URL: brokertest.URL(), ConnectionName: uniqueName(t, "conn")}
}

var nameSeq atomic.Int64

func uniqueName(t *testing.T, what string) string {
	return fmt.Sprintf("test.activities.%s.%s.%d.%d", strings.ReplaceAll(t.Name(), "/", "."), what,
		time.Now().UnixNano(), nameSeq.Add(1))
}

// tempQueue declares a queue for this test only and returns its deliveries (auto-ack).
func tempQueue(t *testing.T) (string, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := broker.Dial(rabbitCfg(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	name := uniqueName(t, "q")
	// Exclusive: deleted with the test's connection. x-max-priority lets the priority property through.
	_, err = ch.QueueDeclare(name, false, true, true, false, amqp.Table{"x-max-priority": int32(9)})
	require.NoError(t, err)
	d, err := ch.Consume(name, "", true, true, false, false, nil)
	require.NoError(t, err)
	return name, d
}

func realActivities(t *testing.T) *Activities {
	pub := broker.NewPublisher(rabbitCfg(t), nil)
	t.Cleanup(func() { _ = pub.Close() })
	acts, _ := newTestActivities(pub)
	return acts
}

func TestRepublishToRabbitMQ(t *testing.T) {
	q, deliveries := tempQueue(t)
	acts := realActivities(t)
	msg := testMessage()
	msg.OriginalQueue = q
	msg.Headers = map[string]any{
		"tenant": "acme", "attempts-seen": 2, "ratio": 0.5, "nested": map[string]any{"k": "v"},
		"CC": []any{"audit"}, "BCC": []any{"spy"}, "user-id": "root", "x-death": []any{map[string]any{"queue": q}},
		"x-delay": 1000, "x-first-death-queue": q, "x-last-death-reason": "rejected",
	}
	in := RepublishInput{Message: msg, Attempt: 2, Key: "m-1:2", ScheduledAt: testNow.Add(-time.Second)}

	_, get, err := run(t, acts, acts.Republish, in)
	require.NoError(t, err)
	var res RepublishResult
	get(&res)
	assert.True(t, testNow.Equal(res.PublishedAt))

	d := brokertest.Receive(t, deliveries)
	assert.Equal(t, msg.Payload, d.Body)
	assert.Equal(t, "m-1", d.MessageId)
	assert.Equal(t, "corr-1", d.CorrelationId)
	assert.Equal(t, amqp.Persistent, d.DeliveryMode)
	assert.Equal(t, "application/json", d.ContentType)
	assert.Equal(t, "utf-8", d.ContentEncoding)
	assert.Equal(t, "order.created", d.Type)
	assert.Equal(t, "orders-svc", d.AppId)
	assert.Equal(t, "replies", d.ReplyTo)
	assert.Equal(t, uint8(4), d.Priority)
	assert.True(t, msg.Properties.Timestamp.Equal(d.Timestamp))
	assert.Equal(t, amqp.Table{
		"tenant": "acme", "attempts-seen": int64(2), "ratio": 0.5, "nested": amqp.Table{"k": "v"},
		"x-retry-count": int32(2), "x-retry-key": "m-1:2", "x-retry-republished-at": testNow.UnixMilli(),
	}, d.Headers, "allowed headers kept, denied ones dropped, the republish time an AMQP long")
}

func TestRepublishUnroutableOnRabbitMQ(t *testing.T) {
	acts := realActivities(t)
	msg := testMessage()
	msg.OriginalQueue = uniqueName(t, "missing")
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: msg, Attempt: 1, Key: "m-1:1"})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, "Unroutable", appErr.Type())
	assert.Contains(t, appErr.Error(), "NO_ROUTE")
}

func TestDeadLetterToRabbitMQ(t *testing.T) {
	q, deliveries := tempQueue(t)
	acts := realActivities(t)
	env := testEnvelope()
	env.OriginalMessage.Headers = map[string]any{"tenant": "acme"}

	_, _, err := run(t, acts, acts.DeadLetter, DeadLetterInput{Queue: q, Envelope: env})
	require.NoError(t, err)

	d := brokertest.Receive(t, deliveries)
	assert.Equal(t, "application/json", d.ContentType)
	assert.Equal(t, "dlq-1", d.MessageId)
	assert.Equal(t, amqp.Persistent, d.DeliveryMode)
	assert.Equal(t, amqp.Table{"x-dead-reason": "exhausted", "x-original-queue": "orders"}, d.Headers)
	var got message.Envelope
	require.NoError(t, json.Unmarshal(d.Body, &got))
	assert.Equal(t, env.Enriched(), got, "the envelope round-trips, with the fields added at publish")

	// A dead-letter queue that does not exist is a misconfiguration, not worth retrying.
	err = acts.DeadLetter(context.Background(), DeadLetterInput{Queue: uniqueName(t, "missing"), Envelope: env})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, ErrTypeUnroutable, appErr.Type())
}
