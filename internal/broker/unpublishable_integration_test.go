//go:build integration

package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
)

// goodPublishes publishes n messages to q concurrently with the test's own publish, and returns
// a wait for their errors.
func goodPublishes(p *Publisher, q string, n int) func() []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs[i] = p.Publish(ctx, "", q, true, amqp.Publishing{MessageId: fmt.Sprintf("good-%d", i), Body: []byte("ok")})
		})
	}
	return func() []error { wg.Wait(); return errs }
}

// A message whose own content cannot be encoded fails at once and permanently, while the
// publishes beside it on the same publisher go out and its connection stays up.
func TestUnpublishableMessageLeavesTheConnectionUp(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	p := newTestPublisher(t, Config{Channels: 4})
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, "", q, true, amqp.Publishing{Body: []byte("warm-up")}))
	require.EqualValues(t, 1, p.Connections())

	for name, bad := range map[string]amqp.Publishing{
		"correlation id": {CorrelationId: strings.Repeat("c", 300), Body: []byte("x")},
		"content type":   {ContentType: strings.Repeat("t", 256), Body: []byte("x")},
		"header name":    {Headers: amqp.Table{strings.Repeat("h", 300): "v"}, Body: []byte("x")},
		"nested name":    {Headers: amqp.Table{"h": amqp.Table{strings.Repeat("n", 300): 1}}, Body: []byte("x")},
		// A content header over the negotiated frame (131072 bytes): the broker would close
		// the connection.
		"huge headers": {Headers: amqp.Table{"h": strings.Repeat("v", 200_000)}, Body: []byte("x")},
	} {
		t.Run(name, func(t *testing.T) {
			wait := goodPublishes(p, q, 8)
			err := p.Publish(ctx, "", q, true, bad)
			require.ErrorIs(t, err, ErrUnpublishable)
			for i, err := range wait() {
				assert.NoError(t, err, "good publish %d", i)
			}
			assert.EqualValues(t, 1, p.Connections(), "one connection all along")
		})
	}
}

// A message the broker refuses by closing its channel (406: user_id is not the connection's
// user) is ErrRefused; only that channel is lost, the connection and the other publishes stay.
func TestRefusedMessageClosesOnlyItsChannel(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	p := newTestPublisher(t, Config{Channels: 4})
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, "", q, true, amqp.Publishing{Body: []byte("warm-up")}))

	for range 3 { // each refusal costs a channel, never the connection
		wait := goodPublishes(p, q, 8)
		err := p.Publish(ctx, "", q, true, amqp.Publishing{UserId: "not-the-connection-user", Body: []byte("x")})
		require.ErrorIs(t, err, ErrRefused)
		assert.Contains(t, err.Error(), "406")
		for i, err := range wait() {
			assert.NoError(t, err, "good publish %d", i)
		}
	}
	require.NoError(t, p.Publish(ctx, "", q, true, amqp.Publishing{Body: []byte("after")}))
	assert.EqualValues(t, 1, p.Connections(), "one connection all along")
}

// FuzzCheckPublishing: whatever the message's strings and headers, either the check refuses
// it, or a real broker takes it on the publisher's one connection.
func FuzzCheckPublishing(f *testing.F) {
	f.Add("corr", "m-1", "application/json", "order.created", "x-trace", "v", "k")
	f.Add(strings.Repeat("c", 255), strings.Repeat("m", 255), "", "", strings.Repeat("h", 255), "", strings.Repeat("k", 255))
	f.Add(strings.Repeat("c", 256), "m", "t", "y", "h", "v", "k")
	f.Add("c", "m", "t", "y", strings.Repeat("h", 300), "v", "k")
	f.Add("c", "m", "t", "y", "h", "v", strings.Repeat("k", 256))
	f.Add("\x00\xff", "\xc3\x28", "a\x00b", "\n", "\xff", "\x00", "\xfe")

	conn, err := Dial(Config{URL: brokertest.URL(), ConnectionName: "test.broker.fuzz.observer"})
	require.NoError(f, err)
	f.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(f, err)
	q := fmt.Sprintf("test.broker.fuzz.%d", time.Now().UnixNano())
	_, err = ch.QueueDeclare(q, false, true, false, false, amqp.Table{"x-expires": int32(10 * 60 * 1000)})
	require.NoError(f, err)
	f.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	d, err := ch.Consume(q, "", true, false, false, false, nil)
	require.NoError(f, err)
	go func() {
		for range d { // keep the queue empty
		}
	}()
	p := NewPublisher(Config{URL: brokertest.URL(), ConnectionName: "test.broker.fuzz.publisher"}, slog.New(slog.DiscardHandler))
	f.Cleanup(func() { _ = p.Close() })

	f.Fuzz(func(t *testing.T, corr, id, ctype, typ, hname, hval, nested string) {
		msg := amqp.Publishing{CorrelationId: corr, MessageId: id, ContentType: ctype, Type: typ,
			Headers: amqp.Table{hname: hval, "nested": amqp.Table{nested: []any{hval, int64(len(hval))}}}, Body: []byte(hval)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		before := p.Connections()
		err := p.Publish(ctx, "", q, true, msg)
		if CheckPublishing("", q, msg) != nil {
			require.ErrorIs(t, err, ErrUnpublishable)
		} else {
			require.NoError(t, err)
		}
		if before > 0 && !errors.Is(err, ErrUnpublishable) {
			require.Equal(t, before, p.Connections(), "the connection was kept")
		}
	})
}
