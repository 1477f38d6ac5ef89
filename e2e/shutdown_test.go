//go:build integration

package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/service"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A worker stopped while its republish waits for the broker's confirm lets the publish finish
// (WORKER_STOP_TIMEOUT > PUBLISH_TIMEOUT) and records it before it exits: the message arrives
// once, the workflow has the attempt, and the next worker does not publish it again.
//
// The worker reaches the broker through a proxy that, once armed, holds everything the broker
// sends for a while: the publish reaches the queue at once, its confirm comes late, and the
// worker is stopped in between.
func TestShutdownMidPublishLetsThePublishFinish(t *testing.T) {
	const confirmDelay = 2 * time.Second
	s := newStack(t)
	s.run("bridge")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)

	proxy := startLatencyProxy(t, brokerHostPort(t))
	cfg := s.cfg
	cfg.Mode = "worker"
	cfg.RabbitMQURL = proxy.url(t, brokertest.URL())
	port, err := freeport.Get()
	require.NoError(t, err)
	cfg.HTTPAddr = "127.0.0.1:" + strconv.Itoa(port)
	require.Greater(t, cfg.WorkerStopTimeout, cfg.PublishTimeout)
	require.Greater(t, cfg.PublishTimeout, 3*confirmDelay, "a channel open, confirm.select and the confirm, each delayed")

	var logA lockedBuffer
	ctxA, stopA := context.WithCancel(context.Background())
	defer stopA()
	doneA := make(chan error, 1)
	go func() { doneA <- service.Run(ctxA, cfg, jsonLogger(&logA)) }()

	// Warm up: the worker's publisher connects through the proxy.
	s.publishRetry(message.RetryMessage{MessageID: "warm", OriginalPayload: []byte("warm"), OriginalQueue: orders, ErrorReason: "503"})
	require.Equal(t, "warm", c.next(t, patience).MessageId)

	proxy.arm(confirmDelay)
	s.publishRetry(message.RetryMessage{MessageID: "m-1", OriginalPayload: []byte("in flight"), OriginalQueue: orders, ErrorReason: "503"})
	select {
	case <-proxy.publishSeen:
	case <-time.After(patience):
		t.Fatalf("the worker did not publish m-1 within %s", patience)
	}
	stoppedAt := time.Now()
	stopA()
	select {
	case err := <-doneA:
		require.NoError(t, err)
	case <-time.After(cfg.WorkerStopTimeout + patience):
		t.Fatalf("the worker did not stop within WORKER_STOP_TIMEOUT (%s) and %s", cfg.WorkerStopTimeout, patience)
	}
	took := time.Since(stoppedAt)
	t.Logf("worker stopped %s after the stop, with a publish whose confirm was %s away", took.Round(time.Millisecond), confirmDelay)
	assert.GreaterOrEqual(t, took, confirmDelay/2, "the worker stopped without waiting for the confirm")

	assert.Len(t, logLines(logA.String(), "activities", "retry republished", "m-1"), 1, "the stopping worker finished the publish")
	assert.Empty(t, logLines(logA.String(), "activities", "retry not republished", "m-1"))

	d := c.next(t, patience)
	require.Equal(t, "m-1", d.MessageId)
	require.Equal(t, "m-1:1", d.Headers["x-retry-key"])

	// A new worker takes over: the workflow already has the attempt, so it only waits for the
	// quiet window and ends delivered, without publishing again.
	var logB lockedBuffer
	cfgB := s.cfg
	cfgB.Mode = "worker"
	portB, err := freeport.Get()
	require.NoError(t, err)
	cfgB.HTTPAddr = "127.0.0.1:" + strconv.Itoa(portB)
	ctxB, stopB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- service.Run(ctxB, cfgB, jsonLogger(&logB)) }()
	defer func() { stopB(); <-doneB }()

	// The run ends delivered after the quiet window; a second publish would come before
	// that, and so ahead of the barrier.
	id := message.WorkflowID(orders, "m-1")
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status)
	c.caughtUp(t)
	st, err := s.state(id)
	require.NoError(t, err)
	assert.Equal(t, 1, st.RetryCount)
	require.Len(t, st.Attempts, 1)
	assert.False(t, st.Attempts[0].RepublishedAt.IsZero(), "the attempt is recorded as republished")
	assert.Equal(t, "m-1:1", st.Attempts[0].RetryKey)

	var keys []string
	for _, d := range c.all() {
		if d.MessageId == "m-1" {
			keys = append(keys, d.Headers["x-retry-key"].(string))
		}
	}
	assert.Equal(t, []string{"m-1:1"}, keys, "m-1 arrived once")
	assert.Empty(t, logLines(logB.String(), "activities", "retry republished", "m-1"), "the second worker published m-1 again")
}

