package broker

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openFakeChannel opens a confirm-mode channel of p on the fake broker, as a publish would.
func openFakeChannel(t *testing.T, p *Publisher) *confirmChannel {
	t.Helper()
	cc, err := p.openChannel(context.Background())
	require.NoError(t, err)
	return cc
}

// closeFakeChannel has the broker close cc's channel and waits until the client has seen it.
func closeFakeChannel(t *testing.T, b *fakeBroker, cc *confirmChannel, code uint16, text string) {
	t.Helper()
	// Listeners are told in the order they registered: once this one hears, cc.closes has.
	seen := cc.ch.NotifyClose(make(chan *amqp.Error, 1))
	b.conn(0).CloseChannel(b.lastChannel(), code, text)
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not see the channel close within 10s")
	}
}

// A channel the broker closed between the publish taking it and writing to it: the close's
// reason decides, as for a close under a pending confirm, and the channel is not kept.
func TestAPublishOnAChannelTheBrokerJustClosedSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		code    uint16
		text    string
		refused bool
	}{
		{amqp.PreconditionFailed, "PRECONDITION_FAILED - user_id property set to 'x'", true},
		{amqp.NotFound, "NOT_FOUND - no exchange 'billing' in vhost '/'", false},
	} {
		t.Run(tc.text, func(t *testing.T) {
			b := newFakeBroker(t)
			p, _ := newFakePublisher(t, Config{})
			cc := openFakeChannel(t, p)
			closeFakeChannel(t, b, cc, tc.code, tc.text)

			keep, err := p.publishOn(context.Background(), cc, "billing", "k", true, amqp.Publishing{})
			require.Error(t, err)
			assert.False(t, keep)
			assert.Contains(t, err.Error(), tc.text)
			if tc.refused {
				assert.ErrorIs(t, err, ErrRefused)
			} else {
				assert.NotErrorIs(t, err, ErrRefused)
				assert.Contains(t, err.Error(), "channel closed")
			}
			assert.Empty(t, b.publishes())
		})
	}
}

// A publish whose context ended before it was written sent nothing: its channel stays usable.
func TestAPublishCancelledBeforeItIsWrittenKeepsItsChannel(t *testing.T) {
	b := newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{})
	cc := openFakeChannel(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	keep, err := p.publishOn(ctx, cc, "", "orders", true, amqp.Publishing{})
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, keep)
	assert.True(t, cc.usable())
	assert.Empty(t, b.publishes())
}

// A channel without confirm mode could never report the outcome: the publish fails rather
// than pass for confirmed.
func TestAPublishOnAChannelWithoutConfirmsIsAnError(t *testing.T) {
	b := newFakeBroker(t)
	seen := make(chan fakePublish, 1)
	b.onPublish = func(_ *fakeConn, m fakePublish) { seen <- m }
	p, _ := newFakePublisher(t, Config{})
	cs, err := p.connection(context.Background())
	require.NoError(t, err)
	ch, err := cs.conn.Channel()
	require.NoError(t, err)
	cc := &confirmChannel{conn: cs, ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1)), closes: ch.NotifyClose(make(chan *amqp.Error, 1))}

	keep, err := p.publishOn(context.Background(), cc, "", "orders", true, amqp.Publishing{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not in confirm mode")
	assert.False(t, keep)
	select {
	case m := <-seen:
		assert.Zero(t, m.Tag, "it went out, unconfirmed")
	case <-time.After(10 * time.Second):
		t.Fatal("the broker got no publish within 10s")
	}
}

// Only a channel-level 406 or 403 from the broker, with the connection still up, is the
// message's own fault.
func TestRefusedBlamesTheMessageOnlyWhileTheConnectionStands(t *testing.T) {
	newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{})
	cc := openFakeChannel(t, p)

	assert.True(t, refused(cc, &amqp.Error{Code: amqp.PreconditionFailed, Server: true}))
	assert.True(t, refused(cc, &amqp.Error{Code: amqp.AccessRefused, Server: true}))
	assert.False(t, refused(cc, &amqp.Error{Code: amqp.NotFound, Server: true}))
	assert.False(t, refused(cc, &amqp.Error{Code: amqp.PreconditionFailed}), "raised by the client, not the broker")

	require.NoError(t, cc.conn.conn.Close())
	assert.False(t, refused(cc, &amqp.Error{Code: amqp.PreconditionFailed, Server: true}), "the connection is going down with it")
}

