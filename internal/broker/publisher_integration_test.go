//go:build integration

package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	cfg.URL = brokertest.URL()
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = uniqueName(t, "publisher")
	}
	p := NewPublisher(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	t.Cleanup(func() { _ = p.Close() })
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

func TestPublishArrivesIntact(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	deliveries := consume(t, conn, q)
	p := newTestPublisher(t, Config{})

	body := []byte{0x00, 0xff, 'h', 'i', 0x80, '\n'}
	ts := time.Unix(1_700_000_000, 0)
	sent := amqp.Publishing{
		Headers:         amqp.Table{"x-retry-count": int32(2), "tenant": "acme", "n": int64(1 << 40), "nested": amqp.Table{"a": true}},
		ContentType:     "application/octet-stream",
		ContentEncoding: "gzip",
		DeliveryMode:    amqp.Persistent,
		Priority:        3,
		CorrelationId:   "corr-1",
		ReplyTo:         "replies",
		MessageId:       "m-1",
		Timestamp:       ts,
		Type:            "order.created",
		AppId:           "orders",
		Body:            body,
	}
	require.NoError(t, p.Publish(context.Background(), "", q, true, sent))

	got := brokertest.Receive(t, deliveries)
	assert.Equal(t, body, got.Body)
	assert.Equal(t, sent.Headers, got.Headers)
	assert.Equal(t, sent.ContentType, got.ContentType)
	assert.Equal(t, sent.ContentEncoding, got.ContentEncoding)
	assert.Equal(t, sent.DeliveryMode, got.DeliveryMode)
	assert.Equal(t, sent.Priority, got.Priority)
	assert.Equal(t, sent.CorrelationId, got.CorrelationId)
	assert.Equal(t, sent.ReplyTo, got.ReplyTo)
	assert.Equal(t, sent.MessageId, got.MessageId)
	assert.True(t, ts.Equal(got.Timestamp), "timestamp %v", got.Timestamp)
	assert.Equal(t, sent.Type, got.Type)
	assert.Equal(t, sent.AppId, got.AppId)
}

func TestPublishUnroutable(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	deliveries := consume(t, conn, q)
	p := newTestPublisher(t, Config{Channels: 1}) // one channel: later publishes reuse it

	missing := uniqueName(t, "missing")
	err := p.Publish(context.Background(), "", missing, true, amqp.Publishing{Body: []byte("lost")})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrUnroutable), "%v", err)
	assert.Contains(t, err.Error(), "NO_ROUTE")
	assert.Contains(t, err.Error(), missing)

	// A missing exchange closes the channel (404); still permanent, still ErrUnroutable.
	err = p.Publish(context.Background(), uniqueName(t, "no-exchange"), "k", true, amqp.Publishing{Body: []byte("lost")})
	assert.True(t, errors.Is(err, ErrUnroutable), "%v", err)
	assert.Contains(t, err.Error(), "NOT_FOUND")

	// The return and the closed channel do not leak into the next publishes.
	for i := range 3 {
		require.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: fmt.Appendf(nil, "%d", i)}))
		assert.Equal(t, fmt.Sprint(i), string(brokertest.Receive(t, deliveries).Body))
	}

	// Without mandatory the broker drops it silently: that is the caller's choice.
	require.NoError(t, p.Publish(context.Background(), "", missing, false, amqp.Publishing{Body: []byte("dropped")}))
}

// A queue that rejects publishes when full makes the broker nack: ErrNacked, and the next
// publish goes through (on a new channel: a nacked one is dropped).
func TestPublishNacked(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	p := newTestPublisher(t, Config{Channels: 1})

	require.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("1")}))
	err := p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("2")})
	assert.True(t, errors.Is(err, ErrNacked), "%v", err)

	deliveries := consume(t, conn, q)
	assert.Equal(t, "1", string(brokertest.Receive(t, deliveries).Body))
	require.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("3")}))
	assert.Equal(t, "3", string(brokertest.Receive(t, deliveries).Body))
}

