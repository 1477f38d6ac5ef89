package retryclient

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// fakeBroker is the broker's end of an AMQP 0-9-1 connection over net.Pipe: just enough of
// the protocol (handshake, channels, confirm mode, publish, ack/nack/return) for Client to
// run against the real amqp091 library without RabbitMQ. Publishes go to the test, which
// answers them; what the client did to its channels is logged.
type fakeBroker struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex // one frame at a time: the serve loop and the test both write
	done chan struct{}

	// refuseConfirm answers confirm.select with a channel.close, as a broker without
	// publisher confirms would.
	refuseConfirm atomic.Bool
	publishes     chan publishing

	mu     sync.Mutex
	log    []string          // "channel.open 1", "confirm.select 1", "channel.close 1" ...
	tags   map[uint16]uint64 // last delivery tag per channel in confirm mode
	unconf map[uint16]int    // publishes per channel not yet acked, nacked or closed
}

// publishing is a basic.publish as the broker received it.
type publishing struct {
	channel   uint16
	tag       uint64
	exchange  string
	key       string
	mandatory bool
	msg       amqp.Publishing // ContentType, DeliveryMode, MessageId and Body
}

const (
	frameMethod = 1
	frameHeader = 2
	frameBody   = 3
	frameEnd    = 0xCE
)

// dialFake connects an amqp.Connection to a new fakeBroker; both end with the test.
func dialFake(t *testing.T) (*fakeBroker, *amqp.Connection) {
	t.Helper()
	client, server := net.Pipe()
	b := &fakeBroker{
		t: t, conn: server, r: bufio.NewReader(server), done: make(chan struct{}),
		publishes: make(chan publishing, 16),
		tags:      map[uint16]uint64{}, unconf: map[uint16]int{},
	}
	go b.serve()
	conn, err := amqp.Open(client, amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: "guest", Password: "guest"}}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		_ = server.Close()
		<-b.done
	})
	return b, conn
}

// events is what the client did to its channels so far, in order.
func (b *fakeBroker) events() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.log...)
}

func (b *fakeBroker) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = append(b.log, fmt.Sprintf(format, args...))
}

// nextPublish is the next report the client published.
func (b *fakeBroker) nextPublish(t *testing.T) publishing {
	t.Helper()
	select {
	case p := <-b.publishes:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("the client published nothing within 10s")
		return publishing{}
	}
}

// drop cuts the connection the way a crashed broker does: no close handshake.
func (b *fakeBroker) drop() { _ = b.conn.Close() }

func (b *fakeBroker) answered(ch uint16) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unconf[ch]--
}

// closed forgets the publishes of a closed channel: they are never confirmed.
func (b *fakeBroker) closed(ch uint16) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.unconf, ch)
}

func (b *fakeBroker) ack(p publishing) {
	b.answered(p.channel)
	b.method(p.channel, 60, 80, p.tag, uint8(0))
}

func (b *fakeBroker) nack(p publishing) {
	b.answered(p.channel)
	b.method(p.channel, 60, 120, p.tag, uint8(0))
}

// returnThenAck is RabbitMQ's answer to a mandatory publish no queue takes: basic.return
// with the message, then the confirm.
func (b *fakeBroker) returnThenAck(p publishing, code uint16, text string) {
	b.method(p.channel, 60, 50, code, text, p.exchange, p.key)
	b.frame(frameHeader, p.channel, encode(uint16(60), uint16(0), uint64(len(p.msg.Body)), uint16(0)))
	if len(p.msg.Body) > 0 {
		b.frame(frameBody, p.channel, p.msg.Body)
	}
	b.ack(p)
}

// closeChannel closes ch from the broker's side, as on a channel error.
func (b *fakeBroker) closeChannel(ch uint16, code uint16, text string) {
	b.method(ch, 20, 40, code, text, uint16(0), uint16(0))
}

// longstr is an AMQP long string; a Go string is encoded as a short one.
type longstr string

// encode writes AMQP fields: integers big-endian, string as shortstr, longstr as longstr.
func encode(fields ...any) []byte {
	var out []byte
	for _, f := range fields {
		switch v := f.(type) {
		case uint8:
			out = append(out, v)
		case uint16:
			out = binary.BigEndian.AppendUint16(out, v)
		case uint32:
			out = binary.BigEndian.AppendUint32(out, v)
		case uint64:
			out = binary.BigEndian.AppendUint64(out, v)
		case string:
			out = append(append(out, byte(len(v))), v...)
		case longstr:
			out = append(binary.BigEndian.AppendUint32(out, uint32(len(v))), v...)
		default:
			panic(fmt.Sprintf("encode: %T", f))
		}
	}
	return out
}

func (b *fakeBroker) method(ch, class, id uint16, fields ...any) {
	b.frame(frameMethod, ch, append(encode(class, id), encode(fields...)...))
}

func (b *fakeBroker) frame(typ byte, ch uint16, payload []byte) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	buf := append(encode(typ, ch, uint32(len(payload))), payload...)
	_, _ = b.conn.Write(append(buf, frameEnd)) // an error is a closed connection: the test sees it
}

