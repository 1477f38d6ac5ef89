package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

type published struct {
	exchange, key string
	mandatory     bool
	msg           amqp.Publishing
}

// recorder records publishes and fails with err when set.
type recorder struct {
	got []published
	err error
}

func (r *recorder) Publish(_ context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	if r.err != nil {
		return r.err
	}
	r.got = append(r.got, published{exchange, key, mandatory, msg})
	return nil
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testEnvelope() message.Envelope {
	return message.Envelope{
		DLQID: "dlq-1", MessageID: "m-1", OriginalQueue: "orders", FailureCategory: "transient",
		DeadReason: "exhausted", RoutedToDlqAt: t0, CorrelationID: "corr-1",
		RetryAttempts: []message.Attempt{
			{Attempt: 1, Error: "timeout", ErrorType: "TimeoutError", StackTrace: "at a"},
			{Attempt: 2, Error: "boom", ErrorType: "HttpError"},
		},
		OriginalMessage: message.Message{MessageID: "m-1", Payload: []byte{0xff, 0}, OriginalQueue: "orders",
			Headers: map[string]any{"trace": "t"}},
	}
}

func TestPublishSetsEveryProperty(t *testing.T) {
	r := &recorder{}
	require.NoError(t, Publish(context.Background(), r, "manual-review", testEnvelope(),
		Options{AppID: "retry-scheduler", TTL: 720 * time.Hour}))

	require.Len(t, r.got, 1)
	p := r.got[0]
	assert.Equal(t, "", p.exchange, "the default exchange")
	assert.Equal(t, "manual-review", p.key)
	assert.True(t, p.mandatory, "a missing queue must be reported, not dropped")
	m := p.msg
	assert.Equal(t, amqp.Table{"x-dead-reason": "exhausted", "x-original-queue": "orders"}, m.Headers)
	assert.Equal(t, "application/json", m.ContentType)
	assert.Equal(t, amqp.Persistent, m.DeliveryMode)
	assert.Equal(t, "corr-1", m.CorrelationId)
	assert.Equal(t, "dlq-1", m.MessageId)
	assert.True(t, t0.Equal(m.Timestamp))
	assert.Equal(t, "retry-scheduler", m.AppId)
	assert.Equal(t, "2592000000", m.Expiration, "30 days in milliseconds")
	require.NoError(t, m.Headers.Validate())

	var got message.Envelope
	require.NoError(t, json.Unmarshal(m.Body, &got))
	assert.Equal(t, "HttpError", got.ErrorType, "the last attempt's error")
	assert.Empty(t, got.StackTrace, "taken together with its type, not mixed from another attempt")
	assert.Equal(t, []byte{0xff, 0}, got.OriginalMessage.Payload)
	assert.Equal(t, map[string]any{"trace": "t"}, got.OriginalMessage.Headers)
}

func TestPublishingWithoutTTLOrQueueOrTime(t *testing.T) {
	env := testEnvelope()
	env.OriginalQueue, env.RoutedToDlqAt = "", time.Time{}
	later := t0.Add(time.Hour)
	p, err := Publishing(env, Options{Now: func() time.Time { return later }})
	require.NoError(t, err)
	assert.Equal(t, "", p.Expiration, "no TTL, no expiration")
	assert.Equal(t, amqp.Table{"x-dead-reason": "exhausted"}, p.Headers, "no empty x-original-queue")
	assert.True(t, later.Equal(p.Timestamp), "stamped now when the envelope has no routing time")
}

// A header value JSON cannot carry is a bug upstream; the envelope still goes out with the
// message's bytes.
func TestPublishingKeepsTheBytesWhenAHeaderDoesNotEncode(t *testing.T) {
	env := testEnvelope()
	env.OriginalMessage.Headers = map[string]any{"bad": math.NaN()}
	p, err := Publishing(env, Options{})
	require.NoError(t, err)
	var got message.Envelope
	require.NoError(t, json.Unmarshal(p.Body, &got))
	assert.Nil(t, got.OriginalMessage.Headers)
	assert.Equal(t, []byte{0xff, 0}, got.OriginalMessage.Payload)

	env.FirstFailureAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // outside JSON's RFC 3339 years
	_, err = Publishing(env, Options{})
	assert.ErrorIs(t, err, ErrUnpublishable)
}

func TestPublishErrors(t *testing.T) {
	err := Publish(context.Background(), &recorder{}, "", testEnvelope(), Options{})
	assert.ErrorIs(t, err, ErrUnpublishable, "no queue")

	nack := errors.New("nacked")
	err = Publish(context.Background(), &recorder{err: fmt.Errorf("publish: %w", nack)}, "q", testEnvelope(), Options{})
	assert.ErrorIs(t, err, nack, "the publisher's error is wrapped")
	assert.NotErrorIs(t, err, ErrUnpublishable)
	assert.Contains(t, err.Error(), `"m-1"`)
}

func TestExpiration(t *testing.T) {
	assert.Equal(t, "", Expiration(0))
	assert.Equal(t, "", Expiration(-time.Second))
	assert.Equal(t, "1500", Expiration(1500*time.Millisecond))
	assert.Equal(t, "4294967295", Expiration(90*24*time.Hour), "capped at RabbitMQ's limit")
}

// An envelope always goes out: a dlqId over AMQP's 255-byte message id is hashed, a
// correlation id over it is left to the body.
func TestPublishingFitsAMQPShortStrings(t *testing.T) {
	env := testEnvelope()
	env.DLQID = "retry/" + string(make([]byte, 250)) + "#12"
	env.CorrelationID = string(make([]byte, 300))
	pub, err := Publishing(env, Options{})
	require.NoError(t, err)
	assert.Len(t, pub.MessageId, len("sha256-")+64)
	assert.Equal(t, pub.MessageId, ShortID(env.DLQID), "the same envelope, the same id")
	assert.Empty(t, pub.CorrelationId)
	var got message.Envelope
	require.NoError(t, json.Unmarshal(pub.Body, &got))
	assert.Equal(t, env.CorrelationID, got.CorrelationID, "the body keeps it")
	assert.Equal(t, "dlq-1", ShortID("dlq-1"))
}
