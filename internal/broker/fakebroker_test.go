package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// This file is a stand-in for RabbitMQ at the far end of an in-memory pipe (through dialNet):
// just enough AMQP 0-9-1 for amqp091 to open a connection and channels, enable confirms,
// declare queues and publish, with hooks that answer the way a broker does (ack, nack,
// basic.return, channel.close, connection.blocked). It lets unit tests check what the
// Publisher, Declare and Dial make of each answer, without a network or a broker.

// AMQP 0-9-1 frame types.
const (
	frameMethod    = 1
	frameHeader    = 2
	frameBody      = 3
	frameHeartbeat = 8
	frameEnd       = 0xCE
)

// methodID is an AMQP method's class and method id.
type methodID struct{ class, method uint16 }

var (
	mConnStart       = methodID{10, 10}
	mConnStartOk     = methodID{10, 11}
	mConnTune        = methodID{10, 30}
	mConnTuneOk      = methodID{10, 31}
	mConnOpen        = methodID{10, 40}
	mConnOpenOk      = methodID{10, 41}
	mConnClose       = methodID{10, 50}
	mConnCloseOk     = methodID{10, 51}
	mConnBlocked     = methodID{10, 60}
	mConnUnblocked   = methodID{10, 61}
	mChanOpen        = methodID{20, 10}
	mChanOpenOk      = methodID{20, 11}
	mChanClose       = methodID{20, 40}
	mChanCloseOk     = methodID{20, 41}
	mQueueDeclare    = methodID{50, 10}
	mQueueDeclareOk  = methodID{50, 11}
	mBasicPublish    = methodID{60, 40}
	mBasicReturn     = methodID{60, 50}
	mBasicAck        = methodID{60, 80}
	mBasicNack       = methodID{60, 120}
	mConfirmSelect   = methodID{85, 10}
	mConfirmSelectOk = methodID{85, 11}
)

// fakeFrameMax is the frame size the fake broker tunes: RabbitMQ's default.
const fakeFrameMax = 131072

// fakePublish is a message the fake broker received.
type fakePublish struct {
	Conn      int // index of the connection, in dial order
	Channel   uint16
	Tag       uint64 // delivery tag in confirm mode, else 0
	Exchange  string
	Key       string
	Mandatory bool
	Body      []byte
	size      uint64 // the body size its content header announced, while the body comes in
}

// fakeDeclare is a queue.declare the fake broker received.
type fakeDeclare struct {
	Channel uint16
	Queue   string
	Passive bool
	Durable bool
	Args    map[string]any
}

// fakeBroker accepts every dial through dialNet for the test's duration.
type fakeBroker struct {
	t *testing.T

	// Hooks answering a request, run on the connection's reader goroutine; nil answers as
	// RabbitMQ usually does. Set them before the first dial.
	onPublish       func(fc *fakeConn, p fakePublish) // default: ack (in confirm mode)
	onDeclare       func(fc *fakeConn, d fakeDeclare) // default: declare-ok
	onChannelOpen   func(fc *fakeConn, ch uint16)     // default: open-ok
	onConfirmSelect func(fc *fakeConn, ch uint16)     // default: select-ok
	onConnClose     func(fc *fakeConn)                // default: close-ok
	// down holds the error of a dial to each address that is down.
	down map[string]error
	// tls, if set, makes the broker a TLS server (amqps).
	tls *tls.Config

	mu           sync.Mutex
	dialed       []string
	conns        []*fakeConn
	channels     []uint16 // ids of the channels opened, in order
	published    []fakePublish
	declared     []fakeDeclare
	clientProps  map[string]any
	clientCloses int
	wg           sync.WaitGroup
}

// newFakeBroker makes dialNet reach a fake broker until the test ends, then closes every
// connection it still has and waits for its goroutines. It swaps a package variable: a test
// using it must not run in parallel.
func newFakeBroker(t *testing.T) *fakeBroker {
	b := &fakeBroker{t: t, down: map[string]error{}}
	old := dialNet
	dialNet = b.dial
	t.Cleanup(func() {
		dialNet = old
		b.mu.Lock()
		conns := b.conns
		b.mu.Unlock()
		for _, fc := range conns {
			_ = fc.c.Close()
		}
		b.wg.Wait()
	})
	return b
}

func (b *fakeBroker) dial(_ *net.Dialer, _, addr string) (net.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dialed = append(b.dialed, addr)
	if err := b.down[addr]; err != nil {
		return nil, err
	}
	client, server := net.Pipe()
	fc := &fakeConn{b: b, index: len(b.conns), c: server, out: make(chan []byte, 256), stream: make(chan io.Writer, 1), done: make(chan struct{}),
		confirming: map[uint16]bool{}, tags: map[uint16]uint64{}, pending: map[uint16]*fakePublish{}}
	b.conns = append(b.conns, fc)
	b.wg.Add(2)
	go fc.serve()
	go fc.writeLoop()
	return client, nil
}

