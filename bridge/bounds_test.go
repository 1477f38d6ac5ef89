package bridge

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/message"
)

func TestProcessOversizeOverTheDeadLetterLimitSendsThePayloadApart(t *testing.T) {
	pub := &fakePublisher{}
	st := &fakeReporter{}
	s, m := testSession(t, st, pub)
	s.b.cfg.Decode.MaxMessageBytes = 1000
	s.b.cfg.DeadLetterMaxBytes = 8 << 10
	ack := &fakeAck{}
	body := bytes.Repeat([]byte("x"), 100<<10)

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, Headers: xDeath("orders", "", "orders"), MessageId: "big-1", Body: body}})

	assert.Equal(t, OutcomeOversize, r.outcome)
	assert.Equal(t, 1, ack.acks)
	require.Len(t, pub.msgs, 2, "the payload, then the envelope")
	payload, envMsg := pub.msgs[0].msg, pub.msgs[1].msg
	assert.Equal(t, body, payload.Body)
	assert.LessOrEqual(t, len(envMsg.Body), 8<<10)
	var env message.Envelope
	require.NoError(t, json.Unmarshal(envMsg.Body, &env))
	require.NotNil(t, env.PayloadRef)
	assert.Nil(t, env.OriginalMessage.Payload)
	sum := sha256.Sum256(body)
	assert.Equal(t, hex.EncodeToString(sum[:]), env.PayloadRef.SHA256)
	assert.Equal(t, payload.MessageId, env.PayloadRef.MessageID)
	assert.Equal(t, env.DLQID, payload.Headers[deadletter.HeaderDLQID])

	require.Len(t, st.reports, 1)
	p := st.reports[0].Poison
	assert.Equal(t, env.PayloadRef, p.PayloadRef, "the parked message says where the payload is")
	assert.Empty(t, p.EnvelopeError)
	assert.Equal(t, len(body), p.Size)
	assert.Equal(t, 1.0, outcomes(m, OutcomeOversize))
}

func TestProcessRefusedEnvelopeIsParkedNotHeld(t *testing.T) {
	refused := fmt.Errorf("channel closed: %w", &amqp.Error{Code: amqp.PreconditionFailed,
		Reason: "PRECONDITION_FAILED - message size 20000000 is larger than configured max size 16777216"})
	st := &fakeReporter{}
	s, m := testSession(t, st, &fakePublisher{err: refused})
	ack := &fakeAck{}

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, ContentType: "text/plain", Body: []byte("junk")}})

	assert.Equal(t, OutcomePoison, r.outcome, "parked and acked: the bridge goes on consuming")
	assert.Equal(t, 1, ack.acks)
	assert.Equal(t, 0.0, outcomes(m, OutcomePaused))
	require.Len(t, st.reports, 1)
	assert.Contains(t, st.reports[0].Poison.EnvelopeError, "larger than configured max size")
	assert.Equal(t, []byte("junk"), st.reports[0].Message.Payload)
}

func TestProcessEnvelopeOutageStillHolds(t *testing.T) {
	down := fmt.Errorf("channel closed: %w", &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker shutdown"})
	st := &fakeReporter{}
	s, m := testSession(t, st, &fakePublisher{err: down})
	ack := &fakeAck{}

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, ContentType: "text/plain", Body: []byte("junk")}})

	assert.Equal(t, OutcomePaused, r.outcome)
	assert.Equal(t, 0, ack.acks+ack.nacks)
	assert.Empty(t, st.reports)
	assert.Equal(t, 1.0, outcomes(m, OutcomePaused))
}

func TestEffectivePrefetch(t *testing.T) {
	for _, c := range []struct {
		prefetch int
		budget   int64
		max, out int
	}{
		{512, 0, 512 << 10, 512},         // no budget
		{512, 128 << 20, 512 << 10, 256}, // the budget binds
		{100, 128 << 20, 512 << 10, 100}, // the prefetch binds
		{512, 1 << 10, 512 << 10, 1},     // never below one
		{512, 256 << 20, 512 << 10, 512}, // exactly
		{512, 128 << 20, 0, 512},         // no size known
	} {
		assert.Equal(t, c.out, EffectivePrefetch(c.prefetch, c.budget, c.max), "%+v", c)
	}
	c := Config{MemoryBudget: 64 << 20, Decode: DecodeOptions{MaxMessageBytes: 1 << 20}}.withDefaults()
	assert.Equal(t, 64, c.Prefetch)
}
