package devserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

func TestSearchAttributeFlags(t *testing.T) {
	flags := SearchAttributeFlags()
	require.Len(t, flags, len(SearchAttributeKeys))
	for _, want := range []string{
		"RetryStatus=Keyword", "OriginalQueue=Keyword", "RetryCount=Int",
		"NextRetryTime=Datetime", "ErrorCategory=Keyword", "RetryPolicy=Keyword",
		"TenantId=Keyword", "DeadAt=Datetime", "EventType=Keyword", "BreakerState=Keyword",
	} {
		assert.Contains(t, flags, want)
	}
}

func TestCLIType(t *testing.T) {
	for k, want := range map[temporal.SearchAttributeKey]string{
		temporal.NewSearchAttributeKeyString("a"):      "Text",
		temporal.NewSearchAttributeKeyKeyword("b"):     "Keyword",
		temporal.NewSearchAttributeKeyInt64("c"):       "Int",
		temporal.NewSearchAttributeKeyFloat64("d"):     "Double",
		temporal.NewSearchAttributeKeyBool("e"):        "Bool",
		temporal.NewSearchAttributeKeyTime("f"):        "Datetime",
		temporal.NewSearchAttributeKeyKeywordList("g"): "KeywordList",
	} {
		assert.Equal(t, want, CLIType(k), k.GetName())
	}
}

func TestDefaultBinary(t *testing.T) {
	t.Setenv("TEMPORAL_CLI", "/opt/temporal")
	assert.Equal(t, "/opt/temporal", DefaultBinary())
	t.Setenv("TEMPORAL_CLI", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	assert.Equal(t, "/xdg/retry-scheduler/bin/temporal", DefaultBinary())
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	assert.Equal(t, "/home/u/.cache/retry-scheduler/bin/temporal", DefaultBinary())
}

func fakeBinary(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "temporal")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	return p
}

func TestResolve(t *testing.T) {
	bin := fakeBinary(t)
	db := filepath.Join(t.TempDir(), "sub", "t.db")

	s := &Server{}
	require.NoError(t, s.resolve(Options{Binary: bin, Port: 7300, DBFile: db}))
	assert.Equal(t, "127.0.0.1:7300", s.Address)
	assert.Equal(t, "127.0.0.1:8300", s.UIAddress)
	assert.Equal(t, "default", s.Namespace)
	assert.Equal(t, db+".log", s.LogFile)
	assert.DirExists(t, filepath.Dir(db))
	args := strings.Join(s.Args(), " ")
	for _, want := range []string{
		"server start-dev", "--ip 127.0.0.1", "--port 7300", "--ui-port 8300",
		"--db-filename " + db, "--namespace default",
		"--sqlite-pragma journal_mode=wal", "--sqlite-pragma synchronous=normal",
		"--log-level warn", "--search-attribute RetryStatus=Keyword",
		"--dynamic-config-value matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value system.forceSearchAttributesCacheRefreshOnRead=false",
	} {
		assert.Contains(t, args, want)
	}
	assert.NotContains(t, args, "--headless")

	s = &Server{}
	require.NoError(t, s.resolve(Options{Binary: bin, UIPort: -1, Namespace: "ns", LogFile: "/tmp/x.log"}))
	tmp := s.tempDir
	t.Cleanup(func() { os.RemoveAll(tmp) })
	assert.NotEmpty(t, s.tempDir)
	assert.Equal(t, filepath.Join(s.tempDir, "temporal.db"), s.DBFile)
	assert.Empty(t, s.UIAddress)
	assert.Equal(t, "/tmp/x.log", s.LogFile)
	assert.True(t, slices.Contains(s.Args(), "--headless"))
	assert.NotContains(t, s.Args(), "--ui-port")
	assert.Contains(t, strings.Join(s.Args(), " "), "--namespace ns")
	assert.NotEqual(t, "127.0.0.1:0", s.Address)

	s = &Server{}
	require.NoError(t, s.resolve(Options{Binary: bin, Port: 65000, UIPort: 0, DBFile: db}))
	assert.NotEqual(t, "127.0.0.1:66000", s.UIAddress)
	assert.NotEmpty(t, s.UIAddress)

	for _, o := range []Options{
		{Binary: filepath.Join(t.TempDir(), "missing")},
		{Binary: t.TempDir()},
		{Binary: bin, Port: -2},
		{Binary: bin, Port: 70000},
		{Binary: bin, Port: 7300, UIPort: -2},
		{Binary: bin, Port: 7300, UIPort: 70000},
	} {
		assert.Error(t, (&Server{}).resolve(o), "%+v", o)
	}
}

