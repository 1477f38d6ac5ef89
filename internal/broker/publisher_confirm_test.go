package broker

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeURL is the broker the Publisher tests dial; the fake broker answers whatever the address.
const fakeURL = "amqp://guest:guest@rabbit-1:5672/"

// newFakePublisher is a Publisher dialing b, logging to the returned recorder, closed when
// the test ends (before b goes away).
func newFakePublisher(t *testing.T, cfg Config) (*Publisher, *logRecorder) {
	t.Helper()
	cfg.URL = fakeURL
	rec := newLogRecorder()
	p := NewPublisher(cfg, slog.New(rec))
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return p, rec
}

func publishTo(p *Publisher, key string) error {
	return p.Publish(context.Background(), "", key, true, amqp.Publishing{Body: []byte("body of " + key)})
}

func TestPublishReturnsOnceTheBrokerConfirms(t *testing.T) {
	b := newFakeBroker(t)
	p, rec := newFakePublisher(t, Config{ConnectionName: "test.publisher", Channels: 1})

	require.NoError(t, publishTo(p, "orders"))
	require.NoError(t, publishTo(p, "orders"))

	got := b.publishes()
	require.Len(t, got, 2)
	assert.Equal(t, fakePublish{Channel: got[0].Channel, Tag: 1, Key: "orders", Mandatory: true, Body: []byte("body of orders")}, got[0])
	assert.Equal(t, uint64(2), got[1].Tag, "the second publish reuses the confirm-mode channel")
	assert.Equal(t, 1, b.opens())
	assert.EqualValues(t, 1, p.Connections())
	assert.Equal(t, []string{"rabbit-1:5672"}, b.dials())

	opened := rec.wait(t, "amqp connection opened")
	assert.Equal(t, "test.publisher", attr(opened, "connection_name"))
}

// A mandatory message no queue takes comes back (basic.return) before its ack: ErrUnroutable,
// and the channel, in a clean state, serves the next publish.
func TestAReturnedMessageIsUnroutableAndItsChannelIsKept(t *testing.T) {
	b := newFakeBroker(t)
	b.onPublish = func(fc *fakeConn, m fakePublish) {
		if m.Key == "nowhere" {
			fc.Return(m, 312, "NO_ROUTE")
		}
		fc.Ack(m.Channel, m.Tag)
	}
	p, _ := newFakePublisher(t, Config{Channels: 1})

	err := publishTo(p, "nowhere")
	require.ErrorIs(t, err, ErrUnroutable)
	assert.Contains(t, err.Error(), "312 NO_ROUTE")
	assert.Contains(t, err.Error(), `key "nowhere"`)

	require.NoError(t, publishTo(p, "orders"), "the return does not leak into the next publish")
	assert.Equal(t, 1, b.opens())
}

// A nack is retryable, and the nacked channel is dropped: the next publish goes out on a new one.
func TestANackIsErrNackedAndTheChannelIsReplaced(t *testing.T) {
	b := newFakeBroker(t)
	b.onPublish = func(fc *fakeConn, m fakePublish) {
		if m.Key == "full" {
			fc.Nack(m.Channel, m.Tag)
			return
		}
		fc.Ack(m.Channel, m.Tag)
	}
	p, _ := newFakePublisher(t, Config{Channels: 1})

	require.ErrorIs(t, publishTo(p, "full"), ErrNacked)
	require.NoError(t, publishTo(p, "orders"))
	got := b.publishes()
	require.Len(t, got, 2)
	assert.NotEqual(t, got[0].Channel, got[1].Channel)
	assert.Equal(t, 2, b.opens())
	assert.EqualValues(t, 1, p.Connections(), "a nack costs a channel, not the connection")
}

