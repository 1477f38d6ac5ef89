package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publish outcomes callers tell apart with errors.Is.
var (
	// ErrUnroutable: the broker accepted the message but no queue took it (basic.return with
	// NO_ROUTE for a mandatory publish), or the exchange does not exist. Retrying cannot help
	// until someone fixes the topology.
	ErrUnroutable = errors.New("message unroutable")
	// ErrNacked: the broker refused the message (basic.nack, an internal broker error). Retryable.
	ErrNacked = errors.New("message nacked by broker")
	// ErrTimeout: no confirm arrived before the deadline. The message may or may not have been
	// taken; a retry can duplicate it (consumers dedupe by x-retry-key).
	ErrTimeout = errors.New("publisher confirm timed out")
	// ErrBlocked: the broker blocks publishers on this connection (memory or disk alarm).
	// Failing fast keeps callers from piling up behind a socket the broker stopped reading.
	ErrBlocked = errors.New("broker is blocking publishers")
	// ErrClosed: the Publisher was closed.
	ErrClosed = errors.New("publisher closed")
)

// discard is the logger of a caller that passes none.
var discard = slog.New(slog.DiscardHandler)

// Publisher publishes with publisher confirms over a pool of channels on one connection.
// It is safe for concurrent use: each channel carries one publish at a time, so a confirm and
// a basic.return on a channel always belong to the publish that holds it.
//
// It connects on the first Publish and, after the connection is lost, reconnects on the next
// Publish; the publish that saw the loss returns its error (the caller retries).
type Publisher struct {
	cfg    Config
	logger *slog.Logger

	// slots holds cfg.Channels entries, taken for the duration of one publish. A nil entry
	// is a slot whose channel is not open (yet, or any more).
	slots chan *confirmChannel
	// done is closed by Close, releasing publishes waiting for a slot.
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	// connLock is a one-slot lock guarding conn and closed; a channel rather than a mutex so
	// that a publish waiting for someone else's dial gives up when its context ends.
	connLock chan struct{}
	conn     *connState
	closed   bool

	// bg counts the goroutines the Publisher started (connection watchers, background
	// channel closes); Close waits for them. bgMu orders bg.Add against Close's bg.Wait.
	bgMu      sync.Mutex
	bgStopped bool
	bg        sync.WaitGroup

	// dials counts the connections opened (Connections).
	dials atomic.Int64
}

// connState is one connection and what its watcher learned about it.
type connState struct {
	conn    *amqp.Connection
	blocked atomic.Bool
	reason  atomic.Pointer[string] // why the broker blocks, while blocked
}

// closeReasonWait bounds the wait for a closed channel's reason (confirmChannel.closed); the
// library hands it over right after marking the channel closed.
const closeReasonWait = 250 * time.Millisecond

// confirmChannel is a channel in confirm mode with its own listeners. Only the publish holding
// its slot touches it, so its fields need no lock.
type confirmChannel struct {
	conn    *connState
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	// closeReason is the error the channel closed with, once seen on closes.
	closeReason *amqp.Error
	closedSeen  bool
}

// NewPublisher returns a Publisher for cfg (defaults applied) that logs its connection's
// life on logger (nil: nowhere). It does not connect yet, so a broker that is down at
// start-up does not stop the process; the first Publish reports it.
func NewPublisher(cfg Config, logger *slog.Logger) *Publisher {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = discard
	}
	p := &Publisher{
		cfg:      cfg,
		logger:   logger,
		slots:    make(chan *confirmChannel, cfg.Channels),
		done:     make(chan struct{}),
		connLock: make(chan struct{}, 1),
	}
	for range cfg.Channels {
		p.slots <- nil
	}
	return p
}

// Publish publishes msg and waits for the broker's confirm, at most until ctx ends or the
// PublishTimeout passes. With mandatory set, a message no queue takes is ErrUnroutable. A
// message that cannot be encoded is ErrUnpublishable before it reaches the connection, and
// one the broker refuses by closing the channel is ErrRefused: both are the message's own,
// and neither costs other publishes their connection.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	if err := p.publish(ctx, exchange, key, mandatory, msg); err != nil {
		return fmt.Errorf("publish to exchange %q key %q: %w", exchange, key, err)
	}
	return nil
}