func TestConcurrentPublishes(t *testing.T) {
	const n = 200
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	deliveries := consume(t, conn, q)
	p := newTestPublisher(t, Config{Channels: 8}) // fewer channels than publishers: they queue

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- p.Publish(context.Background(), "", q, true, amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	seen := map[string]bool{}
	for range n {
		seen[brokertest.Receive(t, deliveries).MessageId] = true
	}
	assert.Len(t, seen, n, "every message arrives once")
}

// After the broker closes the connection, the next publish dials again. Publishes in flight
// at the close return (an error or a confirm) rather than hang, and every confirmed message
// arrives.
func TestReconnectAfterConnectionClosed(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	deliveries := consume(t, conn, q)
	name := uniqueName(t, "publisher")
	p := newTestPublisher(t, Config{ConnectionName: name, Channels: 4})

	require.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("before")}))
	brokertest.Receive(t, deliveries)

	p.connLock <- struct{}{}
	old := p.conn
	<-p.connLock
	lost := old.conn.NotifyClose(make(chan *amqp.Error, 1))

	// Publishers keep going through the close.
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		confirmed = map[string]bool{}
		failed    int
	)
	stop := make(chan struct{})
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%d-%d", w, i)
				err := p.Publish(context.Background(), "", q, true, amqp.Publishing{MessageId: id, Body: []byte("during")})
				mu.Lock()
				if err == nil {
					confirmed[id] = true
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}

	closeConnectionByName(t, name)
	select {
	case e := <-lost:
		require.NotNil(t, e)
		// 320 when the broker's close frame is read first; 501 when a concurrent publish
		// hits the reset socket first. Either way the connection is gone.
		assert.Contains(t, []int{amqp.ConnectionForced, amqp.FrameError}, e.Code)
	case <-time.After(30 * time.Second):
		t.Fatal("connection close not observed")
	}
	close(stop)
	wg.Wait()
	t.Logf("during the close: %d confirmed, %d failed", len(confirmed), failed)

	// The close is observed, so the very next publish redials.
	require.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{MessageId: "after", Body: []byte("after")}))
	p.connLock <- struct{}{}
	assert.NotSame(t, old, p.conn, "a new connection")
	<-p.connLock

	// Every confirmed message arrives; a failed one may or may not have (its outcome is unknown).
	for {
		m := brokertest.Receive(t, deliveries)
		if m.MessageId == "after" {
			break
		}
		delete(confirmed, m.MessageId)
	}
	assert.Empty(t, confirmed, "confirmed but never delivered")
}

// A confirm that misses the deadline is ErrTimeout and costs the channel: its late confirm
// must not be taken for the next publish's. The pool then serves publishes as before.
func TestPublishTimeout(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	deliveries := consume(t, conn, q)
	// A confirm rarely comes back within a nanosecond; when one does, it counts.
	p := newTestPublisher(t, Config{Channels: 1, PublishTimeout: time.Nanosecond})

	var channels []*amqp.Channel
	timeouts := 0
	for i := 0; timeouts < 5; i++ {
		require.Less(t, i, 100, "no timeouts")
		err := p.Publish(context.Background(), "", q, true, amqp.Publishing{MessageId: fmt.Sprint(i)})
		cc := <-p.slots
		if err == nil {
			assert.NotNil(t, cc, "a confirmed channel is kept")
		} else {
			require.ErrorIs(t, err, ErrTimeout)
			assert.Nil(t, cc, "a timed-out channel is discarded")
			timeouts++
		}
		p.slots <- cc
		// The broker took it either way: a timeout means "unknown", not "lost".
		assert.Equal(t, fmt.Sprint(i), brokertest.Receive(t, deliveries).MessageId)
	}

	p.cfg.PublishTimeout = 10 * time.Second // no publish in flight: safe to change
	for i := range 3 {
		require.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{MessageId: fmt.Sprint("ok", i)}))
		cc := <-p.slots
		require.NotNil(t, cc)
		channels = append(channels, cc.ch)
		p.slots <- cc
		assert.Equal(t, fmt.Sprint("ok", i), brokertest.Receive(t, deliveries).MessageId)
	}
	assert.Same(t, channels[0], channels[2], "a confirmed channel is reused")
}