// A channel the broker closes under a publish nacks it; the close's code says what it was.
func TestAChannelClosedUnderAPublishSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		code       uint16
		want       error // nil: neither ErrUnroutable nor ErrRefused
	}{
		{"a missing exchange is unroutable", "NOT_FOUND - no exchange 'billing' in vhost '/'", amqp.NotFound, ErrUnroutable},
		{"a refused message is the message's own", "PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'guest'", amqp.PreconditionFailed, ErrRefused},
		{"a forbidden exchange is the message's own", "ACCESS_REFUSED - access to exchange 'billing' refused", amqp.AccessRefused, ErrRefused},
		{"any other close is the channel's", "RESOURCE_LOCKED - cannot obtain exclusive access", amqp.ResourceLocked, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			b.onPublish = func(fc *fakeConn, m fakePublish) {
				if m.Key == "bad" {
					fc.CloseChannel(m.Channel, tc.code, tc.text)
					return
				}
				fc.Ack(m.Channel, m.Tag)
			}
			p, _ := newFakePublisher(t, Config{Channels: 1})

			err := publishTo(p, "bad")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.text)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			} else {
				assert.NotErrorIs(t, err, ErrUnroutable)
				assert.NotErrorIs(t, err, ErrRefused)
				assert.Contains(t, err.Error(), "channel closed")
			}

			require.NoError(t, publishTo(p, "orders"), "the next publish opens another channel")
			assert.Equal(t, 2, b.opens())
			assert.EqualValues(t, 1, p.Connections())
		})
	}
}

// Without a confirm in PublishTimeout the outcome is unknown: ErrTimeout, and the channel is
// dropped, so that the late confirm is not taken for the next publish's.
func TestAPublishWithoutAConfirmInTimeIsErrTimeout(t *testing.T) {
	b := newFakeBroker(t)
	b.onPublish = func(fc *fakeConn, m fakePublish) {
		if m.Key != "slow" {
			fc.Ack(m.Channel, m.Tag)
		}
	}
	p, _ := newFakePublisher(t, Config{Channels: 1, PublishTimeout: 200 * time.Millisecond})

	err := publishTo(p, "slow")
	require.ErrorIs(t, err, ErrTimeout)
	assert.Contains(t, err.Error(), "after 200ms")

	require.NoError(t, publishTo(p, "orders"))
	assert.Equal(t, 2, b.opens(), "the channel that timed out is not reused")
}

func TestAPublishWhoseContextEndsBeforeTheConfirmIsErrTimeout(t *testing.T) {
	b := newFakeBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.onPublish = func(*fakeConn, fakePublish) { cancel() } // the caller gives up, no confirm yet
	p, _ := newFakePublisher(t, Config{Channels: 1})

	err := p.Publish(ctx, "", "orders", true, amqp.Publishing{Body: []byte("x")})
	assert.ErrorIs(t, err, ErrTimeout)
	assert.ErrorIs(t, err, context.Canceled)
}

// While the broker blocks the connection (a memory or disk alarm), publishes fail at once with
// its reason, whether their slot holds a channel or would open one; they resume once unblocked.
func TestABlockedBrokerFailsPublishesFast(t *testing.T) {
	b := newFakeBroker(t)
	p, rec := newFakePublisher(t, Config{Channels: 2})
	require.NoError(t, publishTo(p, "orders"))

	b.conn(0).Blocked("low on memory")
	blocked := rec.wait(t, "amqp broker blocked publishers")
	assert.Equal(t, "low on memory", attr(blocked, "reason"))

	for range 2 { // one slot holds the open channel, the other none
		err := publishTo(p, "orders")
		require.ErrorIs(t, err, ErrBlocked)
		assert.Contains(t, err.Error(), "low on memory")
	}
	assert.Len(t, b.publishes(), 1, "nothing was written to the blocked connection")
	assert.Equal(t, 1, b.opens(), "no channel.open on a blocked connection")

	b.conn(0).Unblocked()
	rec.wait(t, "amqp broker unblocked publishers")
	require.NoError(t, publishTo(p, "orders"))
	require.NoError(t, publishTo(p, "orders"))
	assert.EqualValues(t, 1, p.Connections())
}

// After the broker closes the connection, the next publish dials a new one.
func TestALostConnectionIsReplacedOnTheNextPublish(t *testing.T) {
	b := newFakeBroker(t)
	p, rec := newFakePublisher(t, Config{Channels: 1})
	require.NoError(t, publishTo(p, "orders"))

	b.conn(0).CloseConnection(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
	lost := rec.wait(t, "amqp connection lost; reconnecting on next publish")
	assert.Contains(t, attr(lost, "error"), "CONNECTION_FORCED")

	require.NoError(t, publishTo(p, "orders"))
	assert.EqualValues(t, 2, p.Connections())
	got := b.publishes()
	require.Len(t, got, 2)
	assert.Equal(t, 1, got[1].Conn, "the second publish went out on the new connection")
}

// A content header larger than the negotiated frame would make the broker close the whole
// connection: the message is ErrUnpublishable before it is written, and the channel is kept.
func TestAMessageOverTheFrameSizeIsRefusedBeforeTheBrokerSeesIt(t *testing.T) {
	b := newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{Channels: 1})
	require.NoError(t, publishTo(p, "orders"))

	huge := amqp.Publishing{Headers: amqp.Table{"h": strings.Repeat("v", fakeFrameMax)}, Body: []byte("x")}
	require.NoError(t, CheckPublishing("", "orders", huge), "each field fits; only the frame does not")
	err := p.Publish(context.Background(), "", "orders", true, huge)
	require.ErrorIs(t, err, ErrUnpublishable)

	require.NoError(t, publishTo(p, "orders"))
	assert.Len(t, b.publishes(), 2)
	assert.Equal(t, 1, b.opens())
	assert.EqualValues(t, 1, p.Connections())
}

