package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 0, run([]string{"-h"}, &out, &errb))
	assert.Contains(t, errb.String(), "-for-test")
	assert.Equal(t, 2, run([]string{"-nope"}, &out, &errb))
	assert.Equal(t, 2, run([]string{"extra"}, &out, &errb))
	assert.Equal(t, 2, run([]string{"-engine", "mysql"}, &out, &errb))
	assert.Contains(t, errb.String(), `unknown engine "mysql"`)
}

func TestPostgresFlags(t *testing.T) {
	t.Setenv("TEMPORAL_POSTGRES_PORT", "nope")
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run([]string{"-engine", "postgres"}, &out, &errb))
	assert.Contains(t, errb.String(), "TEMPORAL_POSTGRES_PORT")

	// Missing binaries: exit 1 with the way to install them.
	t.Setenv("TEMPORAL_POSTGRES_PORT", "")
	errb.Reset()
	code := run([]string{"-engine", "postgres", "-for-test", "-server-dir", t.TempDir()}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "make temporal-server")
}

func TestPortHeldBySomethingElse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	var out, errb bytes.Buffer
	code := run([]string{"-port", strconv.Itoa(port), "-db", filepath.Join(t.TempDir(), "t.db")}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "not a healthy Temporal frontend")
}

func TestMissingBinary(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"-for-test", "-binary", filepath.Join(t.TempDir(), "none")}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "make tools")
}

func TestDefaultDB(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/data")
	assert.Equal(t, "/data/retry-scheduler/temporal.db", defaultDB())
	assert.Equal(t, "/data/retry-scheduler/temporal-postgres.log", defaultPostgresLog())
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/u")
	assert.Equal(t, "/home/u/.local/share/retry-scheduler/temporal.db", defaultDB())
}

func TestWriteAddr(t *testing.T) {
	p := filepath.Join(t.TempDir(), "addr")
	require.NoError(t, writeAddr(p, "127.0.0.1:1"))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:1\n", string(b))
}