// conn is the i-th connection dialed.
func (b *fakeBroker) conn(i int) *fakeConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= len(b.conns) {
		b.t.Fatalf("fake broker: connection %d not dialed (%d were)", i, len(b.conns))
	}
	return b.conns[i]
}

func (b *fakeBroker) dials() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialed...)
}

func (b *fakeBroker) opens() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.channels)
}

// lastChannel is the id of the channel opened last.
func (b *fakeBroker) lastChannel() uint16 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.channels) == 0 {
		b.t.Fatal("fake broker: no channel opened")
	}
	return b.channels[len(b.channels)-1]
}

func (b *fakeBroker) publishes() []fakePublish {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]fakePublish(nil), b.published...)
}

func (b *fakeBroker) declares() []fakeDeclare {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]fakeDeclare(nil), b.declared...)
}

func (b *fakeBroker) closesByClient() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clientCloses
}

// fakeConn is one connection of the fake broker.
type fakeConn struct {
	b      *fakeBroker
	index  int
	c      net.Conn
	out    chan []byte // frames to write, in order
	stream chan io.Writer
	done   chan struct{}

	// Owned by the reader goroutine (serve and the hooks).
	confirming map[uint16]bool
	tags       map[uint16]uint64
	pending    map[uint16]*fakePublish
}

func (fc *fakeConn) serve() {
	defer fc.b.wg.Done()
	defer close(fc.done)
	defer func() { _ = fc.c.Close() }()
	var rw io.ReadWriter = fc.c
	if fc.b.tls != nil {
		tc := tls.Server(fc.c, fc.b.tls)
		if err := tc.Handshake(); err != nil {
			return // the client says why
		}
		rw = tc
	}
	fc.stream <- rw // the writer's stream: the TLS one once the handshake is done
	r := bufio.NewReader(rw)
	header := make([]byte, 8)
	if _, err := io.ReadFull(r, header); err != nil {
		return
	}
	if string(header) != "AMQP\x00\x00\x09\x01" {
		fc.b.t.Errorf("fake broker: protocol header %q", header)
		return
	}
	fc.method(0, mConnStart, new(wire).u8(0).u8(9).emptyTable().long("PLAIN").long("en_US"))
	for {
		typ, ch, payload, err := readFrame(r)
		if err != nil {
			return
		}
		fc.frame(typ, ch, payload)
	}
}

func (fc *fakeConn) writeLoop() {
	defer fc.b.wg.Done()
	var w io.Writer
	select {
	case w = <-fc.stream:
	case <-fc.done:
		return
	}
	for {
		select {
		case f := <-fc.out:
			if _, err := w.Write(f); err != nil {
				return
			}
		case <-fc.done:
			return
		}
	}
}

func (fc *fakeConn) frame(typ byte, ch uint16, payload []byte) {
	switch typ {
	case frameHeartbeat:
	case frameMethod:
		r := &wireReader{b: payload}
		id := methodID{r.u16(), r.u16()}
		fc.request(ch, id, r)
	case frameHeader:
		p := fc.pending[ch]
		if p == nil {
			fc.b.t.Errorf("fake broker: content header without a publish on channel %d", ch)
			return
		}
		r := &wireReader{b: payload}
		r.u16() // class
		r.u16() // weight
		p.size = r.u64()
		if p.size == 0 {
			fc.publishDone(ch)
		}
	case frameBody:
		p := fc.pending[ch]
		if p == nil {
			fc.b.t.Errorf("fake broker: body without a publish on channel %d", ch)
			return
		}
		p.Body = append(p.Body, payload...)
		if uint64(len(p.Body)) >= p.size {
			fc.publishDone(ch)
		}
	default:
		fc.b.t.Errorf("fake broker: frame type %d", typ)
	}
}

