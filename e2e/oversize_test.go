//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// TestFifteenMiBMessageIsParkedWithItsPayload: a 15 MiB delivery (over the service's default
// MAX_MESSAGE_BYTES, so oversize) with the dead-letter limit a 16 MiB broker takes. Its
// envelope would be over 20 MiB with the bytes in base64: the payload goes to the dead-letter
// queue as a message of its own, raw, and the envelope (within the limit) names it by message
// id, size and digest; the parked message says where it is; and the bridge goes on consuming.
func TestFifteenMiBMessageIsParkedWithItsPayload(t *testing.T) {
	s := newStack(t)
	s.cfg.MaxMessageBytes = bridge.DefaultMaxMessageBytes
	s.cfg.DeadLetterMaxBytes = deadletter.DefaultMaxBytes
	s.run("all")
	dlq := s.consume(s.dlq, nil)
	q := s.queue(s.prefix+".after-big", nil)
	dst := s.consume(q, nil)

	big := make([]byte, 15<<20)
	_, err := rand.Read(big)
	require.NoError(t, err)
	sum := sha256.Sum256(big)
	digest := hex.EncodeToString(sum[:])
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/octet-stream", MessageId: "big-15m", Body: big})
	// A normal failure after it: the bridge must not be stuck on the big one.
	s.publishRetry(message.RetryMessage{MessageID: "after-1", OriginalPayload: []byte("fine"), OriginalQueue: q,
		ErrorReason: "503", HTTPStatus: 503})

	var env message.Envelope
	var payload amqp.Delivery
	var envSize int
	for range 2 {
		d := dlq.next(t, patience)
		if d.Headers[deadletter.HeaderPart] == deadletter.PartPayload {
			payload = d
			continue
		}
		envSize = len(d.Body)
		env = envelopeOf(t, d)
	}
	require.NotNil(t, payload.Body, "the payload message is on the dead-letter queue")
	require.NotEmpty(t, env.DLQID, "the envelope is on the dead-letter queue")
	assert.LessOrEqual(t, envSize, deadletter.DefaultMaxBytes)
	assert.Less(t, envSize, 64<<10, "the envelope carries no payload bytes")
	assert.Equal(t, "oversize", env.DeadReason)
	assert.Nil(t, env.OriginalMessage.Payload)
	require.NotNil(t, env.PayloadRef)
	assert.Equal(t, message.PayloadRef{Size: 15 << 20, SHA256: digest, Queue: s.dlq, MessageID: payload.MessageId}, *env.PayloadRef)

	got := sha256.Sum256(payload.Body)
	assert.Equal(t, digest, hex.EncodeToString(got[:]), "the payload's digest matches")
	assert.Equal(t, env.DLQID, payload.Headers[deadletter.HeaderDLQID])
	assert.Equal(t, digest, payload.Headers[deadletter.HeaderPayloadSHA256])

	// Parked, saying where its payload is.
	var st workflows.State
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		v, err := s.tc.QueryWorkflow(ctx, env.WorkflowID, "", workflows.QueryState)
		return err == nil && v.Get(&st) == nil && st.Status == workflows.StatusDead
	}, patience, 100*time.Millisecond, "the oversize message is not parked as %s", env.WorkflowID)
	require.NotNil(t, st.Poison)
	assert.Equal(t, message.PoisonKindOversize, st.Poison.Kind)
	assert.Equal(t, env.PayloadRef, st.Poison.PayloadRef)
	assert.Empty(t, st.Poison.EnvelopeError)
	assert.Equal(t, 15<<20, st.Poison.Size)
	assert.LessOrEqual(t, len(st.Message.Payload), message.MaxPoisonPayloadBytes)

	// And the bridge went on: the message after it was republished.
	d := dst.next(t, patience)
	assert.Equal(t, "after-1", d.MessageId)
}
