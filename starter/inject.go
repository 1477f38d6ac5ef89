package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// inject publishes one RetryMessage to the ingress queue, with a publisher confirm.
func inject(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	url := fs.String("rabbitmq-url", envOr("RABBITMQ_URL", broker.DefaultURL), "broker URL (env RABBITMQ_URL)")
	ingress := fs.String("queue", envOr("RETRY_QUEUE", bridge.DefaultQueue), "ingress queue (env RETRY_QUEUE)")
	var m message.RetryMessage
	payload := fs.String("payload", `{"hello":"world"}`, "original payload")
	fs.StringVar(&m.MessageID, "id", fmt.Sprintf("manual-%d", time.Now().UnixNano()), "message id")
	fs.StringVar(&m.OriginalQueue, "original-queue", "demo.orders", "queue to republish to")
	fs.StringVar(&m.ErrorReason, "reason", "injected by hand", "error reason")
	fs.StringVar(&m.ErrorCategory, "category", "", "error category (transient, rate-limited, permanent, ...); empty: classify")
	fs.IntVar(&m.HTTPStatus, "http-status", 0, "HTTP status of the failure")
	fs.IntVar(&m.RetryCount, "retry-count", 0, "retries already had")
	fs.IntVar(&m.MaxRetries, "max-retries", 0, "override the policy's max retries (0: policy)")
	fs.StringVar(&m.Policy, "policy", "", "policy name override")
	fs.StringVar(&m.TenantID, "tenant", "", "tenant id")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m.OriginalPayload = []byte(*payload)
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode retry message: %w", err)
	}
	pub := broker.NewPublisher(broker.Config{URL: *url, ConnectionName: "retry-scheduler-starter"}, logger)
	defer pub.Close()
	if err := pub.Publish(ctx, "", *ingress, true, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.MessageID, Body: body,
	}); err != nil {
		return fmt.Errorf("publish to %s: %w", *ingress, err)
	}
	fmt.Printf("injected %s for queue %s (workflow %s)\n", m.MessageID, m.OriginalQueue, message.WorkflowID(m.OriginalQueue, m.MessageID))
	return nil
}