func TestAnUnpublishableMessageDoesNotDial(t *testing.T) {
	b := newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{})
	err := p.Publish(context.Background(), "", "orders", true, amqp.Publishing{CorrelationId: strings.Repeat("c", 300)})
	require.ErrorIs(t, err, ErrUnpublishable)
	assert.Empty(t, b.dials())
	assert.Zero(t, p.Connections())
}

func TestCloseClosesTheConnection(t *testing.T) {
	b := newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{})
	require.NoError(t, publishTo(p, "orders"))

	require.NoError(t, p.Close())
	assert.Equal(t, 1, b.closesByClient())
	require.ErrorIs(t, publishTo(p, "orders"), ErrClosed)
}

// A connection the broker drops instead of confirming the close is reported by Close.
func TestCloseReportsAnUnconfirmedClose(t *testing.T) {
	b := newFakeBroker(t)
	b.onConnClose = func(fc *fakeConn) { _ = fc.c.Close() }
	p := NewPublisher(Config{URL: fakeURL}, nil)
	require.NoError(t, publishTo(p, "orders"))

	err := p.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "close connection")
	assert.Equal(t, err, p.Close(), "a second Close says the same")
}

// Close waits for the Publisher's goroutines, and none starts once it has begun.
func TestCloseWaitsForBackgroundWork(t *testing.T) {
	p := NewPublisher(Config{URL: fakeURL}, nil)
	ran := false
	require.True(t, p.goBackground(func() { ran = true }))
	require.NoError(t, p.Close())
	assert.True(t, ran, "Close returned before the goroutine ended")

	assert.False(t, p.goBackground(func() { t.Error("started after Close") }))
}

func TestNoDialAfterClose(t *testing.T) {
	b := newFakeBroker(t)
	p := NewPublisher(Config{URL: fakeURL}, nil)
	require.NoError(t, p.Close())
	_, err := p.connection(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	assert.Empty(t, b.dials())
}

// A publish waiting for another's dial gives up with its context.
func TestWaitingForTheConnectionEndsWithTheContext(t *testing.T) {
	p := NewPublisher(Config{URL: fakeURL}, nil)
	defer p.Close()
	p.connLock <- struct{}{} // someone else is dialing
	defer func() { <-p.connLock }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.connection(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "wait for connection")
}

// A broker that will not give a channel, or not confirm mode on it, fails the publish with
// its reason, and the next publish tries again on the same connection.
func TestAChannelTheBrokerRefusesFailsThePublish(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"channel.open", "open channel: Exception (403) Reason: \"ACCESS_REFUSED - no more channels\""},
		{"confirm.select", "enable publisher confirms: Exception (406) Reason: \"PRECONDITION_FAILED - cannot switch from tx to confirm mode\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			var refuse atomic.Bool
			refuse.Store(true)
			b.onChannelOpen = func(fc *fakeConn, ch uint16) {
				if refuse.Load() && tc.name == "channel.open" {
					fc.CloseChannel(ch, amqp.AccessRefused, "ACCESS_REFUSED - no more channels")
					return
				}
				fc.ChannelOpenOK(ch)
			}
			b.onConfirmSelect = func(fc *fakeConn, ch uint16) {
				if refuse.Load() && tc.name == "confirm.select" {
					fc.CloseChannel(ch, amqp.PreconditionFailed, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")
					return
				}
				fc.ConfirmOK(ch)
			}
			p, _ := newFakePublisher(t, Config{Channels: 1})

			err := publishTo(p, "orders")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, b.publishes())

			refuse.Store(false)
			require.NoError(t, publishTo(p, "orders"))
			assert.EqualValues(t, 1, p.Connections())
		})
	}
}
