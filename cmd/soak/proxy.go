package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy is a loopback TCP proxy between one kind of service connection and its upstream
// (RabbitMQ or the Temporal frontend). It can delay every chunk in both directions, cut
// every connection, refuse connections for a period (a partition), and, for AMQP, cut a
// connection at the moment the broker sends a publisher confirm, dropping the confirm.
type proxy struct {
	name     string
	upstream string
	amqp     bool // parse the upstream→client stream as AMQP frames (for confirm cuts)
	ln       net.Listener
	log      *slog.Logger

	latency atomic.Int64 // per direction, nanoseconds
	down    atomic.Bool  // refuse new connections

	// confirmCuts > 0 arms the proxy: a link on which the broker sends basic.ack is cut
	// before the ack reaches the client; each such cut decrements it. The proxies of one
	// group share it, so that a group is armed for n cuts whichever node they happen on.
	confirmCuts *atomic.Int64

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, refused, cut, confirmsDropped atomic.Int64
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		// Linger 0: the peer sees a reset, as after a network failure, not an orderly close.
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// startProxy listens on a free loopback port and forwards to upstream; cuts is the armed
// confirm cuts it shares with its group.
func startProxy(name, upstream string, amqp bool, cuts *atomic.Int64, log *slog.Logger) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy %s: listen: %w", name, err)
	}
	p := &proxy{name: name, upstream: upstream, amqp: amqp, confirmCuts: cuts, ln: ln, log: log.With("proxy", name), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address the service connects to.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if p.down.Load() {
			p.refused.Add(1)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		p.refused.Add(1)
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed || p.down.Load() {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, client, server, nil) }()
	go func() {
		defer wg.Done()
		var fs *frameScanner
		if p.amqp {
			fs = &frameScanner{}
		}
		p.pump(l, server, client, fs)
	}()
	wg.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is bytes read from one side, due for writing to the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst, holding each chunk for the current latency. Order is kept: a
// reader queues chunks, a writer sleeps until each one is due. fs, when set, watches the
// stream for basic.ack frames (upstream→client only).
func (p *proxy) pump(l *link, src, dst net.Conn, fs *frameScanner) {
	queue := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				l.close()
				for range queue { // let the reader finish
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			if fs != nil && fs.scan(data) && p.takeConfirmCut() {
				p.confirmsDropped.Add(1)
				p.cut.Add(1)
				p.log.Info("cut a connection at a publisher confirm")
				l.close()
				break
			}
			queue <- chunk{data: data, due: time.Now().Add(time.Duration(p.latency.Load()))}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.log.Debug("read", "error", err)
			}
			break
		}
	}
	close(queue)
	<-done
	l.close()
}

func (p *proxy) takeConfirmCut() bool {
	for {
		n := p.confirmCuts.Load()
		if n <= 0 {
			return false
		}
		if p.confirmCuts.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// setLatency delays every chunk by d in each direction (0 turns it off).
func (p *proxy) setLatency(d time.Duration) { p.latency.Store(int64(d)) }

// cutAll resets every current connection; clients reconnect through the proxy.
func (p *proxy) cutAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.cut.Add(int64(len(links)))
	return len(links)
}

// partition cuts every connection and refuses new ones until heal.
func (p *proxy) partition() int {
	p.down.Store(true)
	return p.cutAll()
}

func (p *proxy) heal() { p.down.Store(false) }

// Close stops listening and cuts every connection.
func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}

// frameScanner follows AMQP 0-9-1 frames (type, channel, size, payload, 0xCE) in a byte
// stream and reports chunks that contain the start of a basic.ack method frame (class 60,
// method 80): the broker's publisher confirm.
type frameScanner struct {
	hdr     [7]byte
	hdrN    int
	remain  int // payload bytes + frame-end byte still to skip in the current frame
	method  [4]byte
	methodN int
	isMeth  bool
}

func (f *frameScanner) scan(b []byte) (sawAck bool) {
	for len(b) > 0 {
		if f.remain == 0 {
			// Reading a frame header.
			k := copy(f.hdr[f.hdrN:], b)
			f.hdrN += k
			b = b[k:]
			if f.hdrN < 7 {
				return sawAck
			}
			f.hdrN = 0
			size := int(f.hdr[3])<<24 | int(f.hdr[4])<<16 | int(f.hdr[5])<<8 | int(f.hdr[6])
			f.remain = size + 1
			f.isMeth = f.hdr[0] == 1
			f.methodN = 0
			continue
		}
		if f.isMeth && f.methodN < 4 {
			k := min(4-f.methodN, len(b), f.remain)
			copy(f.method[f.methodN:], b[:k])
			f.methodN += k
			f.remain -= k
			b = b[k:]
			if f.methodN == 4 {
				class := int(f.method[0])<<8 | int(f.method[1])
				method := int(f.method[2])<<8 | int(f.method[3])
				if class == 60 && method == 80 {
					sawAck = true
				}
			}
			continue
		}
		k := min(f.remain, len(b))
		f.remain -= k
		b = b[k:]
	}
	return sawAck
}