// latencyProxy forwards TCP to a broker; once armed, everything the broker sends is held for a
// delay (latency, not a cut: order is kept), and the first basic.publish the client sends after
// arming is announced on publishSeen.
type latencyProxy struct {
	ln          net.Listener
	target      string
	delay       atomic.Int64
	armed       atomic.Bool
	publishSeen chan struct{}
	seenOnce    sync.Once
	wg          sync.WaitGroup
}

func startLatencyProxy(t *testing.T, target string) *latencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &latencyProxy{ln: ln, target: target, publishSeen: make(chan struct{})}
	var conns sync.Map
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			conns.Store(client, server)
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.upstream(client, server) }()
			go func() { defer p.wg.Done(); p.downstream(server, client) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(k, v any) bool {
			_ = k.(net.Conn).Close()
			_ = v.(net.Conn).Close()
			return true
		})
		p.wg.Wait()
	})
	return p
}

func (p *latencyProxy) arm(delay time.Duration) {
	p.delay.Store(int64(delay))
	p.armed.Store(true)
}

// url is raw with its host:port replaced by the proxy's.
func (p *latencyProxy) url(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// upstream copies client → broker at once, watching the frames for basic.publish.
func (p *latencyProxy) upstream(client, server net.Conn) {
	defer server.Close()
	defer client.Close()
	var f frameScanner
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if f.scan(buf[:n]) && p.armed.Load() {
				p.seenOnce.Do(func() { close(p.publishSeen) })
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// downstream copies broker → client, each chunk held until its arrival plus the delay.
func (p *latencyProxy) downstream(server, client net.Conn) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	chunks := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer client.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.at))
			if _, err := client.Write(c.data); err != nil {
				for range chunks {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			chunks <- chunk{at: time.Now().Add(time.Duration(p.delay.Load())), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(chunks)
	wg.Wait()
}

// frameScanner follows an AMQP 0-9-1 client stream (protocol header, then frames of type,
// channel, size, payload, end octet) and reports whether a chunk held a basic.publish.
type frameScanner struct {
	headerDone bool
	pending    []byte
}

func (f *frameScanner) scan(b []byte) (publish bool) {
	f.pending = append(f.pending, b...)
	if !f.headerDone {
		if len(f.pending) < 8 {
			return false
		}
		f.pending, f.headerDone = f.pending[8:], true
	}
	for len(f.pending) >= 7 {
		size := int(binary.BigEndian.Uint32(f.pending[3:7]))
		if len(f.pending) < 7+size+1 {
			break
		}
		payload := f.pending[7 : 7+size]
		if f.pending[0] == 1 && size >= 4 && binary.BigEndian.Uint16(payload[0:2]) == 60 && binary.BigEndian.Uint16(payload[2:4]) == 40 {
			publish = true
		}
		f.pending = f.pending[7+size+1:]
	}
	return publish
}

func brokerHostPort(t *testing.T) string {
	u, err := url.Parse(brokertest.URL())
	require.NoError(t, err)
	if u.Port() == "" {
		return u.Hostname() + ":5672"
	}
	return u.Host
}

// logLines are the JSON log records of a component with a message and a message id.
func logLines(logs, component, msg, messageID string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["component"] == component && rec["msg"] == msg && rec["message_id"] == messageID {
			out = append(out, rec)
		}
	}
	return out
}

// jsonLogger logs at debug, as JSON, to w.
func jsonLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
