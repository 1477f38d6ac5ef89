package broker

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrUnpublishable: the message cannot go on the wire as given (a short string over 255
// bytes, a header value AMQP cannot encode, a content header larger than a frame). Checked
// before anything reaches the client library, which would otherwise fail the frame and close
// the whole connection, failing every other publish on it. Permanent for the message.
var ErrUnpublishable = errors.New("message cannot be published")

// ErrRefused: the broker closed the publish's channel refusing this message (406
// PRECONDITION_FAILED, such as a message over its max_message_size; 403 ACCESS_REFUSED, an
// exchange the user may not write to). Only that channel is lost; permanent for the message.
var ErrRefused = errors.New("broker refused the message")

// MaxShortString is the longest AMQP short string, in bytes.
const MaxShortString = 255

// contentHeaderOverhead is what a content-header frame holds besides the properties: the
// frame's type, channel, size and end octet (8), class, weight, body size and flags (14).
const contentHeaderOverhead = 8 + 14

// CheckPublishing returns nil when a publish of msg to exchange with routing key key encodes
// as AMQP: every short string (exchange, routing key, the string properties, table keys) at
// most MaxShortString bytes and every header value of a type AMQP has. Errors wrap
// ErrUnpublishable and name the field.
func CheckPublishing(exchange, key string, msg amqp.Publishing) error {
	for _, f := range []struct{ name, v string }{
		{"exchange", exchange},
		{"routing_key", key},
		{"content_type", msg.ContentType},
		{"content_encoding", msg.ContentEncoding},
		{"correlation_id", msg.CorrelationId},
		{"reply_to", msg.ReplyTo},
		{"expiration", msg.Expiration},
		{"message_id", msg.MessageId},
		{"type", msg.Type},
		{"user_id", msg.UserId},
		{"app_id", msg.AppId},
	} {
		if err := checkShortString(f.name, f.v); err != nil {
			return err
		}
	}
	if err := checkTable("headers", msg.Headers); err != nil {
		return err
	}
	return nil
}

// checkFrame returns nil when msg's content header fits in a frame of frameMax bytes (0: no
// limit): a larger one the broker answers by closing the connection.
func checkFrame(msg amqp.Publishing, frameMax int) error {
	if frameMax <= 0 {
		return nil
	}
	if n := contentHeaderOverhead + propertiesSize(msg); n > frameMax {
		return fmt.Errorf("%w: properties and headers take %d bytes, over the connection's %d-byte frame", ErrUnpublishable, n, frameMax)
	}
	return nil
}

func checkShortString(field, v string) error {
	if len(v) > MaxShortString {
		return fmt.Errorf("%w: %s is %d bytes, over AMQP's %d-byte short-string limit", ErrUnpublishable, field, len(v), MaxShortString)
	}
	return nil
}

// checkTable checks a field table's keys (short strings) and values, nested ones included.
func checkTable(where string, t amqp.Table) error {
	for k, v := range t {
		if len(k) > MaxShortString {
			return fmt.Errorf("%w: %s: a name of %d bytes (%s), over AMQP's %d-byte short-string limit",
				ErrUnpublishable, where, len(k), quoteName(k), MaxShortString)
		}
		if err := checkField(where+" "+quoteName(k), v); err != nil {
			return err
		}
	}
	return nil
}

func checkField(where string, v any) error {
	switch fv := v.(type) {
	case nil, bool, byte, int8, int, int16, int32, int64, uint16, uint32, float32, float64, string, []byte, amqp.Decimal, time.Time:
		return nil
	case []any:
		for i, e := range fv {
			if err := checkField(fmt.Sprintf("%s[%d]", where, i), e); err != nil {
				return err
			}
		}
		return nil
	case amqp.Table:
		return checkTable(where, fv)
	}
	return fmt.Errorf("%w: %s: a value of type %T, which AMQP cannot encode", ErrUnpublishable, where, v)
}

// quoteName quotes a header name for an error, cut to a readable length.
func quoteName(k string) string {
	if len(k) > 64 {
		return fmt.Sprintf("%q…", k[:64])
	}
	return fmt.Sprintf("%q", k)
}

// propertiesSize is the encoded size of msg's properties, as amqp091 writes them.
func propertiesSize(msg amqp.Publishing) int {
	n := 0
	for _, s := range []string{msg.ContentType, msg.ContentEncoding, msg.CorrelationId, msg.ReplyTo,
		msg.Expiration, msg.MessageId, msg.Type, msg.UserId, msg.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if len(msg.Headers) > 0 {
		n += tableSize(msg.Headers)
	}
	if msg.DeliveryMode > 0 {
		n++
	}
	if msg.Priority > 0 {
		n++
	}
	if !msg.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// tableSize is a field table's encoded size: its 4-byte length and each key and value.
func tableSize(t amqp.Table) int {
	n := 4
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

// fieldSize is a field value's encoded size, its type octet included.
func fieldSize(v any) int {
	switch fv := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case amqp.Decimal:
		return 6
	case int64, float64, time.Time:
		return 9
	case string:
		return 5 + len(fv)
	case []byte:
		return 5 + len(fv)
	case []any:
		n := 5
		for _, e := range fv {
			n += fieldSize(e)
		}
		return n
	case amqp.Table:
		return 1 + tableSize(fv)
	}
	return 0
}
