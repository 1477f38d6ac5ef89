package deadletter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

func envelopeWithPayload(n int) message.Envelope {
	env := testEnvelope()
	env.OriginalMessage.Payload = bytes.Repeat([]byte{0xfe}, n)
	return env
}

func TestSplitKeepsAnEnvelopeUnderTheLimitInline(t *testing.T) {
	env := envelopeWithPayload(1000)
	parts, err := Split(env, "dlq", Options{MaxBytes: 4000})
	require.NoError(t, err)
	assert.Nil(t, parts.Payload)
	assert.Nil(t, parts.Ref)
	assert.LessOrEqual(t, len(parts.Envelope.Body), 4000)
	var got message.Envelope
	require.NoError(t, json.Unmarshal(parts.Envelope.Body, &got))
	assert.Equal(t, env.OriginalMessage.Payload, got.OriginalMessage.Payload)
	assert.Nil(t, got.PayloadRef)
}

func TestSplitMovesALargePayloadToAMessageOfItsOwn(t *testing.T) {
	env := envelopeWithPayload(10_000) // about 13.4 kB as base64
	parts, err := Split(env, "dlq", Options{MaxBytes: 4000, AppID: "svc"})
	require.NoError(t, err)

	require.NotNil(t, parts.Payload)
	assert.LessOrEqual(t, len(parts.Envelope.Body), 4000, "the envelope stays within the limit")
	sum := sha256.Sum256(env.OriginalMessage.Payload)
	want := &message.PayloadRef{Size: 10_000, SHA256: hex.EncodeToString(sum[:]), Queue: "dlq", MessageID: "dlq-1.payload"}
	assert.Equal(t, want, parts.Ref)

	var got message.Envelope
	require.NoError(t, json.Unmarshal(parts.Envelope.Body, &got))
	assert.Nil(t, got.OriginalMessage.Payload, "the envelope carries no payload bytes")
	assert.Equal(t, want, got.PayloadRef)
	assert.Equal(t, "dlq-1.payload", parts.Envelope.Headers[HeaderPayloadMessageID])
	assert.Equal(t, "dlq-1", parts.Envelope.MessageId)

	p := parts.Payload
	assert.Equal(t, env.OriginalMessage.Payload, p.Body, "raw bytes, not base64")
	assert.Equal(t, "dlq-1.payload", p.MessageId)
	assert.Equal(t, PayloadContentType, p.ContentType)
	assert.Equal(t, amqp.Table{
		message.HeaderDeadReason: "exhausted", message.HeaderOriginalQueue: "orders",
		HeaderPart: PartPayload, HeaderDLQID: "dlq-1", HeaderPayloadSHA256: want.SHA256,
	}, p.Headers)
	assert.Equal(t, uint8(amqp.Persistent), p.DeliveryMode)
	assert.Equal(t, "corr-1", p.CorrelationId)
	assert.Equal(t, "svc", p.AppId)
	assert.Equal(t, parts.Envelope.Timestamp, p.Timestamp)
}

func TestSplitAtTheLimit(t *testing.T) {
	env := envelopeWithPayload(3000)
	inline, err := Publishing(env, Options{})
	require.NoError(t, err)
	n := len(inline.Body)

	parts, err := Split(env, "dlq", Options{MaxBytes: n})
	require.NoError(t, err)
	assert.Nil(t, parts.Payload, "a body of exactly the limit stays inline")

	parts, err = Split(env, "dlq", Options{MaxBytes: n - 1})
	require.NoError(t, err)
	assert.NotNil(t, parts.Payload, "one byte over moves the payload out")
}

func TestSplitDefaultLimitIsUnderSixteenMiB(t *testing.T) {
	assert.Less(t, DefaultMaxBytes, 16<<20)
	assert.Greater(t, DefaultMaxBytes, MinMaxBytes)
	// A 15 MiB payload is over 20 MiB as base64 in JSON: out it goes.
	parts, err := Split(envelopeWithPayload(15<<20), "dlq", Options{})
	require.NoError(t, err)
	require.NotNil(t, parts.Payload)
	assert.Len(t, parts.Payload.Body, 15<<20)
	assert.Less(t, len(parts.Envelope.Body), 16<<10)
}

func TestSplitTooLargeWithoutPayload(t *testing.T) {
	env := envelopeWithPayload(10)
	env.StackTrace = string(bytes.Repeat([]byte("s"), 5000))
	_, err := Split(env, "dlq", Options{MaxBytes: 1000})
	require.ErrorIs(t, err, ErrTooLarge)
	assert.ErrorIs(t, err, ErrUnpublishable)
	assert.True(t, IsRefused(err))
}

func TestPublishSplitPublishesThePayloadFirst(t *testing.T) {
	r := &recorder{}
	ref, err := PublishSplit(context.Background(), r, "dlq", envelopeWithPayload(10_000), Options{MaxBytes: 4000})
	require.NoError(t, err)
	require.NotNil(t, ref)
	require.Len(t, r.got, 2)
	assert.Equal(t, ref.MessageID, r.got[0].msg.MessageId, "payload first")
	assert.Equal(t, "dlq-1", r.got[1].msg.MessageId)
	for _, p := range r.got {
		assert.Equal(t, "", p.exchange)
		assert.Equal(t, "dlq", p.key)
		assert.True(t, p.mandatory)
	}
}

// failAt fails the publish number n (from 1) with err.
type failAt struct {
	recorder
	n, calls int
	fail     error
}

func (f *failAt) Publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	f.calls++
	if f.calls == f.n {
		return f.fail
	}
	return f.recorder.Publish(ctx, exchange, key, mandatory, msg)
}

func TestPublishSplitFailures(t *testing.T) {
	refused := fmt.Errorf("channel closed: %w", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 20000000 is larger than configured max size 16777216"})

	p := &failAt{n: 1, fail: refused}
	ref, err := PublishSplit(context.Background(), p, "dlq", envelopeWithPayload(10_000), Options{MaxBytes: 4000})
	require.Error(t, err)
	assert.Nil(t, ref, "no payload message went")
	assert.Empty(t, p.got, "no envelope after a failed payload")
	assert.True(t, IsRefused(err))

	p = &failAt{n: 2, fail: refused}
	ref, err = PublishSplit(context.Background(), p, "dlq", envelopeWithPayload(10_000), Options{MaxBytes: 4000})
	require.Error(t, err)
	require.NotNil(t, ref, "the payload message went before the envelope failed")
	assert.Len(t, p.got, 1)
}

func TestIsRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", ErrUnpublishable), true},
		{fmt.Errorf("channel closed: %w", &amqp.Error{Code: amqp.PreconditionFailed}), true},
		{&amqp.Error{Code: amqp.ContentTooLarge}, true},
		{fmt.Errorf("publish: %w: 406 PRECONDITION_FAILED", broker.ErrRefused), true},
		{fmt.Errorf("check: %w", broker.ErrUnpublishable), true},
		{fmt.Errorf("channel closed: %w", &amqp.Error{Code: amqp.ConnectionForced}), false},
		{errors.New("dial tcp: connection refused"), false},
		{context.DeadlineExceeded, false},
	} {
		assert.Equal(t, c.want, IsRefused(c.err), "%v", c.err)
	}
}