func (p *Publisher) publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	if err := CheckPublishing(exchange, key, msg); err != nil {
		return err
	}
	select {
	case <-p.done:
		return ErrClosed
	default:
	}
	var cc *confirmChannel
	select {
	case cc = <-p.slots:
	case <-p.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("wait for a free channel: %w", ctx.Err())
	}
	keep := false
	defer func() {
		if !keep {
			p.discard(cc)
			cc = nil
		}
		p.slots <- cc
	}()

	if cc != nil && !cc.usable() {
		p.discard(cc)
		cc = nil
	}
	if cc != nil {
		if err := cc.conn.blockedErr(); err != nil {
			keep = true
			return err
		}
	} else {
		var err error
		if cc, err = p.openChannel(ctx); err != nil {
			return err
		}
	}

	var err error
	keep, err = p.publishOn(ctx, cc, exchange, key, mandatory, msg)
	return err
}

// publishOn publishes on cc and waits for the outcome. keep says whether cc can serve the
// next publish: not after a timeout (its late confirm would be taken for the next one's), nor
// after a nack, nor once it is closed.
func (p *Publisher) publishOn(ctx context.Context, cc *confirmChannel, exchange, key string, mandatory bool, msg amqp.Publishing) (keep bool, err error) {
	if err := checkFrame(msg, cc.conn.conn.Config.FrameSize); err != nil {
		return true, err
	}
	drain(cc.returns) // a return left by an abandoned publish must not be taken for ours

	dc, err := cc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, msg)
	if err != nil {
		if reason := cc.closed(); reason != nil {
			if refused(cc, reason) {
				return false, fmt.Errorf("%w: %d %s", ErrRefused, reason.Code, reason.Reason)
			}
			return false, fmt.Errorf("channel closed: %w", reason)
		}
		// Nothing was sent (the context ended first) or the write failed; in the latter
		// case the channel is unusable and usable() will say so next time.
		return true, err
	}
	if dc == nil { // only without confirm mode, which openChannel always enables
		return false, errors.New("channel not in confirm mode")
	}

	timer := time.NewTimer(p.cfg.PublishTimeout)
	defer timer.Stop()
	select {
	case <-dc.Done():
	case <-timer.C:
		return false, fmt.Errorf("%w after %s", ErrTimeout, p.cfg.PublishTimeout)
	case <-ctx.Done():
		return false, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}

	if dc.Acked() {
		// The broker sends basic.return before the ack on the same channel, and the client
		// hands it to cc.returns (buffered) before it completes the confirm, so a return for
		// this publish is already there.
		select {
		case r, ok := <-cc.returns:
			if ok {
				return true, fmt.Errorf("%w: %d %s", ErrUnroutable, r.ReplyCode, r.ReplyText)
			}
		default:
		}
		return true, nil
	}
	// A closing channel nacks every pending confirm; tell that apart from a real nack.
	if reason := cc.closed(); reason != nil {
		if reason.Code == amqp.NotFound {
			// The exchange does not exist: as permanent as a missing queue.
			return false, fmt.Errorf("%w: %s", ErrUnroutable, reason.Reason)
		}
		if refused(cc, reason) {
			return false, fmt.Errorf("%w: %d %s", ErrRefused, reason.Code, reason.Reason)
		}
		return false, fmt.Errorf("channel closed: %w", reason)
	}
	// Not kept: a channel whose first publish to a quorum queue met the queue's leader dying
	// has every later publish to that queue nacked (RabbitMQ 3.10), while a new channel
	// reaches the new leader.
	return false, ErrNacked
}

// refused says whether the broker closed cc, and only cc, refusing the message it carried:
// a channel-level 406 or 403 while the connection stays open. Only the channel is lost (it is
// discarded and the next publish opens another on the same connection).
func refused(cc *confirmChannel, reason *amqp.Error) bool {
	if !reason.Server || cc.conn.conn.IsClosed() {
		return false
	}
	return reason.Code == amqp.PreconditionFailed || reason.Code == amqp.AccessRefused
}

// Connections is how many AMQP connections the Publisher has opened: 1 while the first is
// kept, one more for each reconnect.
func (p *Publisher) Connections() int64 { return p.dials.Load() }

