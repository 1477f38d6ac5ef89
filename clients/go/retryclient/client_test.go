package retryclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Client against fakeBroker (fakebroker_test.go): the real amqp091 library on an in-memory
// pipe, so confirms, returns and channel closes take the paths they take with RabbitMQ.

// reportAnswered runs c.Report in the background, hands its publish to answer and returns
// both the publish and Report's result.
func reportAnswered(t *testing.T, b *fakeBroker, c *Client, d amqp.Delivery, answer func(publishing)) (publishing, error) {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- c.Report(context.Background(), d, "orders", errors.New("boom")) }()
	p := b.nextPublish(t)
	answer(p)
	return p, result(t, res)
}

func result(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Report did not return within 10s")
		return nil
	}
}

func newClient(t *testing.T, conn *amqp.Connection, opts Options) *Client {
	t.Helper()
	c, err := New(conn, opts)
	require.NoError(t, err)
	return c
}

func TestNewOpensAChannelInConfirmModeAndCloseClosesIt(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	require.Equal(t, []string{"channel.open 1", "confirm.select 1"}, b.events())

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is a no-op")
	require.Equal(t, []string{"channel.open 1", "confirm.select 1", "channel.close 1"}, b.events())
	require.False(t, conn.IsClosed(), "the connection is the caller's")

	err := c.Report(context.Background(), amqp.Delivery{MessageId: "m"}, "orders", errors.New("boom"))
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, []string{"channel.open 1", "confirm.select 1", "channel.close 1"}, b.events(), "a closed client opens no channel")
}

func TestNewFailsWhenTheBrokerRefusesConfirmMode(t *testing.T) {
	b, conn := dialFake(t)
	b.refuseConfirm.Store(true)
	_, err := New(conn, Options{})
	require.ErrorContains(t, err, "retryclient: confirm mode")
	var ae *amqp.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 540, ae.Code)
}

func TestNewFailsOnAClosedConnection(t *testing.T) {
	_, conn := dialFake(t)
	require.NoError(t, conn.Close())
	_, err := New(conn, Options{})
	require.ErrorIs(t, err, amqp.ErrClosed)
	require.ErrorContains(t, err, "retryclient: open channel")
}

// The report is a persistent JSON message, mandatory so that a missing ingress is an error,
// on the default exchange to the ingress queue, carrying BuildMessage's report.
func TestReportPublishesTheReportToTheIngressQueue(t *testing.T) {
	b, conn := dialFake(t)
	opts := Options{Service: "orders-api", TenantID: "acme"}
	c := newClient(t, conn, opts)
	d := amqp.Delivery{
		MessageId: "o-1", Body: []byte("order 1"), ContentType: "text/plain",
		Headers: amqp.Table{"x-retry-count": int32(2), "x-retry-key": "o-1:2", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	failure := RateLimited(&HTTPError{Status: 429}, 5*time.Second)
	res := make(chan error, 1)
	go func() { res <- c.Report(context.Background(), d, "orders", failure) }()
	p := b.nextPublish(t)
	b.ack(p)
	require.NoError(t, result(t, res))

	require.Equal(t, "", p.exchange)
	require.Equal(t, DefaultIngressQueue, p.key)
	require.True(t, p.mandatory)
	require.Equal(t, "application/json", p.msg.ContentType)
	require.Equal(t, amqp.Persistent, p.msg.DeliveryMode)
	require.Equal(t, "o-1", p.msg.MessageId)
	want, err := json.Marshal(BuildMessage(d, "orders", failure, opts))
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(p.msg.Body))
	var fields map[string]any
	require.NoError(t, json.Unmarshal(p.msg.Body, &fields))
	require.Equal(t, "o-1:2", fields["retry_key"])
	require.Equal(t, 2.0, fields["retry_count"])
	require.Equal(t, "rate-limited", fields["error_category"])
	require.Equal(t, 429.0, fields["http_status"])
	require.Equal(t, 5000.0, fields["retry_after_ms"])
}

// The report carries the user-id it is told (the scheduler binds producers by it), and none
// when told none.
func TestReportSetsTheUserIDItIsGiven(t *testing.T) {
	b, conn := dialFake(t)
	p, err := reportAnswered(t, b, newClient(t, conn, Options{UserID: "orders-svc"}), amqp.Delivery{MessageId: "m"}, b.ack)
	require.NoError(t, err)
	require.Equal(t, "orders-svc", p.msg.UserId)
	p, err = reportAnswered(t, b, newClient(t, conn, Options{}), amqp.Delivery{MessageId: "m"}, b.ack)
	require.NoError(t, err)
	require.Empty(t, p.msg.UserId)
}

func TestReportGoesToTheConfiguredIngressQueue(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{IngressQueue: "tenant-a.retry.scheduled"})
	p, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m"}, b.ack)
	require.NoError(t, err)
	require.Equal(t, "tenant-a.retry.scheduled", p.key)
}

func TestReportFailsWhenTheBrokerNacksAndTheNextOneStillGoes(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	_, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-1"}, b.nack)
	require.ErrorContains(t, err, "the broker refused the report to retry.scheduled (nack)")

	p, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-2"}, b.ack)
	require.NoError(t, err)
	require.Equal(t, uint64(2), p.tag, "same channel: nothing was reopened for a nack")
}

