package devserver

import (
	"context"
	"os"
	"testing"
	"time"
)

// StartForTest returns a dev server for an integration test. When TEMPORAL_ADDRESS is
// set (`make test` starts one server and sets it, so packages share it) it returns a
// Server naming that address (namespace $TEMPORAL_NAMESPACE, else "default") and starts
// nothing; Owned is then false and Kill/Restart return ErrNotOwned. Otherwise it starts
// a headless server on a free port with a temporary DB and stops it in tb.Cleanup.
func StartForTest(tb testing.TB) *Server {
	tb.Helper()
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		ns := os.Getenv("TEMPORAL_NAMESPACE")
		if ns == "" {
			ns = "default"
		}
		return &Server{Address: addr, Namespace: ns}
	}
	return StartOwnedForTest(tb)
}

// StartOwnedForTest always starts a private headless server (for tests that kill or
// restart it), stopped in tb.Cleanup. On failure the test's log shows where the
// server's output is.
func StartOwnedForTest(tb testing.TB) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout+10*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{UIPort: -1})
	if err != nil {
		tb.Fatalf("start the Temporal dev server: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("Temporal dev server %s:\n%s", s.Address, tail(s.LogFile, 30))
		}
		if err := s.Stop(); err != nil {
			tb.Errorf("stop the Temporal dev server: %v", err)
		}
	})
	return s
}