// openChannel opens a confirm-mode channel on the current connection, dialing if needed.
func (p *Publisher) openChannel(ctx context.Context) (*confirmChannel, error) {
	cs, err := p.connection(ctx)
	if err != nil {
		return nil, err
	}
	// A blocked connection is not read by the broker: channel.open would hang until the alarm clears.
	if err := cs.blockedErr(); err != nil {
		return nil, err
	}
	ch, err := cs.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	cc := &confirmChannel{
		conn: cs,
		ch:   ch,
		// One publish at a time per channel means at most one return is pending; the spare
		// room only guards against the reader goroutine ever waiting on us.
		returns: ch.NotifyReturn(make(chan amqp.Return, 4)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	if err := ch.Confirm(false); err != nil {
		p.discard(cc)
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return cc, nil
}

// connection returns the open connection, dialing a new one if there is none or it was lost.
func (p *Publisher) connection(ctx context.Context) (*connState, error) {
	select {
	case p.connLock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for connection: %w", ctx.Err())
	}
	defer func() { <-p.connLock }()

	if p.closed {
		return nil, ErrClosed
	}
	if p.conn != nil && !p.conn.conn.IsClosed() {
		return p.conn, nil
	}
	conn, err := Dial(p.cfg)
	if err != nil {
		return nil, err
	}
	p.dials.Add(1)
	cs := &connState{conn: conn}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	if !p.goBackground(func() { p.watch(cs, closes, blocks) }) {
		_ = conn.Close()
		return nil, ErrClosed
	}
	p.conn = cs
	p.logger.Info("amqp connection opened", "addr", conn.RemoteAddr().String(), "connection_name", p.cfg.ConnectionName)
	return cs, nil
}

// watch logs the connection's loss and tracks flow control, draining both notification
// channels until the client closes them (the amqp091 contract: listeners must keep reading).
func (p *Publisher) watch(cs *connState, closes <-chan *amqp.Error, blocks <-chan amqp.Blocking) {
	for closes != nil || blocks != nil {
		select {
		case e, ok := <-closes:
			if !ok {
				closes = nil
				continue
			}
			p.logger.Warn("amqp connection lost; reconnecting on next publish", "addr", cs.conn.RemoteAddr().String(), "error", e)
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			if b.Active {
				reason := b.Reason
				cs.reason.Store(&reason)
				cs.blocked.Store(true)
				p.logger.Warn("amqp broker blocked publishers", "reason", b.Reason)
			} else {
				cs.blocked.Store(false)
				p.logger.Info("amqp broker unblocked publishers")
			}
		}
	}
}

// discard closes cc in the background: closing waits for the broker's close-ok, which a
// publish in a hurry should not.
func (p *Publisher) discard(cc *confirmChannel) {
	if cc == nil || cc.ch.IsClosed() {
		return
	}
	// If the Publisher is closing, closing the connection closes the channel too.
	p.goBackground(func() { _ = cc.ch.Close() })
}

// goBackground runs f in a goroutine that Close waits for; false if Close already started.
func (p *Publisher) goBackground(f func()) bool {
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.bgStopped {
		return false
	}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		f()
	}()
	return true
}

// Close closes the connection, failing publishes in flight, and waits for the Publisher's
// goroutines. The close handshake is bounded by PublishTimeout.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		close(p.done)
		p.connLock <- struct{}{} // waits out a dial in progress
		p.closed = true
		cs := p.conn
		<-p.connLock

		if cs != nil {
			err := cs.conn.CloseDeadline(time.Now().Add(p.cfg.PublishTimeout))
			if err != nil && !errors.Is(err, amqp.ErrClosed) {
				p.closeErr = fmt.Errorf("close connection: %w", err)
			}
		}
		p.bgMu.Lock()
		p.bgStopped = true
		p.bgMu.Unlock()
		p.bg.Wait()
	})
	return p.closeErr
}

// blockedErr is ErrBlocked with the broker's reason while the broker blocks the connection.
func (cs *connState) blockedErr() error {
	if !cs.blocked.Load() {
		return nil
	}
	reason := ""
	if r := cs.reason.Load(); r != nil {
		reason = *r
	}
	return fmt.Errorf("%w: %s", ErrBlocked, reason)
}

// usable says whether cc can still carry a publish.
func (cc *confirmChannel) usable() bool {
	return cc.closed() == nil && !cc.conn.conn.IsClosed()
}

// closed returns why cc closed, or nil while it is open.
func (cc *confirmChannel) closed() *amqp.Error {
	if !cc.closedSeen {
		select {
		case e, ok := <-cc.closes:
			cc.closedSeen = true
			if ok && e != nil {
				cc.closeReason = e
			}
		default:
			if !cc.ch.IsClosed() {
				return nil
			}
			// The library marks a channel closed before it hands the reason to NotifyClose:
			// wait for the reason (a 406 decides that the message is refused) rather than
			// keep a bare ErrClosed for good.
			select {
			case e, ok := <-cc.closes:
				if ok && e != nil {
					cc.closeReason = e
				}
			case <-time.After(closeReasonWait):
			}
			cc.closedSeen = true
		}
	}
	if cc.closeReason != nil {
		return cc.closeReason
	}
	return amqp.ErrClosed
}

// drain empties c without blocking.
func drain[T any](c <-chan T) {
	for {
		select {
		case _, ok := <-c:
			if !ok {
				return
			}
		default:
			return
		}
	}
}
