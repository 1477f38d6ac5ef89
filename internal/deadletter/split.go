package deadletter

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// DefaultMaxBytes is the largest envelope body published by default: under RabbitMQ 4's
// default max_message_size of 16 MiB, with room to spare. A broker refuses a larger message
// every time, so a dead letter must never be one.
const DefaultMaxBytes = 16<<20 - 256<<10

// MinMaxBytes is the smallest MaxBytes a deployment may set: an envelope without its payload
// (headers, a bounded stack trace, the attempts) fits in it.
const MinMaxBytes = 256 << 10

// Headers and properties of a payload message, the raw bytes of a payload that left its
// envelope.
const (
	// HeaderDLQID on a payload message is the dlqId of the envelope it belongs to.
	HeaderDLQID = "x-dlq-id"
	// HeaderPart is "payload" on a payload message; envelopes do not carry it.
	HeaderPart = "x-dead-letter-part"
	// PartPayload is HeaderPart's value on a payload message.
	PartPayload = "payload"
	// HeaderPayloadSHA256 is the payload's digest, hex-encoded, on the payload message.
	HeaderPayloadSHA256 = "x-payload-sha256"
	// HeaderPayloadMessageID on an envelope names the message id of its payload message.
	HeaderPayloadMessageID = "x-payload-message-id"
	// PayloadContentType is a payload message's content type: raw bytes, whatever the
	// original's was (the envelope keeps that).
	PayloadContentType = "application/octet-stream"
	// PayloadMessageIDSuffix follows the dlqId in a payload message's message id.
	PayloadMessageIDSuffix = ".payload"
)

// ErrTooLarge marks an envelope over the limit even without its payload.
var ErrTooLarge = fmt.Errorf("envelope too large: %w", ErrUnpublishable)

// Parts are the messages one dead letter is published as: the envelope, and the payload
// message before it when the envelope would be over the limit with the payload inline.
type Parts struct {
	Envelope amqp.Publishing
	// Payload and Ref are set when the payload travels apart.
	Payload *amqp.Publishing
	Ref     *message.PayloadRef
}

// Split decides how env is published to queue: inline when its body is at most o.MaxBytes,
// else with its payload as a message of its own (raw bytes, not base64: it arrived through a
// broker, so it fits) that the envelope names in PayloadRef, by message id, size and sha256.
// An envelope over the limit even without its payload is ErrTooLarge.
func Split(env message.Envelope, queue string, o Options) (Parts, error) {
	limit := o.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	pub, err := Publishing(env, o)
	if err != nil {
		return Parts{}, err
	}
	if len(pub.Body) <= limit {
		return Parts{Envelope: pub}, nil
	}
	payload := env.OriginalMessage.Payload
	if len(payload) == 0 || env.PayloadRef != nil {
		return Parts{}, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrTooLarge, len(pub.Body), limit)
	}
	ref := Ref(env.DLQID, queue, payload)
	env.OriginalMessage.Payload = nil
	env.PayloadRef = ref
	if pub, err = Publishing(env, o); err != nil {
		return Parts{}, err
	}
	if len(pub.Body) > limit {
		return Parts{}, fmt.Errorf("%w: %d bytes without its payload, over the limit of %d", ErrTooLarge, len(pub.Body), limit)
	}
	pub.Headers[HeaderPayloadMessageID] = ref.MessageID
	raw := payloadPublishing(env, ref, pub, payload)
	return Parts{Envelope: pub, Payload: &raw, Ref: ref}, nil
}

// Ref is the reference to payload as the payload message of the envelope dlqID on queue.
func Ref(dlqID, queue string, payload []byte) *message.PayloadRef {
	sum := sha256.Sum256(payload)
	return &message.PayloadRef{
		Size:      len(payload),
		SHA256:    hex.EncodeToString(sum[:]),
		Queue:     queue,
		MessageID: dlqID + PayloadMessageIDSuffix,
	}
}

// payloadPublishing is the payload message of envelope env (published as envPub): the raw
// bytes, with the envelope's sorting headers, persistence, correlation id, timestamp, app id
// and expiration, and the link to it.
func payloadPublishing(env message.Envelope, ref *message.PayloadRef, envPub amqp.Publishing, payload []byte) amqp.Publishing {
	headers := amqp.Table{
		message.HeaderDeadReason: env.DeadReason,
		HeaderPart:               PartPayload,
		HeaderDLQID:              env.DLQID,
		HeaderPayloadSHA256:      ref.SHA256,
	}
	if env.OriginalQueue != "" {
		headers[message.HeaderOriginalQueue] = env.OriginalQueue
	}
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   PayloadContentType,
		DeliveryMode:  amqp.Persistent,
		CorrelationId: envPub.CorrelationId,
		MessageId:     ref.MessageID,
		Timestamp:     envPub.Timestamp,
		AppId:         envPub.AppId,
		Expiration:    envPub.Expiration,
		Body:          payload,
	}
}

// IsRefused reports whether a publish failed because of the message itself, so that
// publishing it again fails again: it cannot be encoded or is too large (ErrUnpublishable),
// or the broker refused its content (PRECONDITION_FAILED, as RabbitMQ answers a message over
// its max_message_size, or CONTENT_TOO_LARGE). A broker that is down, blocks publishers or
// times out is not a refusal: that passes.
func IsRefused(err error) bool {
	if errors.Is(err, ErrUnpublishable) || errors.Is(err, broker.ErrUnpublishable) || errors.Is(err, broker.ErrRefused) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.ContentTooLarge)
}
