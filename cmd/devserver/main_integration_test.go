//go:build integration

package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

// A healthy frontend already on the port is reused: exit 0, nothing started.
func TestReuseRunningServer(t *testing.T) {
	s := devserver.StartForTest(t)
	_, port, err := net.SplitHostPort(s.Address)
	require.NoError(t, err)
	addrFile := filepath.Join(t.TempDir(), "addr")
	var out, errb bytes.Buffer
	code := run([]string{"-port", port, "-namespace", s.Namespace, "-addr-file", addrFile}, &out, &errb)
	assert.Equal(t, 0, code, errb.String())
	assert.Contains(t, out.String(), "reusing it")
	b, err := os.ReadFile(addrFile)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:"+port, strings.TrimSpace(string(b)))
}

// -for-test starts a server, writes its address, and stops it (removing the temp DB)
// on SIGTERM.
func TestForTestMode(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr")
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-for-test", "-addr-file", addrFile}, &out, &errb) }()
	var addr string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	}, 90*time.Second, 100*time.Millisecond)
	require.NoError(t, devserver.CheckHealth(t.Context(), addr, "default"))

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		assert.Equal(t, 0, code, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatal("devserver did not stop on SIGTERM")
	}
	assert.NoFileExists(t, addrFile)
	assert.Error(t, devserver.CheckHealth(t.Context(), addr, "default"))
}

// -engine postgres -for-test: a Temporal server on temporary PostgreSQL databases, its
// address written when ready, stopped (and the databases dropped) on SIGTERM.
func TestForTestModePostgres(t *testing.T) {
	if _, err := os.Stat(filepath.Join(devserver.DefaultServerDir(), "bin", "server")); err != nil {
		testenv.Missing(t, "no Temporal server binaries (make temporal-server): %v", err)
	}
	addrFile := filepath.Join(t.TempDir(), "addr")
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-engine", "postgres", "-for-test", "-addr-file", addrFile}, &out, &errb) }()
	var addr string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	}, 5*time.Minute, 100*time.Millisecond, "%s", &errb)
	require.NoError(t, devserver.CheckHealth(t.Context(), addr, "default"))
	store, err := devserver.PersistenceStore(t.Context(), addr)
	require.NoError(t, err)
	assert.Equal(t, devserver.PostgresPlugin, store)

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		assert.Equal(t, 0, code, errb.String())
	case <-time.After(time.Minute):
		t.Fatal("devserver did not stop on SIGTERM")
	}
	assert.Contains(t, out.String(), "on PostgreSQL ready")
	assert.Contains(t, out.String(), "temporary, dropped at stop")
	assert.NoFileExists(t, addrFile)
	assert.Error(t, devserver.CheckHealth(t.Context(), addr, "default"))
}

// -engine postgres does not reuse a frontend on another store.
func TestPostgresRefusesOtherStore(t *testing.T) {
	s := devserver.StartForTest(t)
	store, err := devserver.PersistenceStore(t.Context(), s.Address)
	require.NoError(t, err)
	if store == devserver.PostgresPlugin {
		t.Skip("the shared server is on PostgreSQL")
	}
	_, port, err := net.SplitHostPort(s.Address)
	require.NoError(t, err)
	var out, errb bytes.Buffer
	code := run([]string{"-engine", "postgres", "-port", port, "-namespace", s.Namespace}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "is not on PostgreSQL")
}
