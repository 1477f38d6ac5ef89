package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckPublishingNamesTheField(t *testing.T) {
	long := strings.Repeat("x", 256)
	fit := strings.Repeat("x", 255)
	ok := amqp.Publishing{ContentType: fit, ContentEncoding: fit, CorrelationId: fit, ReplyTo: fit, Expiration: fit,
		MessageId: fit, Type: fit, UserId: fit, AppId: fit,
		Headers: amqp.Table{fit: "a value may be long: " + long, "n": amqp.Table{fit: []any{amqp.Table{fit: int64(1)}}}}}
	require.NoError(t, CheckPublishing(fit, fit, ok), "255 bytes fit everywhere")

	for _, tt := range []struct {
		field            string
		exchange, key    string
		edit             func(*amqp.Publishing)
		wantInTheMessage string
	}{
		{"exchange", long, "q", nil, "exchange is 256 bytes"},
		{"routing key", "", long, nil, "routing_key is 256 bytes"},
		{"content type", "", "q", func(p *amqp.Publishing) { p.ContentType = long }, "content_type is 256 bytes"},
		{"content encoding", "", "q", func(p *amqp.Publishing) { p.ContentEncoding = long }, "content_encoding"},
		{"correlation id", "", "q", func(p *amqp.Publishing) { p.CorrelationId = strings.Repeat("c", 300) }, "correlation_id is 300 bytes"},
		{"reply to", "", "q", func(p *amqp.Publishing) { p.ReplyTo = long }, "reply_to"},
		{"message id", "", "q", func(p *amqp.Publishing) { p.MessageId = long }, "message_id"},
		{"type", "", "q", func(p *amqp.Publishing) { p.Type = long }, "type is 256"},
		{"app id", "", "q", func(p *amqp.Publishing) { p.AppId = long }, "app_id"},
		{"user id", "", "q", func(p *amqp.Publishing) { p.UserId = long }, "user_id"},
		{"expiration", "", "q", func(p *amqp.Publishing) { p.Expiration = long }, "expiration"},
		{"header name", "", "q", func(p *amqp.Publishing) { p.Headers = amqp.Table{long: "v"} }, "headers: a name of 256 bytes"},
		{"nested header name", "", "q", func(p *amqp.Publishing) {
			p.Headers = amqp.Table{"outer": []any{amqp.Table{long: 1}}}
		}, `headers "outer"[0]: a name of 256 bytes`},
		{"header value type", "", "q", func(p *amqp.Publishing) { p.Headers = amqp.Table{"h": map[string]any{"a": 1}} }, `headers "h": a value of type map[string]interface {}`},
		{"header value type in an array", "", "q", func(p *amqp.Publishing) { p.Headers = amqp.Table{"h": []any{uint64(1)}} }, `headers "h"[0]: a value of type uint64`},
	} {
		t.Run(tt.field, func(t *testing.T) {
			var p amqp.Publishing
			if tt.edit != nil {
				tt.edit(&p)
			}
			err := CheckPublishing(tt.exchange, tt.key, p)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrUnpublishable))
			assert.Contains(t, err.Error(), tt.wantInTheMessage)
		})
	}
}

func TestCheckFrameBoundsTheContentHeader(t *testing.T) {
	p := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Timestamp: time.Now(),
		Headers: amqp.Table{"big": strings.Repeat("v", 1000)}}
	size := contentHeaderOverhead + propertiesSize(p)
	// flags name content type (1+16), headers (4 + 1+3 + 5+1000), delivery mode (1), timestamp (8)
	require.Equal(t, contentHeaderOverhead+17+1013+1+8, size)
	require.NoError(t, checkFrame(p, size), "exactly a frame fits")
	err := checkFrame(p, size-1)
	require.ErrorIs(t, err, ErrUnpublishable)
	assert.Contains(t, err.Error(), "frame")
	require.NoError(t, checkFrame(p, 0), "no negotiated limit")
}

func TestFieldSizeMatchesAMQPEncoding(t *testing.T) {
	// Sizes as amqp091 writes each field type (type octet included).
	for v, want := range map[any]int{
		true: 2, byte(1): 2, int8(1): 2, int16(1): 3, uint16(1): 3, 1: 5, int32(1): 5, uint32(1): 5,
		float32(1): 5, int64(1): 9, float64(1): 9, "abc": 8, amqp.Decimal{Scale: 1, Value: 2}: 6,
	} {
		assert.Equal(t, want, fieldSize(v), "%T", v)
	}
	assert.Equal(t, 1, fieldSize(nil))
	assert.Equal(t, 9, fieldSize(time.Now()))
	assert.Equal(t, 5+3, fieldSize([]byte("abc")))
	assert.Equal(t, 5+2+8, fieldSize([]any{true, "abc"}))
	assert.Equal(t, 1+4+(1+1+2), fieldSize(amqp.Table{"k": true}))
}

// Priority takes one octet when set, like delivery mode.
func TestPropertiesSizeCountsThePriority(t *testing.T) {
	p := amqp.Publishing{ContentType: "text/plain"}
	without := propertiesSize(p)
	p.Priority = 5
	assert.Equal(t, without+1, propertiesSize(p))
}

// A value of a type AMQP cannot encode has no size: checkField refuses it before anything
// is sized.
func TestFieldSizeOfAnUnencodableValueIsZero(t *testing.T) {
	assert.Zero(t, fieldSize(map[string]any{"a": 1}))
	assert.Zero(t, fieldSize(uint64(1)))
}