// decoder reads AMQP fields; a short payload sets err and yields zeros.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = io.ErrUnexpectedEOF
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8        { return d.take(1)[0] }
func (d *decoder) u16() uint16      { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u64() uint64      { return binary.BigEndian.Uint64(d.take(8)) }
func (d *decoder) shortstr() string { return string(d.take(int(d.u8()))) }

func (b *fakeBroker) readFrame() (typ byte, ch uint16, payload []byte, err error) {
	var h [7]byte
	if _, err = io.ReadFull(b.r, h[:]); err != nil {
		return
	}
	payload = make([]byte, binary.BigEndian.Uint32(h[3:])+1)
	if _, err = io.ReadFull(b.r, payload); err != nil {
		return
	}
	if payload[len(payload)-1] != frameEnd {
		return 0, 0, nil, fmt.Errorf("frame without its end byte")
	}
	return h[0], binary.BigEndian.Uint16(h[1:]), payload[:len(payload)-1], nil
}

// serve plays the broker until the connection closes.
func (b *fakeBroker) serve() {
	defer close(b.done)
	header := make([]byte, 8)
	if _, err := io.ReadFull(b.r, header); err != nil || string(header) != "AMQP\x00\x00\x09\x01" {
		b.t.Errorf("fake broker: protocol header %q, %v", header, err)
		return
	}
	// connection.start: version 0-9, no server properties, PLAIN, en_US.
	b.method(0, 10, 10, uint8(0), uint8(9), uint32(0), longstr("PLAIN"), longstr("en_US"))
	var pub *publishing // a publish awaiting its content header and body
	var size int        // of pub's body
	for {
		typ, ch, payload, err := b.readFrame()
		if err != nil {
			return // closed by the client, or dropped by the test
		}
		d := &decoder{b: payload}
		switch typ {
		case frameMethod:
			class, id := d.u16(), d.u16()
			switch {
			case class == 10 && id == 11: // connection.start-ok: no heartbeats
				b.method(0, 10, 30, uint16(2047), uint32(131072), uint16(0))
			case class == 10 && id == 31: // connection.tune-ok
			case class == 10 && id == 40: // connection.open
				b.method(0, 10, 41, "")
			case class == 10 && id == 50: // connection.close
				b.method(0, 10, 51)
				return
			case class == 20 && id == 10:
				b.logf("channel.open %d", ch)
				b.method(ch, 20, 11, longstr(""))
			case class == 20 && id == 40:
				b.logf("channel.close %d", ch)
				b.closed(ch)
				b.method(ch, 20, 41)
			case class == 20 && id == 41: // the client's answer to closeChannel
				b.logf("channel.close-ok %d", ch)
				b.closed(ch)
			case class == 85 && id == 10:
				b.logf("confirm.select %d", ch)
				if b.refuseConfirm.Load() {
					b.closeChannel(ch, 540, "NOT_IMPLEMENTED")
					continue
				}
				b.mu.Lock()
				b.tags[ch] = 0
				b.mu.Unlock()
				b.method(ch, 85, 11)
			case class == 60 && id == 40: // basic.publish
				d.u16() // reserved
				pub = &publishing{channel: ch, exchange: d.shortstr(), key: d.shortstr()}
				pub.mandatory = d.u8()&1 != 0
			default:
				b.t.Errorf("fake broker: unexpected method %d.%d on channel %d", class, id, ch)
			}
		case frameHeader:
			d.u16() // class
			d.u16() // weight
			size = int(d.u64())
			flags := d.u16()
			if flags&^0x9090 != 0 {
				b.t.Errorf("fake broker: property flags %#x beyond content type, delivery mode, message id and user id", flags)
			}
			if flags&0x8000 != 0 {
				pub.msg.ContentType = d.shortstr()
			}
			if flags&0x1000 != 0 {
				pub.msg.DeliveryMode = d.u8()
			}
			if flags&0x0080 != 0 {
				pub.msg.MessageId = d.shortstr()
			}
			if flags&0x0010 != 0 { // after message id: timestamp and type are never set
				pub.msg.UserId = d.shortstr()
			}
			pub.msg.Body = make([]byte, 0, size)
			if size == 0 {
				b.published(pub)
			}
		case frameBody:
			pub.msg.Body = append(pub.msg.Body, payload...)
			if len(pub.msg.Body) >= size {
				b.published(pub)
			}
		default:
			b.t.Errorf("fake broker: unexpected frame type %d", typ)
		}
		if d.err != nil {
			b.t.Errorf("fake broker: short frame: %v", d.err)
		}
	}
}

// published numbers a complete publish as the broker does in confirm mode and hands it over.
func (b *fakeBroker) published(p *publishing) {
	b.mu.Lock()
	b.tags[p.channel]++
	p.tag = b.tags[p.channel]
	if b.unconf[p.channel] > 0 {
		b.t.Errorf("fake broker: publish %d on channel %d while an earlier one awaits its confirm", p.tag, p.channel)
	}
	b.unconf[p.channel]++
	b.mu.Unlock()
	b.publishes <- *p
}
