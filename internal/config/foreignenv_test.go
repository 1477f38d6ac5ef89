package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWarnForeignEnv(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":           "postgresql://retry_user:password@localhost:5432/eracun",
		"MAX_RETRIES":            "3",
		"RETRY_POLL_INTERVAL_MS": "10000",
		"MaxAttempts":            "", // empty: unset, as Load reads it
		"DEFAULT_MAX_RETRIES":    "3",
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	WarnForeignEnv(logger, func(k string) (string, bool) { v, ok := env[k]; return v, ok })

	type record struct {
		Level, Msg, Variable, Instead string
	}
	var got []record
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var r record
		require.NoError(t, json.Unmarshal(line, &r), "%s", line)
		got = append(got, r)
	}
	require.Len(t, got, 3, "one warning each, only for the foreign variables set")
	for i, want := range []struct{ variable, instead string }{
		{"MAX_RETRIES", "DEFAULT_MAX_RETRIES"},
		{"RETRY_POLL_INTERVAL_MS", "Temporal timer"},
		{"DATABASE_URL", "TEMPORAL_ADDRESS"},
	} {
		assert.Equal(t, "WARN", got[i].Level)
		assert.Equal(t, "environment variable not read by this service", got[i].Msg)
		assert.Equal(t, want.variable, got[i].Variable)
		assert.Contains(t, got[i].Instead, want.instead)
	}
	assert.NotContains(t, buf.String(), "password", "the value is never logged")
}

// A foreign variable is one the service does not read, and the settings its hint names are
// ones it does: a renamed setting must not leave the list pointing at nothing.
func TestForeignEnvNamesAreForeignAndHintsKnown(t *testing.T) {
	setting := regexp.MustCompile(`\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b`)
	seen := map[string]bool{}
	for _, v := range foreignEnv {
		assert.False(t, seen[v.Name], "%s listed twice", v.Name)
		seen[v.Name] = true
		assert.False(t, KnownEnv(v.Name), "%s is read by the service: not foreign", v.Name)
		assert.NotEmpty(t, v.Instead, v.Name)
		for _, name := range setting.FindAllString(v.Instead, -1) {
			assert.True(t, KnownEnv(name), "%s's hint names %s, which the service does not read", v.Name, name)
		}
	}
	for _, name := range []string{"MAX_RETRIES", "RETRY_POLL_INTERVAL_MS", "DATABASE_URL"} {
		assert.True(t, seen[name], "%s is in the list", name)
	}
}
