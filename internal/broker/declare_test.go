package broker

import (
	"errors"
	"log/slog"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// declared is what the fake broker was asked to declare: name, and whether passively.
func declared(b *fakeBroker) []string {
	var out []string
	for _, d := range b.declares() {
		if d.Passive {
			out = append(out, d.Queue+" (passive)")
		} else {
			out = append(out, d.Queue)
		}
	}
	return out
}

func TestDeclareDeclaresDurableQueuesInOrderWithTheirArguments(t *testing.T) {
	b := newFakeBroker(t)
	cfg := Config{URL: fakeURL, QueueType: QueueTypeQuorum}
	require.NoError(t, Declare(cfg, nil, Topology(cfg, "retry.scheduled", "retry.dead")...))

	got := b.declares()
	require.Len(t, got, 2)
	assert.Equal(t, fakeDeclare{Channel: got[0].Channel, Queue: "retry.dead", Durable: true,
		Args: map[string]any{"x-queue-type": "quorum"}}, got[0])
	assert.Equal(t, fakeDeclare{Channel: got[0].Channel, Queue: "retry.scheduled", Durable: true, Args: map[string]any{
		"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry.dead",
		"x-delivery-limit": int64(IngressDeliveryLimit), "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
	}}, got[1], "on the same channel")
	assert.Equal(t, 1, b.closesByClient(), "the connection is closed after")
}

func TestDeclareQueuesGivesEachTheConfiguredType(t *testing.T) {
	b := newFakeBroker(t)
	require.NoError(t, DeclareQueues(Config{URL: fakeURL}, nil, "a", "b"))
	assert.Equal(t, []string{"a", "b"}, declared(b))
	for _, d := range b.declares() {
		assert.Equal(t, map[string]any{"x-queue-type": "classic"}, d.Args, d.Queue)
	}
}

// A queue an operator set up with other arguments is used as it is, with a warning; the
// queues after it are declared on a fresh channel (the 406 closed the first).
func TestDeclareAcceptsAnExistingQueueWithOtherArguments(t *testing.T) {
	b := newFakeBroker(t)
	const inequivalent = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'legacy' in vhost '/': received 'quorum' but current is 'classic'"
	b.onDeclare = func(fc *fakeConn, d fakeDeclare) {
		if d.Queue == "legacy" && !d.Passive {
			fc.CloseChannel(d.Channel, amqp.PreconditionFailed, inequivalent)
			return
		}
		fc.DeclareOK(d)
	}
	rec := newLogRecorder()
	require.NoError(t, DeclareQueues(Config{URL: fakeURL, QueueType: QueueTypeQuorum}, slog.New(rec), "legacy", "next"))

	assert.Equal(t, []string{"legacy", "legacy (passive)", "next"}, declared(b))
	got := b.declares()
	assert.NotEqual(t, got[0].Channel, got[1].Channel)
	warning := rec.wait(t, "queue exists with other arguments; using it as it is (a dead-letter route, if wanted, can be set by policy: see the README)")
	assert.Equal(t, "legacy", attr(warning, "queue"))
	assert.Equal(t, inequivalent, attr(warning, "broker_says"))
	assert.Equal(t, "map[x-queue-type:quorum]", attr(warning, "wanted_arguments"))
}

func TestDeclareFails(t *testing.T) {
	for _, tc := range []struct {
		name     string
		queues   []string
		answer   func(fc *fakeConn, d fakeDeclare)
		want     []string
		declared []string
	}{
		{
			name:   "when the broker refuses other than with a 406",
			queues: []string{"q", "never"},
			answer: func(fc *fakeConn, d fakeDeclare) {
				fc.CloseChannel(d.Channel, amqp.AccessRefused, "ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for user 'svc'")
			},
			want:     []string{`declare queue "q"`, "ACCESS_REFUSED"},
			declared: []string{"q"},
		},
		{
			name:   "when a queue that conflicts cannot be seen either",
			queues: []string{"q"},
			answer: func(fc *fakeConn, d fakeDeclare) {
				if d.Passive {
					fc.CloseChannel(d.Channel, amqp.NotFound, "NOT_FOUND - no queue 'q' in vhost '/'")
					return
				}
				fc.CloseChannel(d.Channel, amqp.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'")
			},
			want:     []string{`declare queue "q"`, "PRECONDITION_FAILED", "passive declare", "NOT_FOUND"},
			declared: []string{"q", "q (passive)"},
		},
		{
			name:     "on an empty name, which would make the broker invent one",
			queues:   []string{"a", ""},
			want:     []string{"empty name"},
			declared: []string{"a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			b.onDeclare = tc.answer
			err := DeclareQueues(Config{URL: fakeURL}, nil, tc.queues...)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Equal(t, tc.declared, declared(b))
			assert.Equal(t, 1, b.closesByClient(), "the connection is closed after a failure too")
		})
	}
}

// A connection that reached its channel limit is closed by the broker: Declare says so,
// whether it was the first channel or the fresh one after a 406.
func TestDeclareReportsAChannelItCannotOpen(t *testing.T) {
	const limit = "NOT_ALLOWED - number of channels opened (1) has reached the negotiated channel_max (1)"
	for _, tc := range []struct {
		name     string
		allowed  int // channel.opens that succeed
		declared []string
	}{
		{"the first", 0, nil},
		{"the one after a 406", 1, []string{"q"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			opened := 0
			b.onChannelOpen = func(fc *fakeConn, ch uint16) { // on the reader goroutine only
				if opened == tc.allowed {
					fc.CloseConnection(amqp.NotAllowed, limit)
					return
				}
				opened++
				fc.ChannelOpenOK(ch)
			}
			b.onDeclare = func(fc *fakeConn, d fakeDeclare) {
				fc.CloseChannel(d.Channel, amqp.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'")
			}
			err := DeclareQueues(Config{URL: fakeURL}, nil, "q")
			require.Error(t, err)
			assert.Contains(t, err.Error(), `declare queue "q": open channel`)
			assert.Contains(t, err.Error(), limit)
			assert.Equal(t, tc.declared, declared(b))
		})
	}
}

func TestDeclareReportsAFailedDial(t *testing.T) {
	b := newFakeBroker(t)
	b.down["rabbit-1:5672"] = errors.New("connection refused")
	err := DeclareQueues(Config{URL: fakeURL}, nil, "q")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "declare queues: dial rabbit-1:5672")
	assert.Contains(t, err.Error(), "connection refused")
	assert.NotContains(t, err.Error(), "guest:guest")
}
