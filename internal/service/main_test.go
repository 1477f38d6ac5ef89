package service

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/internal/buildinfo"
)

// -version answers before the configuration is read: here under an environment that
// config.Load refuses.
func TestMainVersion(t *testing.T) {
	t.Setenv("HTTP_PORT", "not-a-port")
	var out bytes.Buffer
	old := stdout
	stdout = &out
	t.Cleanup(func() { stdout = old })

	want := buildinfo.Get().String() + "\n"
	assert.True(t, strings.HasPrefix(want, "retry-scheduler "), want)
	for _, args := range [][]string{{"-version"}, {"--version"}, {"worker", "-version"}, {"-http-port", "1", "--version"}} {
		out.Reset()
		assert.Equal(t, 0, Main(args), "%q", args)
		assert.Equal(t, want, out.String(), "%q", args)
	}

	out.Reset()
	assert.Equal(t, 2, Main([]string{"worker"}), "without -version the environment is refused")
	assert.Empty(t, out.String())
}

func TestWantsVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"all"}, false},
		{[]string{"-version"}, true},
		{[]string{"--version"}, true},
		{[]string{"bridge", "-log-level", "debug", "-version"}, true},
		{[]string{"-service-version=1.2.3", "-version"}, true},
		{[]string{"-h", "-version"}, true},
		// A flag's value, not the flag.
		{[]string{"-service-version", "-version"}, false},
		{[]string{"-service-version", "--version"}, false},
		// After "--" every argument is positional.
		{[]string{"--", "-version"}, false},
		{[]string{"-versions"}, false},
	} {
		assert.Equal(t, tc.want, wantsVersion(tc.args), "%q", tc.args)
	}
}

// Main answers -h with the usage and exit code 0, and a configuration Run refuses with 1.
func TestMainExitCodes(t *testing.T) {
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	tracingOff(t)

	assert.Equal(t, 0, Main([]string{"-h"}))

	t.Setenv("API_TOKENS_FILE", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 1, Main([]string{"bridge", "-log-level", "error"}))
}
