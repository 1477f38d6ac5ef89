package service

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/ops"
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