func (fc *fakeConn) request(ch uint16, id methodID, r *wireReader) {
	b := fc.b
	switch id {
	case mConnStartOk:
		props := r.table()
		b.mu.Lock()
		b.clientProps = props
		b.mu.Unlock()
		// channel-max 0 and heartbeat 0: the client's choice stands.
		fc.method(0, mConnTune, new(wire).u16(0).u32(fakeFrameMax).u16(0))
	case mConnTuneOk:
	case mConnOpen:
		fc.method(0, mConnOpenOk, new(wire).short(""))
	case mConnClose:
		b.mu.Lock()
		b.clientCloses++
		b.mu.Unlock()
		if b.onConnClose != nil {
			b.onConnClose(fc)
			return
		}
		fc.method(0, mConnCloseOk, nil)
	case mConnCloseOk: // to the broker's own close: the connection is over
		_ = fc.c.Close()
	case mChanOpen:
		b.mu.Lock()
		b.channels = append(b.channels, ch)
		b.mu.Unlock()
		if b.onChannelOpen != nil {
			b.onChannelOpen(fc, ch)
			return
		}
		fc.method(ch, mChanOpenOk, new(wire).long(""))
	case mChanClose:
		fc.forget(ch)
		fc.method(ch, mChanCloseOk, nil)
	case mChanCloseOk: // to the broker's own close
		fc.forget(ch)
	case mConfirmSelect:
		if r.u8()&1 != 0 {
			b.t.Errorf("fake broker: confirm.select no-wait")
		}
		if b.onConfirmSelect != nil {
			b.onConfirmSelect(fc, ch)
			return
		}
		fc.ConfirmOK(ch)
	case mQueueDeclare:
		r.u16() // reserved
		d := fakeDeclare{Channel: ch, Queue: r.short()}
		bits := r.u8()
		d.Passive, d.Durable = bits&1 != 0, bits&2 != 0
		d.Args = r.table()
		b.mu.Lock()
		b.declared = append(b.declared, d)
		b.mu.Unlock()
		if b.onDeclare != nil {
			b.onDeclare(fc, d)
			return
		}
		fc.DeclareOK(d)
	case mBasicPublish:
		r.u16() // reserved
		p := &fakePublish{Conn: fc.index, Channel: ch, Exchange: r.short(), Key: r.short()}
		p.Mandatory = r.u8()&1 != 0
		fc.pending[ch] = p
	default:
		b.t.Errorf("fake broker: unexpected method %d.%d on channel %d", id.class, id.method, ch)
	}
	if r.err != nil {
		b.t.Errorf("fake broker: method %d.%d: %v", id.class, id.method, r.err)
	}
}

func (fc *fakeConn) forget(ch uint16) {
	delete(fc.confirming, ch)
	delete(fc.tags, ch)
	delete(fc.pending, ch)
}

func (fc *fakeConn) publishDone(ch uint16) {
	p := fc.pending[ch]
	delete(fc.pending, ch)
	p.size = 0 // bookkeeping of the fake, not part of the message
	if fc.confirming[ch] {
		fc.tags[ch]++
		p.Tag = fc.tags[ch]
	}
	fc.b.mu.Lock()
	fc.b.published = append(fc.b.published, *p)
	fc.b.mu.Unlock()
	if fc.b.onPublish != nil {
		fc.b.onPublish(fc, *p)
		return
	}
	if p.Tag != 0 {
		fc.Ack(ch, p.Tag)
	}
}

// What the broker says; safe from any goroutine.

func (fc *fakeConn) Ack(ch uint16, tag uint64) {
	fc.method(ch, mBasicAck, new(wire).u64(tag).u8(0))
}

func (fc *fakeConn) Nack(ch uint16, tag uint64) {
	fc.method(ch, mBasicNack, new(wire).u64(tag).u8(0))
}

// Return sends p back as basic.return (with an empty body).
func (fc *fakeConn) Return(p fakePublish, code uint16, text string) {
	fc.method(p.Channel, mBasicReturn, new(wire).u16(code).short(text).short(p.Exchange).short(p.Key))
	header := new(wire).u16(60).u16(0).u64(0).u16(0)
	fc.send(encodeFrame(frameHeader, p.Channel, header.Bytes()))
}

// CloseChannel closes ch, as the broker does on a channel-level error.
func (fc *fakeConn) CloseChannel(ch uint16, code uint16, text string) {
	fc.method(ch, mChanClose, new(wire).u16(code).short(text).u16(0).u16(0))
}

// CloseConnection closes the connection, as the broker does on a connection-level error or
// when an operator closes it.
func (fc *fakeConn) CloseConnection(code uint16, text string) {
	fc.method(0, mConnClose, new(wire).u16(code).short(text).u16(0).u16(0))
}

func (fc *fakeConn) Blocked(reason string) { fc.method(0, mConnBlocked, new(wire).short(reason)) }
func (fc *fakeConn) Unblocked()            { fc.method(0, mConnUnblocked, nil) }

func (fc *fakeConn) ChannelOpenOK(ch uint16) { fc.method(ch, mChanOpenOk, new(wire).long("")) }

// ConfirmOK puts ch in confirm mode; only the reader goroutine (a hook) may call it.
func (fc *fakeConn) ConfirmOK(ch uint16) {
	fc.confirming[ch] = true
	fc.method(ch, mConfirmSelectOk, nil)
}

