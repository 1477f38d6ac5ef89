package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// injectOptions are inject's command line: where to publish, and the RetryMessage.
type injectOptions struct {
	url, ingress string
	msg          message.RetryMessage
}

// parseInject reads inject's flags; the defaults of the broker and the ingress queue come
// from the service's environment variables.
func parseInject(args []string, stderr io.Writer) (injectOptions, error) {
	var o injectOptions
	fs := brokerFlags("inject", stderr, &o.url, &o.ingress)
	m := &o.msg
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
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	m.OriginalPayload = []byte(*payload)
	// Values no RetryMessage can carry: refused here rather than dead-lettered as poison.
	switch {
	case m.MessageID == "":
		return o, usagef("inject: -id is empty")
	case m.OriginalQueue == "":
		return o, usagef("inject: -original-queue is empty")
	case o.ingress == "":
		return o, usagef("inject: -queue is empty")
	case m.RetryCount < 0:
		return o, usagef("inject: -retry-count %d is negative", m.RetryCount)
	case m.MaxRetries < 0:
		return o, usagef("inject: -max-retries %d is negative", m.MaxRetries)
	}
	return o, nil
}

// inject publishes one RetryMessage to the ingress queue, with a publisher confirm.
func inject(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) error {
	o, err := parseInject(args, stderr)
	if err != nil {
		return err
	}
	m := o.msg
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode retry message: %w", err)
	}
	pub := broker.NewPublisher(broker.Config{URL: o.url, ConnectionName: "retry-scheduler-starter"}, logger)
	defer pub.Close()
	if err := pub.Publish(ctx, "", o.ingress, true, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.MessageID, Body: body,
	}); err != nil {
		return fmt.Errorf("publish to %s: %w", o.ingress, err)
	}
	fmt.Fprintf(stdout, "injected %s for queue %s (workflow %s)\n", m.MessageID, m.OriginalQueue, message.WorkflowID(m.OriginalQueue, m.MessageID))
	return nil
}