func TestAChannelIsClosedOnceTheClientSaysSo(t *testing.T) {
	b := newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{})

	t.Run("closed by the client: no reason", func(t *testing.T) {
		cc := openFakeChannel(t, p)
		assert.Nil(t, cc.closed())
		require.NoError(t, cc.ch.Close())
		assert.Equal(t, amqp.ErrClosed, cc.closed())
		assert.False(t, cc.usable())
	})
	t.Run("closed by the broker: its reason, every time", func(t *testing.T) {
		cc := openFakeChannel(t, p)
		closeFakeChannel(t, b, cc, amqp.PreconditionFailed, "PRECONDITION_FAILED - x")
		for range 2 {
			reason := cc.closed()
			require.NotNil(t, reason)
			assert.Equal(t, amqp.PreconditionFailed, reason.Code)
		}
	})
	t.Run("closed before its listener heard", func(t *testing.T) {
		// amqp091 tells a full listener in the background, so the channel can be closed
		// with nothing on cc.closes yet: after closeReasonWait without a reason, ErrClosed.
		cc := openFakeChannel(t, p)
		cc.closes = make(chan *amqp.Error, 1)
		require.NoError(t, cc.ch.Close())
		assert.Equal(t, amqp.ErrClosed, cc.closed())
	})
}

func TestBlockedErrCarriesTheBrokersReason(t *testing.T) {
	var cs connState
	assert.NoError(t, cs.blockedErr())

	cs.blocked.Store(true)
	assert.ErrorIs(t, cs.blockedErr(), ErrBlocked)
	assert.EqualError(t, cs.blockedErr(), "broker is blocking publishers: ")

	reason := "low on free disk space"
	cs.reason.Store(&reason)
	assert.EqualError(t, cs.blockedErr(), "broker is blocking publishers: low on free disk space")

	cs.blocked.Store(false)
	assert.NoError(t, cs.blockedErr(), "the reason of a lifted block does not count")
}

func TestDrainEmptiesAChannelWithoutBlocking(t *testing.T) {
	c := make(chan int, 3)
	c <- 1
	c <- 2
	drain(c)
	assert.Empty(t, c)
	drain(c) // empty: returns at once

	c <- 3
	close(c)
	drain(c) // closed: returns once emptied
	_, ok := <-c
	assert.False(t, ok)
}

// Close releases a publish waiting for a free channel.
func TestCloseReleasesAPublishWaitingForAChannel(t *testing.T) {
	p := NewPublisher(Config{URL: fakeURL, Channels: 1}, nil)
	<-p.slots // hold the only channel
	errs := make(chan error, 1)
	go func() { errs <- publishTo(p, "orders") }()
	require.NoError(t, p.Close())
	select {
	case err := <-errs:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("the publish still waits after Close")
	}
}

// The library marks a channel closed before it hands the close's reason to NotifyClose: a
// look in between waits for the reason instead of keeping a bare ErrClosed, which would make
// a refused message (406) look like a lost channel.
func TestAChannelClosedButNotYetToldWhyWaitsForTheReason(t *testing.T) {
	newFakeBroker(t)
	p, _ := newFakePublisher(t, Config{})
	cc := openFakeChannel(t, p)
	require.NoError(t, cc.ch.Close())
	told := make(chan *amqp.Error, 1)
	cc.closes = told // the library's notification, not delivered yet
	reason := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - x", Server: true}
	go func() {
		time.Sleep(20 * time.Millisecond) // the gap between marking closed and telling why
		told <- reason
	}()

	assert.Same(t, reason, cc.closed())
	assert.Same(t, reason, cc.closed(), "the reason is kept")
}
