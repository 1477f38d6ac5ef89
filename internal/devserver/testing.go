package devserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/retry-scheduler/retry-scheduler/internal/proc"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

// StartForTest returns a dev server for an integration test. When TEMPORAL_ADDRESS is
// set (`make test` starts one server and sets it, so packages share it) it returns a
// Server naming that address (namespace $TEMPORAL_NAMESPACE, else "default"; engine
// $TEMPORAL_ENGINE) and starts nothing; Owned is then false and Kill/Restart return
// ErrNotOwned. Otherwise it starts one with StartOwnedForTest.
func StartForTest(tb testing.TB) *Server {
	tb.Helper()
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		ns := os.Getenv("TEMPORAL_NAMESPACE")
		if ns == "" {
			ns = "default"
		}
		engine, _ := ParseEngine(os.Getenv(EnvEngine))
		return &Server{Engine: engine, Address: addr, Namespace: ns}
	}
	return StartOwnedForTest(tb)
}

// StartOwnedForTest always starts a private headless server (for tests that kill or
// restart it), stopped in tb.Cleanup, on the engine $TEMPORAL_ENGINE names (OptionsFromEnv):
// the dev server with a temporary DB file, or the Temporal server on a temporary pair of
// PostgreSQL databases, dropped at the end. A postgres engine this machine cannot run (no
// binaries, no PostgreSQL) skips the test, or fails it under CI=true. On failure the
// test's log shows the end of the server's output.
func StartOwnedForTest(tb testing.TB) *Server {
	tb.Helper()
	o, err := OptionsFromEnv(os.Getenv)
	if err != nil {
		tb.Fatal(err)
	}
	return startOwnedForTest(tb, o)
}

// OptionsFromEnv are the Options of StartOwnedForTest: headless, on a free port, on the
// engine getenv(EnvEngine) names with the PostgreSQL of PostgresFromEnv.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	engine, err := ParseEngine(getenv(EnvEngine))
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", EnvEngine, err)
	}
	o := Options{Engine: engine, UIPort: -1}
	if engine == EnginePostgres {
		if o.Postgres, err = PostgresFromEnv(getenv); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

func startOwnedForTest(tb testing.TB, o Options) *Server {
	tb.Helper()
	timeout := ReadyTimeout + 10*time.Second
	if o.Engine == EnginePostgres {
		timeout = SchemaTimeout + PostgresReadyTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := Start(ctx, o)
	if err != nil {
		if errors.Is(err, ErrEngineUnavailable) {
			testenv.Missing(tb, "%s unavailable here: %v", o.Engine.ServerName(), err)
		}
		tb.Fatalf("start the %s: %v", o.Engine.ServerName(), err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("%s %s:\n%s", s.Engine.ServerName(), s.Address, proc.Tail(s.LogFile, 30))
		}
		if err := s.Stop(); err != nil {
			tb.Errorf("stop the %s: %v", s.Engine.ServerName(), err)
		}
	})
	return s
}

// DialForTest is a client of s for a test, with the SDK's logging discarded, closed when the
// test ends.
func (s *Server) DialForTest(tb testing.TB) client.Client {
	tb.Helper()
	c, err := client.Dial(client.Options{HostPort: s.Address, Namespace: s.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		tb.Fatalf("dial the Temporal server at %s: %v", s.Address, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// UniqueName is prefix-<8 random hex digits>: a task queue or queue name no other test run
// on a shared server uses.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}
