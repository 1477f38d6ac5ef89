package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Demo queues: orders reports failures as RetryMessages, payments by dead-lettering
// (zero-code adoption through x-dead-letter-exchange).
const (
	demoOrders   = "demo.orders"
	demoPayments = "demo.payments"
)

// demo produces messages onto two demo queues and consumes them with a flaky consumer.
func demo(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	url := fs.String("rabbitmq-url", envOr("RABBITMQ_URL", broker.DefaultURL), "broker URL (env RABBITMQ_URL)")
	ingress := fs.String("queue", envOr("RETRY_QUEUE", bridge.DefaultQueue), "ingress queue (env RETRY_QUEUE)")
	count := fs.Int("n", 20, "messages to produce")
	every := fs.Duration("every", 500*time.Millisecond, "time between produced messages")
	duration := fs.Duration("duration", 90*time.Second, "how long to run the consumer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := broker.Config{URL: *url, ConnectionName: "retry-scheduler-demo"}
	conn, err := broker.Dial(cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if _, err := ch.QueueDeclare(demoOrders, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", demoOrders, err)
	}
	if _, err := ch.QueueDeclare(demoPayments, true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": *ingress,
	}); err != nil {
		return fmt.Errorf("declare %s: %w", demoPayments, err)
	}
	if err := ch.Qos(8, 0, false); err != nil {
		return fmt.Errorf("set qos: %w", err)
	}
	pub := broker.NewPublisher(cfg, logger)
	defer pub.Close()

	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var stats demoStats
	for _, q := range []string{demoOrders, demoPayments} {
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %s: %w", q, err)
		}
		go consumeFlaky(ctx, q, deliveries, pub, *ingress, &stats, logger)
	}
	go func() {
		for i := 1; i <= *count && ctx.Err() == nil; i++ {
			q := demoOrders
			if i%3 == 0 {
				q = demoPayments
			}
			id := fmt.Sprintf("demo-%d-%d", time.Now().Unix(), i)
			body := fmt.Sprintf(`{"order":%d}`, i)
			if err := pub.Publish(ctx, "", q, true, amqp.Publishing{
				MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body),
				Headers: amqp.Table{"x-demo": "yes"},
			}); err != nil {
				logger.Warn("produce", "error", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(*every):
			}
		}
	}()
	fmt.Printf("demo: producing %d messages onto %s and %s; watch http://127.0.0.1:8233 (Temporal Web UI)\n", *count, demoOrders, demoPayments)
	<-ctx.Done()
	fmt.Printf("demo: consumed %d, succeeded %d, failed transiently %d, failed permanently %d\n",
		stats.consumed.Load(), stats.ok.Load(), stats.transient.Load(), stats.permanent.Load())
	return nil
}

type demoStats struct{ consumed, ok, transient, permanent atomic.Int64 }

// consumeFlaky fails a deterministic share of deliveries: on orders 1 in 10 permanently and
// the first two attempts of 4 in 10 transiently; on payments the first attempt of every message.
func consumeFlaky(ctx context.Context, queue string, deliveries <-chan amqp.Delivery, pub *broker.Publisher, ingress string, st *demoStats, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			st.consumed.Add(1)
			n, _ := message.HeaderInt64(d.Headers[message.HeaderRetryCount]) // absent on a first delivery: 0
			attempt := int(n)
			h := fnv.New32a()
			h.Write([]byte(d.MessageId))
			roll := h.Sum32() % 10
			switch {
			case queue == demoPayments && attempt == 0:
				st.transient.Add(1)
				_ = d.Reject(false) // dead-lettered by RabbitMQ to the scheduler
			case queue == demoOrders && roll == 0:
				st.permanent.Add(1)
				reportFailure(ctx, pub, ingress, d, queue, attempt, "400 invalid order", 400, logger)
				_ = d.Ack(false)
			case queue == demoOrders && roll < 5 && attempt < 2:
				st.transient.Add(1)
				reportFailure(ctx, pub, ingress, d, queue, attempt, "503 from inventory", 503, logger)
				_ = d.Ack(false)
			default:
				st.ok.Add(1)
				_ = d.Ack(false)
			}
			logger.Info("demo consumer", "queue", queue, "message_id", d.MessageId, "x_retry_count", attempt)
		}
	}
}

func reportFailure(ctx context.Context, pub *broker.Publisher, ingress string, d amqp.Delivery, queue string, attempt int, reason string, status int, logger *slog.Logger) {
	key, _ := d.Headers[message.HeaderRetryKey].(string)
	body, _ := json.Marshal(message.RetryMessage{
		MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: queue, ErrorReason: reason,
		HTTPStatus: status, RetryCount: attempt, Policy: "aggressive", RetryKey: key, Service: "demo-consumer",
	})
	if err := pub.Publish(ctx, "", ingress, true, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: d.MessageId, Body: body,
	}); err != nil {
		logger.Warn("report failure", "message_id", d.MessageId, "error", err)
	}
}
