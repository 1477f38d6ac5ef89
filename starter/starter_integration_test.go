//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// privateQueues declares the test's own queues on the shared broker (args per queue, nil for
// none) and deletes them when it ends.
func privateQueues(t *testing.T, args map[string]amqp.Table) *amqp.Channel {
	t.Helper()
	conn, err := broker.Dial(broker.Config{URL: brokertest.URL(), ConnectionName: "starter-test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	for q, a := range args {
		_, err := ch.QueueDeclare(q, true, false, false, false, a)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	}
	return ch
}

// get waits for the next message of queue.
func get(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if ok {
			return d
		}
		require.True(t, time.Now().Before(deadline), "nothing on %s within 10s", queue)
		time.Sleep(20 * time.Millisecond)
	}
}

// inject publishes the RetryMessage its flags describe, persistent, as JSON, to the ingress
// queue, and names the workflow it starts.
func TestInjectPublishesTheRetryMessage(t *testing.T) {
	ingress := devserver.UniqueName("starter") + ".retry"
	ch := privateQueues(t, map[string]amqp.Table{ingress: nil})
	code, stdout, stderr := runStarter(t, context.Background(), "inject", "-rabbitmq-url", brokertest.URL(), "-queue", ingress,
		"-id", "order-42", "-original-queue", "orders", "-payload", `{"n":42}`, "-reason", "503 from payments",
		"-http-status", "503", "-retry-count", "1", "-tenant", "acme")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "injected order-42 for queue orders (workflow "+message.WorkflowID("orders", "order-42")+")\n", stdout)

	d := get(t, ch, ingress)
	assert.Equal(t, "application/json", d.ContentType)
	assert.Equal(t, amqp.Persistent, d.DeliveryMode)
	assert.Equal(t, "order-42", d.MessageId)
	var m message.RetryMessage
	require.NoError(t, json.Unmarshal(d.Body, &m))
	assert.Equal(t, message.RetryMessage{
		MessageID: "order-42", OriginalPayload: []byte(`{"n":42}`), OriginalQueue: "orders",
		ErrorReason: "503 from payments", HTTPStatus: 503, RetryCount: 1, TenantID: "acme",
	}, m)
}

// A missing ingress queue fails inject: the publish is mandatory and confirmed.
func TestInjectToAMissingQueueFails(t *testing.T) {
	missing := devserver.UniqueName("starter") + ".missing"
	code, stdout, stderr := runStarter(t, context.Background(), "inject", "-rabbitmq-url", brokertest.URL(), "-queue", missing)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, stderr, "starter: publish to "+missing+":")
	assert.Empty(t, stdout)
}

// The demo produces onto its queues and its consumer reports orders' failures as
// RetryMessages and rejects payments' first deliveries, which RabbitMQ dead-letters to the
// ingress queue.
func TestDemoReportsFailuresToTheIngress(t *testing.T) {
	prefix := devserver.UniqueName("starter")
	o := demoOptions{url: brokertest.URL(), ingress: prefix + ".retry", count: 30, every: 0, duration: 3 * time.Second,
		orders: prefix + ".orders", payments: prefix + ".payments"}
	// The demo declares its own queues; these are declared first so that the test deletes them.
	ch := privateQueues(t, map[string]amqp.Table{o.ingress: nil, o.orders: nil,
		o.payments: {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": o.ingress}})

	var out bytes.Buffer
	require.NoError(t, runDemo(context.Background(), o, &out, quiet()))

	var consumed, ok, transient, permanent int
	_, err := fmt.Sscanf(out.String()[bytes.IndexByte(out.Bytes(), '\n')+1:],
		"demo: consumed %d, succeeded %d, failed transiently %d, failed permanently %d", &consumed, &ok, &transient, &permanent)
	require.NoError(t, err, out.String())
	assert.Equal(t, o.count, consumed, "every message produced was consumed once (no scheduler republishes)")
	assert.Equal(t, consumed, ok+transient+permanent)

	q, err := ch.QueueDeclarePassive(o.ingress, true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, transient+permanent, q.Messages, "one report or dead-lettered delivery per failure")
	var reports, deadLettered int
	for range q.Messages {
		d := get(t, ch, o.ingress)
		if _, ok := d.Headers[message.HeaderDeath]; ok {
			deadLettered++
			continue
		}
		reports++
		var m message.RetryMessage
		require.NoError(t, json.Unmarshal(d.Body, &m))
		assert.Equal(t, o.orders, m.OriginalQueue)
		assert.Equal(t, "demo-consumer", m.Service)
	}
	assert.Equal(t, o.count/3, deadLettered, "every third message goes to payments, whose first attempt is rejected")
	assert.Equal(t, transient+permanent-o.count/3, reports)
}