// A report no queue takes comes back before its confirm: an error, never a silent loss; and
// the return is used up, so the next, routed report succeeds.
func TestReportFailsWhenTheBrokerReturnsIt(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	_, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-1", Body: []byte("x")}, func(p publishing) {
		b.returnThenAck(p, 312, "NO_ROUTE")
	})
	require.ErrorContains(t, err, `report returned by the broker: 312 NO_ROUTE (does queue "retry.scheduled" exist?)`)

	_, err = reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-2"}, b.ack)
	require.NoError(t, err)
}

// A channel the broker closes before confirming leaves the report unconfirmed: an error; the
// next report goes on a new channel.
func TestReportFailsWhenTheChannelClosesBeforeTheConfirm(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	first, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-1"}, func(p publishing) {
		b.closeChannel(p.channel, 406, "PRECONDITION_FAILED")
	})
	require.ErrorContains(t, err, "the channel closed before the broker confirmed the report to retry.scheduled")

	second, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-2"}, b.ack)
	require.NoError(t, err)
	require.NotEqual(t, first.channel, second.channel)
	require.Equal(t, uint64(1), second.tag)
	require.Equal(t, []string{
		fmt.Sprintf("channel.open %d", first.channel), fmt.Sprintf("confirm.select %d", first.channel),
		fmt.Sprintf("channel.close-ok %d", first.channel),
		fmt.Sprintf("channel.open %d", second.channel), fmt.Sprintf("confirm.select %d", second.channel),
	}, b.events())
}

// Giving up on a confirm drops the channel, so that the late confirm cannot be taken for the
// next report's.
func TestReportGivesUpWhenTheContextEndsAndStartsAfresh(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- c.Report(ctx, amqp.Delivery{MessageId: "m-1"}, "orders", errors.New("boom")) }()
	first := b.nextPublish(t)
	cancel() // the broker never answers
	err := result(t, res)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "retryclient: await the broker's confirm from retry.scheduled")
	require.Contains(t, b.events(), fmt.Sprintf("channel.close %d", first.channel))

	second, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "m-2"}, b.ack)
	require.NoError(t, err)
	require.NotEqual(t, first.channel, second.channel)
	require.Equal(t, "m-2", second.msg.MessageId)
}

// Reports that are refused before they are sent publish nothing: the first message the
// broker sees is the later, valid report.
func TestReportRefusedBeforePublishingSendsNothing(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})

	err := c.Report(context.Background(), amqp.Delivery{MessageId: "no-queue"}, "", errors.New("boom"))
	require.ErrorContains(t, err, "the queue the delivery came from is required")

	done, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.Report(done, amqp.Delivery{MessageId: "done-ctx"}, "orders", errors.New("boom"))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "retryclient: publish to retry.scheduled")

	p, err := reportAnswered(t, b, c, amqp.Delivery{MessageId: "ok"}, b.ack)
	require.NoError(t, err)
	require.Equal(t, "ok", p.msg.MessageId)
	require.Equal(t, uint64(1), p.tag)
}

// With the connection gone the client cannot reopen its channel: Report says so at once
// rather than hanging, and Close has nothing left to fail on.
func TestReportFailsWhenTheConnectionIsLost(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	lost := conn.NotifyClose(make(chan *amqp.Error, 1))
	b.drop()
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not notice the lost connection within 10s")
	}

	err := c.Report(context.Background(), amqp.Delivery{MessageId: "m"}, "orders", errors.New("boom"))
	require.ErrorIs(t, err, amqp.ErrClosed)
	require.ErrorContains(t, err, "retryclient: open channel")
	require.NoError(t, c.Close())
}

// Concurrent reports share the channel one at a time (the fake broker fails the test on a
// publish while another awaits its confirm), and each gets its own confirm.
func TestConcurrentReportsArePublishedOneAtATime(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	const n = 4
	res := make(chan error, n)
	for i := range n {
		go func() {
			res <- c.Report(context.Background(), amqp.Delivery{MessageId: fmt.Sprint("m-", i)}, "orders", errors.New("boom"))
		}()
	}
	ids := map[string]bool{}
	for range n {
		p := b.nextPublish(t)
		ids[p.msg.MessageId] = true
		b.ack(p)
	}
	for range n {
		require.NoError(t, result(t, res))
	}
	require.Equal(t, map[string]bool{"m-0": true, "m-1": true, "m-2": true, "m-3": true}, ids)
}

// A report waiting for the one before it to be confirmed waits only as long as its context
// allows: it ends with the context's error and sends nothing, and the one before it is
// still confirmed.
func TestAReportWaitingItsTurnEndsWithItsContext(t *testing.T) {
	b, conn := dialFake(t)
	c := newClient(t, conn, Options{})
	first := make(chan error, 1)
	go func() {
		first <- c.Report(context.Background(), amqp.Delivery{MessageId: "m-1"}, "orders", errors.New("boom"))
	}()
	p := b.nextPublish(t) // m-1 awaits its confirm, holding the channel

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Report(ctx, amqp.Delivery{MessageId: "m-2"}, "orders", errors.New("boom"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "retryclient: wait for the report before it")

	b.ack(p)
	require.NoError(t, result(t, first))
	require.Equal(t, "m-1", p.msg.MessageId)
}
