package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// traffic is the soak's side of the broker: the producer of first failures, the consumer of
// the original queues (which fails a planned share again) and the dead-letter consumer. Its
// connections go straight to RabbitMQ, not through the proxies: it plays the services that
// use the scheduler, not the scheduler.
type traffic struct {
	url      string
	prefix   string // connection names: prefix + role
	ingress  string
	dlq      string
	ledger   *ledger
	log      *slog.Logger
	reporter *broker.Publisher
}

func newTraffic(url, prefix, ingress, dlq string, l *ledger, log *slog.Logger) *traffic {
	return &traffic{
		url: url, prefix: prefix, ingress: ingress, dlq: dlq, ledger: l, log: log,
		reporter: broker.NewPublisher(broker.Config{URL: url, ConnectionName: prefix + "reporter", PublishTimeout: 5 * time.Second}, log.With("component", "reporter")),
	}
}

func (t *traffic) close() { _ = t.reporter.Close() }

// publishReport sends a RetryMessage to the ingress queue and retries until the broker
// confirms it or ctx ends.
func (t *traffic) publishReport(ctx context.Context, pub *broker.Publisher, m message.RetryMessage) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return t.publishRetrying(ctx, pub, m.MessageID, amqp.Publishing{ContentType: "application/json", MessageId: m.MessageID, Body: body, DeliveryMode: amqp.Persistent})
}

// publishRetrying publishes p to the ingress queue until the broker confirms it or ctx ends.
func (t *traffic) publishRetrying(ctx context.Context, pub *broker.Publisher, id string, p amqp.Publishing) error {
	delay := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pub.Publish(pctx, "", t.ingress, true, p)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.log.Debug("report publish failed; retrying", "message_id", id, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// produce publishes every plan's first failure at rate per second (not catching up in a
// burst after a stall), each confirmed, with the bad reports spread evenly among them.
func (t *traffic) produce(ctx context.Context, plans []plan, bad []hostile, rate float64) error {
	pub := broker.NewPublisher(broker.Config{URL: t.url, ConnectionName: t.prefix + "producer", PublishTimeout: 5 * time.Second}, t.log.With("component", "producer"))
	defer pub.Close()
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	sentBad := 0
	for i, p := range plans {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		next = maxTime(next.Add(interval), time.Now())
		m := message.RetryMessage{
			MessageID: p.id, OriginalPayload: p.payload, OriginalQueue: p.queue,
			ErrorReason: "timeout #1", ErrorCode: "ETIMEDOUT", Service: "soak", ServiceVersion: "1",
		}
		if err := t.publishReport(ctx, pub, m); err != nil {
			return fmt.Errorf("publish first failure of %s: %w", p.id, err)
		}
		t.ledger.markPublished(p.id)
		for ; sentBad < len(bad) && sentBad*len(plans) < (i+1)*len(bad); sentBad++ {
			if err := t.publishHostile(ctx, pub, bad[sentBad]); err != nil {
				return fmt.Errorf("publish bad report %s: %w", bad[sentBad].id, err)
			}
			t.ledger.markHostilePublished(bad[sentBad].id)
		}
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// consumeLoop runs sessions on queue until ctx ends, reconnecting after any loss. A
// delivery is only ever acked on the channel it came from (a session ends with its
// connection), so an old delivery tag never acks another message.
func (t *traffic) consumeLoop(ctx context.Context, role, queue string, handle func(ctx context.Context, d amqp.Delivery)) {
	for ctx.Err() == nil {
		err := t.session(ctx, role, queue, handle)
		if ctx.Err() != nil {
			return
		}
		t.log.Debug("consumer session ended; reconnecting", "queue", queue, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (t *traffic) session(ctx context.Context, role, queue string, handle func(ctx context.Context, d amqp.Delivery)) error {
	conn, err := broker.Dial(broker.Config{URL: t.url, ConnectionName: t.prefix + role})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(32, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("delivery channel closed")
			}
			handle(ctx, d)
		}
	}
}

// handleOriginal is the consumer of an original queue: it fails the delivery (reports a new
// RetryMessage with retry_count from x-retry-count and retry_key from x-retry-key, then acks)
// while the plan says so, and accepts it after that. A key it has processed before is a
// duplicate: acked and dropped.
func (t *traffic) handleOriginal(queue string) func(ctx context.Context, d amqp.Delivery) {
	return func(ctx context.Context, d amqp.Delivery) {
		count := -1 // not a republish
		if n, ok := message.HeaderInt64(d.Headers[message.HeaderRetryCount]); ok {
			count = int(n)
		}
		key, _ := d.Headers[message.HeaderRetryKey].(string)
		v, r := t.ledger.arrive(d.MessageId, count, key, d.Body)
		if v == verdictFail {
			m := message.RetryMessage{
				MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: queue,
				ErrorReason: "timeout #" + strconv.Itoa(count+1), ErrorCode: "ETIMEDOUT",
				RetryCount: count, RetryKey: key, Service: "soak", ServiceVersion: "1",
			}
			if err := t.publishReport(ctx, t.reporter, m); err != nil {
				return // shutting down; the delivery goes back to the queue
			}
			t.ledger.reported(r, key)
		}
		_ = d.Ack(false) // a failed ack: the broker redelivers, and the key is a duplicate then
	}
}

// handleDead reads a dead-letter envelope.
func (t *traffic) handleDead(_ context.Context, d amqp.Delivery) {
	var e message.Envelope
	if err := json.Unmarshal(d.Body, &e); err != nil {
		t.ledger.mu.Lock()
		t.ledger.strange = append(t.ledger.strange, "dead letter that is not an envelope: "+err.Error())
		t.ledger.mu.Unlock()
		_ = d.Ack(false)
		return
	}
	dl := deadLetter{DLQID: e.DLQID, TotalRetries: e.TotalRetries, DeadReason: e.DeadReason, At: time.Now()}
	for _, a := range e.RetryAttempts {
		dl.Attempts = append(dl.Attempts, a.Attempt)
	}
	if !t.ledger.hostileDeadLettered(e.MessageID, e.DeadReason, e.DLQID) {
		t.ledger.deadLettered(e.MessageID, dl)
	}
	_ = d.Ack(false)
}

// queueDepth reads the number of ready messages of queues on a short-lived connection.
func queueDepth(url, name string, queues ...string) (map[string]int, error) {
	conn, err := broker.Dial(broker.Config{URL: url, ConnectionName: name, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, q := range queues {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return nil, err
		}
		out[q] = st.Messages
	}
	return out, nil
}

// deleteQueues removes the soak's queues at the end.
func deleteQueues(url, name string, queues ...string) {
	conn, err := broker.Dial(broker.Config{URL: url, ConnectionName: name, DialTimeout: 5 * time.Second})
	if err != nil {
		return
	}
	defer conn.Close()
	for _, q := range queues {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
}

// runConsumers starts the consumers and returns a function that stops them and waits.
func (t *traffic) runConsumers(ctx context.Context, queues []string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, q := range queues {
		wg.Add(1)
		go func() { defer wg.Done(); t.consumeLoop(ctx, "consumer", q, t.handleOriginal(q)) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); t.consumeLoop(ctx, "dead-letters", t.dlq, t.handleDead) }()
	return func() { cancel(); wg.Wait() }
}
