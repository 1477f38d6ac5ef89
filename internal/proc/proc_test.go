package proc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func shell(t *testing.T, script string) Command {
	t.Helper()
	return Command{Name: "sh", Path: "/bin/sh", Args: []string{"-c", script}, LogPath: filepath.Join(t.TempDir(), "out.log")}
}

func TestOutputAndBannerGoToTheLog(t *testing.T) {
	c := shell(t, "echo out; echo err >&2")
	c.Banner = "== run 1\n"
	p, err := Start(c)
	require.NoError(t, err)
	<-p.Done()
	require.NoError(t, p.Err())
	b, err := os.ReadFile(c.LogPath)
	require.NoError(t, err)
	assert.Equal(t, "== run 1\nout\nerr\n", string(b))

	// A second run appends.
	c.Banner = "== run 2\n"
	p, err = Start(c)
	require.NoError(t, err)
	<-p.Done()
	b, _ = os.ReadFile(c.LogPath)
	assert.Equal(t, 2, strings.Count(string(b), "out\n"))
	assert.True(t, strings.HasPrefix(string(b), "== run 1\n"))
}

func TestStopEndsAProcessThatHonoursSIGTERM(t *testing.T) {
	// exec: the shell's own SIGTERM handling would wait for the child.
	p, err := Start(shell(t, "exec sleep 60"))
	require.NoError(t, err)
	require.NoError(t, p.Stop(10*time.Second))
	assert.True(t, p.Exited())
	assert.Error(t, p.Err(), "ended by a signal")
	require.NoError(t, p.Stop(time.Second), "stopping twice is harmless")
}

func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	c := shell(t, "trap '' TERM; echo armed; while :; do sleep 0.05; done")
	p, err := Start(c)
	require.NoError(t, err)
	// Wait until the trap is set, else SIGTERM could arrive before it.
	require.NoError(t, p.AwaitReady(context.Background(), 10*time.Millisecond, func(context.Context) error {
		if b, _ := os.ReadFile(c.LogPath); strings.Contains(string(b), "armed") {
			return nil
		}
		return errors.New("not armed yet")
	}))
	err = p.Stop(200 * time.Millisecond)
	require.ErrorIs(t, err, ErrKilled)
	assert.True(t, p.Exited())
}

func TestKill(t *testing.T) {
	p, err := Start(shell(t, "exec sleep 60"))
	require.NoError(t, err)
	require.NoError(t, p.Kill())
	assert.True(t, p.Exited())
	assert.Contains(t, p.Err().Error(), "killed")
}

func TestAwaitReady(t *testing.T) {
	ctx := context.Background()
	t.Run("ready after a few probes", func(t *testing.T) {
		p, err := Start(shell(t, "exec sleep 60"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Kill() })
		var calls atomic.Int32
		require.NoError(t, p.AwaitReady(ctx, time.Millisecond, func(context.Context) error {
			if calls.Add(1) < 3 {
				return errors.New("not yet")
			}
			return nil
		}))
		assert.EqualValues(t, 3, calls.Load())
	})
	t.Run("the process exits", func(t *testing.T) {
		c := shell(t, "echo boom; exit 3")
		p, err := Start(c)
		require.NoError(t, err)
		<-p.Done()
		err = p.AwaitReady(ctx, time.Millisecond, func(context.Context) error { return errors.New("never") })
		require.ErrorIs(t, err, ErrNotReady)
		assert.Contains(t, err.Error(), "exited during start-up")
		assert.Contains(t, err.Error(), c.LogPath)
	})
	t.Run("a permanent error ends the wait", func(t *testing.T) {
		p, err := Start(shell(t, "exec sleep 60"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Kill() })
		wrong := errors.New("wrong type")
		err = p.AwaitReady(ctx, time.Millisecond, func(context.Context) error { return Permanent(wrong) })
		require.ErrorIs(t, err, wrong)
		require.ErrorIs(t, err, ErrNotReady)
	})
	t.Run("the context ends", func(t *testing.T) {
		p, err := Start(shell(t, "exec sleep 60"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Kill() })
		ctx, cancel := context.WithCancel(ctx)
		var calls atomic.Int32
		err = p.AwaitReady(ctx, time.Millisecond, func(context.Context) error {
			if calls.Add(1) == 2 {
				cancel()
			}
			return errors.New("still starting")
		})
		require.ErrorIs(t, err, ErrNotReady)
		assert.Contains(t, err.Error(), "still starting")
	})
}

func TestHTTPReady(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusServiceUnavailable)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	probe := HTTPReady(srv.URL + "/readyz")
	assert.ErrorContains(t, probe(context.Background()), "503")
	status.Store(http.StatusOK)
	assert.NoError(t, probe(context.Background()))
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 5 {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	assert.Equal(t, "--- "+p+" (last lines) ---\n3\n4", Tail(p, 2))
	assert.Empty(t, Tail(filepath.Join(t.TempDir(), "none"), 2))
}
