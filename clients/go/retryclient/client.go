package retryclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Client publishes failure reports to the scheduler's ingress queue on a channel of its own,
// in confirm mode. It is safe for concurrent use; reports are published one at a time.
type Client struct {
	conn *amqp.Connection
	opts Options

	// turn is held by the report being published: one at a time on the channel. A report
	// waits for its turn only as long as its context allows.
	turn    chan struct{}
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  bool
}

// ErrClosed is returned by Report after Close: a closed client opens no channel again.
var ErrClosed = errors.New("retryclient: client closed")

// New opens the client's channel on conn. The client does not own conn: closing it is the
// caller's, after Close.
func New(conn *amqp.Connection, opts Options) (*Client, error) {
	if conn == nil {
		return nil, errors.New("retryclient: nil connection")
	}
	c := &Client{conn: conn, opts: opts, turn: make(chan struct{}, 1)}
	if err := c.open(); err != nil {
		return nil, err
	}
	return c, nil
}

// open opens the channel, puts it in confirm mode and listens for returned reports.
func (c *Client) open() error {
	ch, err := c.conn.Channel()
	if err != nil {
		return fmt.Errorf("retryclient: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("retryclient: confirm mode: %w", err)
	}
	// The broker sends a return before the confirm of the same publish, and the library
	// hands both over in that order: one slot is enough for one publish at a time.
	c.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
	c.ch = ch
	return nil
}

// Report tells the scheduler that processing d, consumed from queue, failed with err; once
// it returns nil the scheduler has the report (the broker confirmed it) and the caller acks
// d. On an error the caller must not ack: nack d with requeue, or leave it unacked, so
// that it is not lost.
//
// The report carries d's payload, message id, content type, correlation id, type (as the
// event type) and headers (traceparent and tracestate among them), its x-retry-count and
// x-retry-key, and what err says: a category set with Transient, Permanent, RateLimited
// or Validation; an HTTP status from an error with an HTTPStatus() int method (such as
// *HTTPError); a socket error code (ECONNRESET, ETIMEDOUT ...) from the syscall errno in
// its chain; its text as the reason. The scheduler classifies what the report leaves open.
func (c *Client) Report(ctx context.Context, d amqp.Delivery, queue string, err error) error {
	if queue == "" {
		return errors.New("retryclient: report: the queue the delivery came from is required")
	}
	m := BuildMessage(d, queue, err, c.opts)
	body, jerr := json.Marshal(m)
	if jerr != nil {
		return fmt.Errorf("retryclient: encode report: %w", jerr)
	}
	return c.publish(ctx, m.MessageID, body)
}

func (c *Client) publish(ctx context.Context, id string, body []byte) error {
	if err := c.takeTurn(ctx); err != nil {
		return err
	}
	defer func() { <-c.turn }()
	if c.closed {
		return ErrClosed
	}
	if c.ch == nil || c.ch.IsClosed() {
		if err := c.open(); err != nil {
			return err
		}
	}
	ingress := c.opts.ingress()
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, "", ingress, true, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		UserId:       c.opts.UserID,
		Body:         body,
	})
	if err != nil {
		return fmt.Errorf("retryclient: publish to %s: %w", ingress, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		// A late confirm or return would be taken for the next report's: start afresh.
		_ = c.ch.Close()
		c.ch = nil
		return fmt.Errorf("retryclient: await the broker's confirm from %s: %w", ingress, err)
	}
	select {
	case r, ok := <-c.returns:
		if !ok {
			return fmt.Errorf("retryclient: the channel closed before the broker confirmed the report to %s", ingress)
		}
		return fmt.Errorf("retryclient: report returned by the broker: %d %s (does queue %q exist?)", r.ReplyCode, r.ReplyText, ingress)
	default:
	}
	if !acked {
		return fmt.Errorf("retryclient: the broker refused the report to %s (nack)", ingress)
	}
	return nil
}

// takeTurn waits for the report before this one to be confirmed, no longer than ctx allows.
// A free turn is taken even when ctx is done: the publish then fails with ctx's error.
func (c *Client) takeTurn(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("retryclient: wait for the report before it: %w", ctx.Err())
	}
}

// Close closes the client's channel; a Report after it fails with ErrClosed.
func (c *Client) Close() error {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	c.closed = true
	if c.ch == nil {
		return nil
	}
	err := c.ch.Close()
	c.ch = nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("retryclient: close: %w", err)
	}
	return nil
}
