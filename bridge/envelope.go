package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// serviceName names the bridge in the metadata of the envelopes it writes itself, unless
// Config.ServiceName says otherwise.
const serviceName = "retry-scheduler"

// poisonEnvelope builds the dead-letter envelope for a delivery that can never become a
// report: the raw bytes, what could be parsed, and why. Its dlqId is a hash of the delivery,
// so that a poison message redelivered after a lost ack yields a recognisable duplicate.
func poisonEnvelope(d amqp.Delivery, pe *PoisonError, opts DecodeOptions, now time.Time) message.Envelope {
	now = now.UTC()
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	id := message.MessageIDOrFallback(pe.MessageID, pe.OriginalQueue, body)

	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", pe.Kind, pe.OriginalQueue, id)
	h.Write(body)
	dlqID := pe.Kind + "-" + hex.EncodeToString(h.Sum(nil))[:32]

	var hc message.HeaderConverter
	orig := message.Message{
		MessageID:     id,
		Payload:       body,
		OriginalQueue: pe.OriginalQueue,
		Headers:       hc.Convert(d.Headers, opts.allowHeader),
		Properties: message.Properties{
			ContentType:     d.ContentType,
			ContentEncoding: d.ContentEncoding,
			Type:            d.Type,
			AppID:           d.AppId,
			ReplyTo:         d.ReplyTo,
			Priority:        d.Priority,
			Timestamp:       d.Timestamp,
		},
		CorrelationID: d.CorrelationId,
		// RabbitMQ validated it against the connection's user: a refused producer's poison
		// is found by its RetryProducer search attribute.
		Producer: d.UserId,
	}
	if et, ok := header(d.Headers, message.HeaderEventType); ok {
		orig.EventType, _ = headerString(et)
	}
	if orig.EventType == "" {
		orig.EventType = d.Type
	}
	orig.EventType = message.Truncate(orig.EventType, maxKeywordLen)
	return message.Envelope{
		DLQID:           dlqID,
		MessageID:       id,
		OriginalQueue:   pe.OriginalQueue,
		FailureCategory: string(policy.Unknown),
		DeadReason:      pe.Kind,
		DeadDetail:      pe.Reason,
		RetryAttempts:   []message.Attempt{},
		FirstFailureAt:  now,
		RoutedToDlqAt:   now,
		CorrelationID:   d.CorrelationId,
		OriginalMessage: orig,
		Metadata: message.Metadata{
			DLQTimestamp:          now,
			Service:               serviceName,
			Producer:              d.UserId,
			FirstAttemptTimestamp: now,
			LastAttemptTimestamp:  now,
		},
	}
}

// publishEnvelope publishes the envelope of a poison or oversize delivery to the dead-letter
// queue with a confirm, its payload as a message of its own when the envelope would be over
// DeadLetterMaxBytes (the returned reference says where). It never expires: if its parked
// workflow is refused, the envelope alone stands for the delivery.
func (b *Bridge) publishEnvelope(ctx context.Context, env message.Envelope) (*message.PayloadRef, error) {
	return deadletter.PublishSplit(ctx, b.dlq, b.cfg.DeadLetterQueue, env,
		deadletter.Options{AppID: b.cfg.ServiceName, MaxBytes: b.cfg.DeadLetterMaxBytes})
}
