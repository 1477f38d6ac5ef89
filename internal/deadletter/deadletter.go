// Package deadletter puts dead-letter envelopes on the wire: the one place that turns a
// message.Envelope into its AMQP message and publishes it with a confirm, for the workflow's
// DeadLetter activity and for the bridge's poison and oversize deliveries alike.
package deadletter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// ContentType is the content type of every envelope: its body is the envelope as JSON.
const ContentType = "application/json"

// MaxExpiration is the longest per-message TTL RabbitMQ accepts (2^32-1 ms, about 49.7 days);
// a longer expiration would make every dead-letter publish fail.
const MaxExpiration = (1<<32 - 1) * time.Millisecond

// ErrUnpublishable marks an envelope that no retry can publish: no queue was named, or its
// body does not encode.
var ErrUnpublishable = errors.New("envelope cannot be published")

// Publisher is a confirmed publish: a nil error means the broker has the message; a mandatory
// message no queue took is broker.ErrUnroutable. *broker.Publisher implements it.
type Publisher interface {
	Publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error
}

// Options are what the envelope's writers set differently.
type Options struct {
	// AppID is the AMQP app_id: the scheduler's service name.
	AppID string
	// TTL is the envelope's AMQP expiration, capped at MaxExpiration; zero or less: none. The
	// workflow's envelopes expire with their parked workflow, the dead-letter queue being a
	// notification stream; the bridge's never do, since one may be the only record of its
	// delivery.
	TTL time.Duration
	// Now stamps an envelope without RoutedToDlqAt; nil is time.Now.
	Now func() time.Time
	// MaxBytes is the largest envelope body published (see Split); zero or less:
	// DefaultMaxBytes.
	MaxBytes int
}

// Publish publishes env, persistent and mandatory, to queue on the default exchange, and
// waits for the broker's confirm; an envelope over o.MaxBytes leaves its payload to a message
// of its own (PublishSplit). Errors wrap the publisher's (errors.Is finds
// broker.ErrUnroutable) or ErrUnpublishable.
func Publish(ctx context.Context, p Publisher, queue string, env message.Envelope, o Options) error {
	_, err := PublishSplit(ctx, p, queue, env, o)
	return err
}

// PublishSplit is Publish, and says where the payload went when it left the envelope: the
// PayloadRef of a payload message the broker confirmed (set even when the envelope after it
// failed), nil when the payload stayed inline or was not published.
func PublishSplit(ctx context.Context, p Publisher, queue string, env message.Envelope, o Options) (*message.PayloadRef, error) {
	if queue == "" {
		return nil, fmt.Errorf("dead-letter message %q: no dead-letter queue given: %w", env.MessageID, ErrUnpublishable)
	}
	parts, err := Split(env, queue, o)
	if err != nil {
		return nil, fmt.Errorf("dead-letter message %q: %w", env.MessageID, err)
	}
	var ref *message.PayloadRef
	if parts.Payload != nil {
		// The payload first: an envelope on the queue never points at a payload that is not.
		if err := p.Publish(ctx, "", queue, true, *parts.Payload); err != nil {
			return nil, fmt.Errorf("dead-letter payload of message %q to %q: %w", env.MessageID, queue, err)
		}
		ref = parts.Ref
	}
	if err := p.Publish(ctx, "", queue, true, parts.Envelope); err != nil {
		return ref, fmt.Errorf("dead-letter message %q to %q: %w", env.MessageID, queue, err)
	}
	return ref, nil
}

// Publishing is the AMQP message carrying env: its JSON body (with the fields derived at
// publish time, see message.Envelope.Enriched), the dead reason and the original
// queue as headers so that a consumer can sort without parsing the body, the dlqId as message
// id (a redelivered envelope is recognisable), the correlation id, persistence, and the
// routing time as timestamp.
func Publishing(env message.Envelope, o Options) (amqp.Publishing, error) {
	env = env.Enriched()
	body, err := encode(env)
	if err != nil {
		return amqp.Publishing{}, err
	}
	headers := amqp.Table{message.HeaderDeadReason: env.DeadReason}
	if env.OriginalQueue != "" {
		headers[message.HeaderOriginalQueue] = env.OriginalQueue
	}
	ts := env.RoutedToDlqAt
	if ts.IsZero() {
		ts = now(o)
	}
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   ContentType,
		DeliveryMode:  amqp.Persistent,
		CorrelationId: shortOrNone(env.CorrelationID),
		MessageId:     ShortID(env.DLQID),
		Timestamp:     ts,
		AppId:         o.AppID,
		Expiration:    Expiration(o.TTL),
		Body:          body,
	}, nil
}

// encode is env as JSON. Carried header values are JSON-safe, so a failure is a bug; the
// envelope is then sent without the original headers rather than not at all, since it may
// hold the only copy of the message's bytes.
func encode(env message.Envelope) ([]byte, error) {
	body, err := json.Marshal(env)
	if err == nil {
		return body, nil
	}
	env.OriginalMessage.Headers = nil
	if body, err = json.Marshal(env); err != nil {
		return nil, fmt.Errorf("encode envelope: %w: %w", ErrUnpublishable, err)
	}
	return body, nil
}

// Expiration is the AMQP expiration property for ttl: milliseconds, capped at MaxExpiration;
// "" for none.
func Expiration(ttl time.Duration) string {
	if ttl <= 0 {
		return ""
	}
	return strconv.FormatInt(min(ttl, MaxExpiration).Milliseconds(), 10)
}

func now(o Options) time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// maxShortString is AMQP's limit for the string properties.
const maxShortString = 255

// ShortID is id as an AMQP message id: as it is when it fits, else sha256-<64 hex> of it (a
// dlqId is a workflow ID and a suffix, so it can exceed 255 bytes), the same for the same id.
func ShortID(id string) string {
	if len(id) <= maxShortString {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// shortOrNone is s when it fits an AMQP short string, else none: the envelope's body keeps it,
// and the envelope must go out.
func shortOrNone(s string) string {
	if len(s) > maxShortString {
		return ""
	}
	return s
}