// Close fails no later publish silently and leaves no goroutine behind.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	conn := testConn(t)
	q := tempQueue(t, conn, nil)
	before := runtime.NumGoroutine()

	p := NewPublisher(Config{URL: brokertest.URL(), ConnectionName: uniqueName(t, "publisher")}, nil)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			assert.NoError(t, p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("x")}))
		})
	}
	wg.Wait()
	// A timed-out publish closes its channel in the background; Close waits for that too.
	p.cfg.PublishTimeout = time.Nanosecond
	for range 4 {
		_ = p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("x")})
	}
	p.cfg.PublishTimeout = 10 * time.Second // it also bounds the close handshake
	require.NoError(t, p.Close())

	err := p.Publish(context.Background(), "", q, true, amqp.Publishing{Body: []byte("x")})
	assert.True(t, errors.Is(err, ErrClosed), "%v", err)
	waitGoroutines(t, before)
}

func TestDeclareQueues(t *testing.T) {
	conn := testConn(t)
	classic, quorum, existing := uniqueName(t, "classic"), uniqueName(t, "quorum"), uniqueName(t, "existing")
	for _, q := range []string{classic, quorum, existing} {
		t.Cleanup(func() { deleteQueue(t, q) })
	}

	// An operator created this one with other arguments: accepted as it is.
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(existing, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)

	var logged bytes.Buffer
	require.NoError(t, DeclareQueues(Config{URL: brokertest.URL()}, slog.New(slog.NewTextHandler(&logged, nil)), classic, existing))
	assert.Contains(t, logged.String(), "queue exists with other arguments")
	assert.Contains(t, logged.String(), "queue="+existing, "the warning names the queue")
	assert.NotContains(t, logged.String(), "queue="+classic+" ")
	require.NoError(t, DeclareQueues(Config{URL: brokertest.URL()}, nil, classic), "idempotent")
	require.NoError(t, DeclareQueues(Config{URL: brokertest.URL(), QueueType: QueueTypeQuorum}, nil, quorum))

	// Durable and declared: a passive declare on a fresh channel finds them.
	for _, q := range []string{classic, quorum, existing} {
		_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		require.NoError(t, err, q)
	}
	// The quorum one really is a quorum queue: redeclaring it as classic is refused.
	_, err = ch.QueueDeclare(quorum, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	var amqpErr *amqp.Error
	require.ErrorAs(t, err, &amqpErr)
	assert.Equal(t, amqp.PreconditionFailed, amqpErr.Code)

	require.Error(t, DeclareQueues(Config{URL: brokertest.URL()}, nil, ""), "empty names are refused")
}

// A quorum ingress queue declared by the service keeps a message that ran out of deliveries:
// the broker moves it to the dead-letter queue instead of dropping it.
func TestQuorumIngressDeadLettersOverTheDeliveryLimit(t *testing.T) {
	conn := testConn(t)
	ingress, dlq := uniqueName(t, "ingress"), uniqueName(t, "dlq")
	for _, q := range []string{ingress, dlq} {
		t.Cleanup(func() { deleteQueue(t, q) })
	}
	cfg := Config{URL: brokertest.URL(), QueueType: QueueTypeQuorum}
	require.NoError(t, Declare(cfg, nil, Topology(cfg, ingress, dlq)...))

	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirm("", ingress, true, false, amqp.Publishing{MessageId: "m-1", Body: []byte("body")})
	require.NoError(t, err)
	require.True(t, dc.Wait())

	// Returned once more than the limit allows, as a bridge that keeps dying would.
	for i := 0; i <= IngressDeliveryLimit; i++ {
		var d amqp.Delivery
		require.Eventually(t, func() bool {
			var ok bool
			d, ok, err = ch.Get(ingress, false)
			require.NoError(t, err)
			return ok
		}, 10*time.Second, 10*time.Millisecond, "delivery %d", i)
		require.NoError(t, d.Nack(false, true))
	}
	var dead amqp.Delivery
	require.Eventually(t, func() bool {
		var ok bool
		dead, ok, err = ch.Get(dlq, true)
		require.NoError(t, err)
		return ok
	}, 10*time.Second, 20*time.Millisecond, "the message is on the dead-letter queue")
	assert.Equal(t, "m-1", dead.MessageId)
	assert.Equal(t, []byte("body"), dead.Body)
	assert.Contains(t, fmt.Sprint(dead.Headers["x-death"]), "delivery_limit")
	q, err := ch.QueueDeclarePassive(ingress, true, false, false, false, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, q.Messages)
}
