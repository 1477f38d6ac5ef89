package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Demo queues: orders reports failures as RetryMessages, payments by dead-lettering
// (zero-code adoption through x-dead-letter-exchange).
const (
	demoOrders   = "demo.orders"
	demoPayments = "demo.payments"
)

// demoOptions are demo's command line.
type demoOptions struct {
	url, ingress    string
	count           int
	every, duration time.Duration
	// orders and payments are the demo queues' names: demoOrders and demoPayments (tests
	// use their own).
	orders, payments string
}

// parseDemo reads demo's flags; the defaults of the broker and the ingress queue come from
// the service's environment variables.
func parseDemo(args []string, stderr io.Writer) (demoOptions, error) {
	o := demoOptions{orders: demoOrders, payments: demoPayments}
	fs := brokerFlags("demo", stderr, &o.url, &o.ingress)
	fs.IntVar(&o.count, "n", 20, "messages to produce")
	fs.DurationVar(&o.every, "every", 500*time.Millisecond, "time between produced messages")
	fs.DurationVar(&o.duration, "duration", 90*time.Second, "how long to run the consumer")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.ingress == "":
		return o, usagef("demo: -queue is empty")
	case o.count < 0:
		return o, usagef("demo: -n %d is negative", o.count)
	case o.every < 0:
		return o, usagef("demo: -every %s is negative", o.every)
	case o.duration <= 0:
		return o, usagef("demo: -duration %s is not positive", o.duration)
	}
	return o, nil
}

// demo produces messages onto two demo queues and consumes them with a flaky consumer.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) error {
	o, err := parseDemo(args, stderr)
	if err != nil {
		return err
	}
	return runDemo(ctx, o, stdout, logger)
}

// runDemo runs the demo o describes until o.duration has passed or ctx ends.
func runDemo(ctx context.Context, o demoOptions, stdout io.Writer, logger *slog.Logger) error {
	cfg := broker.Config{URL: o.url, ConnectionName: "retry-scheduler-demo"}
	conn, err := broker.Dial(cfg)
	if err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if _, err := ch.QueueDeclare(o.orders, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", o.orders, err)
	}
	if _, err := ch.QueueDeclare(o.payments, true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": o.ingress,
	}); err != nil {
		return fmt.Errorf("declare %s: %w", o.payments, err)
	}
	if err := ch.Qos(8, 0, false); err != nil {
		return fmt.Errorf("set qos: %w", err)
	}
	pub := broker.NewPublisher(cfg, logger)
	defer pub.Close()

	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var stats demoStats
	for role, q := range map[string]string{demoOrders: o.orders, demoPayments: o.payments} {
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %s: %w", q, err)
		}
		go consumeFlaky(ctx, role, q, deliveries, pub, o.ingress, &stats, logger)
	}
	go func() {
		for i := 1; i <= o.count && ctx.Err() == nil; i++ {
			q := o.orders
			if i%3 == 0 {
				q = o.payments
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
			case <-time.After(o.every):
			}
		}
	}()
	fmt.Fprintf(stdout, "demo: producing %d messages onto %s and %s; watch http://127.0.0.1:8233 (Temporal Web UI)\n", o.count, o.orders, o.payments)
	<-ctx.Done()
	fmt.Fprintf(stdout, "demo: consumed %d, succeeded %d, failed transiently %d, failed permanently %d\n",
		stats.consumed.Load(), stats.ok.Load(), stats.transient.Load(), stats.permanent.Load())
	return nil
}

type demoStats struct{ consumed, ok, transient, permanent atomic.Int64 }

// consumeFlaky fails a deterministic share of the deliveries of queue, which plays role
// (demoOrders or demoPayments): see flakyOutcome.
func consumeFlaky(ctx context.Context, role, queue string, deliveries <-chan amqp.Delivery, pub *broker.Publisher, ingress string, st *demoStats, logger *slog.Logger) {
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
			switch flakyOutcome(role, d.MessageId, attempt) {
			case rejected:
				st.transient.Add(1)
				_ = d.Reject(false) // dead-lettered by RabbitMQ to the scheduler
			case failedPermanently:
				st.permanent.Add(1)
				reportFailure(ctx, pub, ingress, d, queue, attempt, "400 invalid order", 400, logger)
				_ = d.Ack(false)
			case failedTransiently:
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

// outcome is what the flaky consumer does with a delivery.
type outcome int

const (
	succeeded         outcome = iota
	rejected                  // nacked without requeue: RabbitMQ dead-letters it to the ingress
	failedTransiently         // reported as a 503
	failedPermanently         // reported as a 400
)

// flakyOutcome is the demo consumer's deterministic decision for the delivery of messageID
// on the queue playing role, after attempt retries: on orders 1 message in 10 (by a hash of its id) fails
// permanently and 4 in 10 fail their first two attempts; on payments every first attempt is
// rejected.
func flakyOutcome(role, messageID string, attempt int) outcome {
	h := fnv.New32a()
	h.Write([]byte(messageID))
	roll := h.Sum32() % 10
	switch {
	case role == demoPayments && attempt == 0:
		return rejected
	case role == demoOrders && roll == 0:
		return failedPermanently
	case role == demoOrders && roll < 5 && attempt < 2:
		return failedTransiently
	}
	return succeeded
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
