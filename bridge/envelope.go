package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"retry-scheduler/message"
	"retry-scheduler/policy"
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

	hc := &headerConverter{}
	orig := message.Message{
		MessageID:     id,
		Payload:       body,
		OriginalQueue: pe.OriginalQueue,
		Headers:       hc.amqpHeaders(d.Headers, opts),
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
	}
	if et, ok := header(d.Headers, HeaderEventType); ok {
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
			FirstAttemptTimestamp: now,
			LastAttemptTimestamp:  now,
		},
	}
}

// envelopePublishing is the persistent AMQP message carrying env, with the same headers the
// worker's dead-letter publish sets.
func envelopePublishing(env message.Envelope) (amqp.Publishing, error) {
	body, err := json.Marshal(env)
	if err != nil {
		// Header values are converted to JSON-safe types, so this is a bug; keep the raw bytes
		// rather than lose the message.
		env.OriginalMessage.Headers = nil
		if body, err = json.Marshal(env); err != nil {
			return amqp.Publishing{}, fmt.Errorf("encode envelope: %w", err)
		}
	}
	headers := amqp.Table{"x-dead-reason": env.DeadReason}
	if env.OriginalQueue != "" {
		headers["x-original-queue"] = env.OriginalQueue
	}
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   "application/json",
		DeliveryMode:  amqp.Persistent,
		CorrelationId: env.CorrelationID,
		MessageId:     env.DLQID,
		Timestamp:     env.RoutedToDlqAt,
		AppId:         serviceName,
		Body:          body,
	}, nil
}