func (fc *fakeConn) DeclareOK(d fakeDeclare) {
	fc.method(d.Channel, mQueueDeclareOk, new(wire).short(d.Queue).u32(0).u32(0))
}

func (fc *fakeConn) method(ch uint16, id methodID, args *wire) {
	payload := new(wire).u16(id.class).u16(id.method)
	if args != nil {
		payload.Write(args.Bytes())
	}
	fc.send(encodeFrame(frameMethod, ch, payload.Bytes()))
}

// send queues f for the writer goroutine, so that the reader never waits on the client.
func (fc *fakeConn) send(f []byte) {
	select {
	case fc.out <- f:
	case <-fc.done:
	}
}

func encodeFrame(typ byte, ch uint16, payload []byte) []byte {
	f := []byte{typ}
	f = binary.BigEndian.AppendUint16(f, ch)
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	f = append(f, payload...)
	return append(f, frameEnd)
}

func readFrame(r io.Reader) (typ byte, ch uint16, payload []byte, err error) {
	var h [7]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	size := binary.BigEndian.Uint32(h[3:])
	if size > fakeFrameMax {
		return 0, 0, nil, fmt.Errorf("frame of %d bytes", size)
	}
	buf := make([]byte, size+1)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, 0, nil, err
	}
	if buf[size] != frameEnd {
		return 0, 0, nil, errors.New("no frame end")
	}
	return h[0], binary.BigEndian.Uint16(h[1:3]), buf[:size], nil
}

// wire encodes AMQP fields.
type wire struct{ bytes.Buffer }

func (w *wire) u8(v uint8) *wire   { w.WriteByte(v); return w }
func (w *wire) u16(v uint16) *wire { w.Write(binary.BigEndian.AppendUint16(nil, v)); return w }
func (w *wire) u32(v uint32) *wire { w.Write(binary.BigEndian.AppendUint32(nil, v)); return w }
func (w *wire) u64(v uint64) *wire { w.Write(binary.BigEndian.AppendUint64(nil, v)); return w }
func (w *wire) short(s string) *wire {
	w.u8(uint8(len(s)))
	w.WriteString(s)
	return w
}
func (w *wire) long(s string) *wire {
	w.u32(uint32(len(s)))
	w.WriteString(s)
	return w
}
func (w *wire) emptyTable() *wire { return w.u32(0) }

// wireReader decodes AMQP fields; the first shortfall is kept in err.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) take(n int) []byte {
	if r.err != nil || len(r.b) < n {
		if r.err == nil {
			r.err = io.ErrUnexpectedEOF
		}
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *wireReader) u8() uint8     { return r.take(1)[0] }
func (r *wireReader) u16() uint16   { return binary.BigEndian.Uint16(r.take(2)) }
func (r *wireReader) u32() uint32   { return binary.BigEndian.Uint32(r.take(4)) }
func (r *wireReader) u64() uint64   { return binary.BigEndian.Uint64(r.take(8)) }
func (r *wireReader) short() string { return string(r.take(int(r.u8()))) }
func (r *wireReader) long() string  { return string(r.take(int(r.u32()))) }

// table decodes a field table of the value types the client sends: strings, booleans,
// integers and nested tables.
func (r *wireReader) table() map[string]any {
	n := r.u32()
	if r.err == nil && uint32(len(r.b)) < n {
		r.err = io.ErrUnexpectedEOF
		return nil
	}
	t := &wireReader{b: r.take(int(n))}
	m := map[string]any{}
	for len(t.b) > 0 && t.err == nil {
		k := t.short()
		switch typ := t.u8(); typ {
		case 'S':
			m[k] = t.long()
		case 't':
			m[k] = t.u8() != 0
		case 'I':
			m[k] = int32(t.u32())
		case 'l':
			m[k] = int64(t.u64())
		case 'F':
			m[k] = t.table()
		default:
			t.err = fmt.Errorf("field %q: type %q not decoded", k, typ)
		}
	}
	if t.err != nil && r.err == nil {
		r.err = t.err
	}
	return m
}

// logRecorder hands each log record to the test: how a test waits for what a Publisher's
// goroutine did (its connection watcher has no other outcome to wait for).
type logRecorder struct{ records chan slog.Record }

func newLogRecorder() *logRecorder { return &logRecorder{records: make(chan slog.Record, 1000)} }

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.records <- r.Clone()
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// wait returns the next record with message msg, skipping others.
func (h *logRecorder) wait(t *testing.T, msg string) slog.Record {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-h.records:
			if r.Message == msg {
				return r
			}
		case <-timeout:
			t.Fatalf("no log %q within 10s", msg)
		}
	}
}

// attr is the value of r's attribute key, as text.
func attr(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}
