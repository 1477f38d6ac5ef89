package service

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/ops"
)

// The ops HTTP server bounds every phase of a connection, and its write timeout leaves the
// longest bounded API call room to answer.
func TestHTTPServerHasTimeouts(t *testing.T) {
	srv := newHTTPServer("127.0.0.1:0", http.NotFoundHandler())
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.GreaterOrEqual(t, srv.ReadTimeout, srv.ReadHeaderTimeout)
	assert.Greater(t, srv.WriteTimeout, ops.BoundedCallTimeout, "a bulk call must be able to answer")
	assert.Positive(t, srv.IdleTimeout)
}

// A request still in flight when the shutdown's wait ends is cut and logged: the process
// stops as asked without an error.
func TestHTTPShutdownCutsARequestThatOutlastsItsWait(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	srv := newHTTPServer("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	<-started

	var logs bytes.Buffer
	require.NoError(t, shutdownHTTP(srv, 50*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil))))
	assert.Contains(t, logs.String(), "cut")
	assert.ErrorIs(t, <-served, http.ErrServerClosed)
	assert.Error(t, <-answered, "the request was cut")
}

// A shutdown with nothing in flight is quiet.
func TestHTTPShutdownWithNothingInFlight(t *testing.T) {
	srv := newHTTPServer("127.0.0.1:0", http.NotFoundHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var logs bytes.Buffer
	require.NoError(t, shutdownHTTP(srv, time.Second, slog.New(slog.NewTextHandler(&logs, nil))))
	assert.ErrorIs(t, <-served, http.ErrServerClosed)
	assert.Empty(t, logs.String())
}