func TestNotOwned(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	s := StartForTest(t)
	assert.Equal(t, "127.0.0.1:1", s.Address)
	assert.Equal(t, "default", s.Namespace)
	assert.False(t, s.Owned())
	assert.NoError(t, s.Stop())
	assert.ErrorIs(t, s.Kill(), ErrNotOwned)
	assert.ErrorIs(t, s.Restart(t.Context()), ErrNotOwned)
	assert.Nil(t, s.Done())
	assert.NoError(t, s.Err())
	assert.Zero(t, s.Pid())
}

func TestStartFailsFast(t *testing.T) {
	// A "server" that exits at once: Start reports it instead of waiting 60 s.
	p := filepath.Join(t.TempDir(), "temporal")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\necho boom >&2\nexit 3\n"), 0o755))
	_, err := Start(t.Context(), Options{Binary: p, UIPort: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited during start-up")
	assert.Contains(t, err.Error(), "boom")
}

// docker-compose.yml's temporal-namespace job registers the same attributes.
func TestComposeRegistersSearchAttributes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	require.NoError(t, err, "docker-compose.yml is part of the repository")
	var line string
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, "for sa in ") {
			line = l
		}
	}
	require.NotEmpty(t, line, "docker-compose.yml: the `for sa in ...` loop of temporal-namespace")
	got := strings.Fields(strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "for sa in")), "; do"))
	assert.ElementsMatch(t, SearchAttributeFlags(), got)
}

func TestSweepTempDirs(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	mk := func(pid int, age time.Duration) string {
		dir, err := os.MkdirTemp("", tempDirPrefix)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(pid)), 0o644))
		old := time.Now().Add(-age)
		require.NoError(t, os.Chtimes(dir, old, old))
		return dir
	}
	stale := mk(dead.Process.Pid, 2*time.Minute)
	young := mk(dead.Process.Pid, 0)
	alive := mk(os.Getpid(), 2*time.Minute)
	sweepTempDirs(nil)
	assert.NoDirExists(t, stale)
	assert.DirExists(t, young)
	assert.DirExists(t, alive)
}

func TestReadPartitionsFollowTheDatabase(t *testing.T) {
	bin := fakeBinary(t)
	readFour := "--dynamic-config-value matching.numTaskqueueReadPartitions=4"

	// A new database: one partition.
	db := filepath.Join(t.TempDir(), "t.db")
	s := &Server{}
	require.NoError(t, s.resolve(Options{Binary: bin, DBFile: db}))
	assert.NotContains(t, strings.Join(s.Args(), " "), readFour)

	// A database from before the mark (four partitions): it keeps reading four, after the
	// one-partition values so that it wins.
	require.NoError(t, os.WriteFile(db, []byte("sqlite"), 0o644))
	s = &Server{}
	require.NoError(t, s.resolve(Options{Binary: bin, DBFile: db}))
	args := strings.Join(s.Args(), " ")
	assert.Contains(t, args, readFour)
	assert.Greater(t, strings.Index(args, readFour), strings.Index(args, "numTaskqueueReadPartitions=1"))

	// A database this package started with one partition.
	require.NoError(t, os.WriteFile(db+onePartitionMark, nil, 0o644))
	s = &Server{}
	require.NoError(t, s.resolve(Options{Binary: bin, DBFile: db}))
	assert.NotContains(t, strings.Join(s.Args(), " "), readFour)
}
