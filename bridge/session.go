package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one connection and channel: its generation, and the handlers' context, which
// outlives Run's ctx (so that in-flight reports finish on shutdown) but ends when the
// connection is lost (an ack is impossible then).
type session struct {
	b    *Bridge
	conn *amqp.Connection
	ch   channel
	// open opens a channel on conn; the unit tests open fakes.
	open    func() (channel, error)
	gen     uint64
	ctx     context.Context
	cancel  context.CancelFunc
	results chan result
	// bg counts goroutines running AMQP methods under rpc; they end once the connection is closed.
	bg sync.WaitGroup
}

// channel is what a session does on its AMQP channel: *amqp.Channel's methods, named here so
// that the loop's unit tests run it on a fake.
type channel interface {
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error)
	Cancel(consumer string, noWait bool) error
	Close() error
	NotifyClose(c chan *amqp.Error) chan *amqp.Error
	Qos(prefetchCount, prefetchSize int, global bool) error
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
}

// session runs one connection until it is lost or ctx is done. consumed says whether it got
// as far as consuming, which resets the reconnect backoff.
func (b *Bridge) session(ctx context.Context) (consumed bool, err error) {
	conn, err := b.dial()
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	s := &session{b: b, conn: conn, results: make(chan result, b.cfg.Workers)}
	s.open = func() (channel, error) {
		ch, err := conn.Channel()
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return ch, nil
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		s.cancel()
		_ = conn.CloseDeadline(time.Now().Add(rpcTimeout))
		s.bg.Wait()
	}()
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))

	if err := s.setup(); err != nil {
		return false, err
	}
	chClosed := s.ch.NotifyClose(make(chan *amqp.Error, 1))
	// Which node of a cluster this session is on, for following a failover in the log.
	b.log.Info("amqp session open", "addr", conn.RemoteAddr().String(), "queue", b.cfg.Queue)

	b.genMu.Lock()
	b.gen++
	s.gen = b.gen
	b.genMu.Unlock()

	l := &loop{s: s, mode: running, probeDelay: b.cfg.ReconnectDelay, connClosed: connClosed, chClosed: chClosed}
	err = l.run(ctx)
	return l.consumed, err
}

// setup opens the channel, declares the queues and sets the prefetch.
func (s *session) setup() error {
	if err := s.rpc("open channel", func() (err error) {
		s.ch, err = s.open()
		return err
	}); err != nil {
		return err
	}
	// The dead-letter queue first: the ingress queue may dead-letter into it.
	if err := s.declare(s.b.cfg.DeadLetterQueue, s.b.cfg.DeadLetterArgs); err != nil {
		return err
	}
	if err := s.declare(s.b.cfg.Queue, s.b.cfg.IngressArgs); err != nil {
		return err
	}
	return s.rpc("set prefetch", func() error { return s.ch.Qos(s.b.cfg.Prefetch, 0, false) })
}

// declare declares a durable queue. One that exists with other arguments (a quorum queue
// declared by the deployment, say) is accepted as it is: the bridge only needs it to exist.
func (s *session) declare(name string, args amqp.Table) error {
	err := s.rpc("declare queue "+name, func() error {
		_, err := s.ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	var ae *amqp.Error
	if err == nil || !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return err
	}
	// The refused declare closed the channel.
	if err := s.rpc("reopen channel", func() (err error) {
		s.ch, err = s.open()
		return err
	}); err != nil {
		return err
	}
	return s.rpc("check queue "+name, func() error {
		_, err := s.ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
}

// rpc runs an AMQP method with rpcTimeout. amqp091's methods have no deadline of their own;
// on timeout the caller ends the session, and closing the connection releases the goroutine.
func (s *session) rpc(what string, f func() error) error {
	done := make(chan error, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		done <- f()
	}()
	t := time.NewTimer(rpcTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%s: no answer from the broker within %s", what, rpcTimeout)
	}
}

// retire makes the session's deliveries stale: from now on none of them is acked or nacked,
// and the handlers' reports are cancelled. The broker redelivers them.
func (s *session) retire() {
	s.b.genMu.Lock()
	if s.b.gen == s.gen {
		s.b.gen++
	}
	s.b.genMu.Unlock()
	s.cancel()
}

// settle acks or requeues d if its channel is still current; false means it was not settled
// (stale, or the channel refused) and the broker will redeliver it.
func (s *session) settle(d amqp.Delivery, ack bool) bool {
	s.b.genMu.RLock()
	defer s.b.genMu.RUnlock()
	if s.gen != s.b.gen {
		return false
	}
	var err error
	if ack {
		err = d.Ack(false)
	} else {
		err = d.Nack(false, true)
	}
	return err == nil
}

// requeue returns an unprocessed delivery to the queue (the bridge is stopping).
func (s *session) requeue(d amqp.Delivery) {
	if s.settle(d, false) {
		s.b.metrics.outcome(OutcomeRequeued)
	} else {
		s.b.metrics.outcome(OutcomeDroppedStale)
	}
}
