package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A Secret never shows its value, whatever prints, formats, logs or encodes it.
func TestSecretRedacts(t *testing.T) {
	const v = "hunter2-very-secret"
	s := Secret(v)
	assert.Equal(t, v, s.Reveal())
	for _, format := range []string{"%v", "%s", "%q", "%#v", "%+v", "%x", "%10s", "%d"} {
		assert.Equal(t, fmt.Sprintf(format, Redacted), fmt.Sprintf(format, s), format)
	}
	assert.Equal(t, "xxxxx", s.String())
	assert.Equal(t, "", Secret("").String(), "unset shows empty")
	assert.Equal(t, `"" "xxxxx"`, fmt.Sprintf("%q %q", Secret(""), s))

	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "token", s, "config", struct{ Key Secret }{s})
	assert.NotContains(t, buf.String(), "hunter2")
	assert.Contains(t, buf.String(), `"token":"xxxxx"`)

	b, err := json.Marshal(struct{ Key Secret }{s})
	assert.NoError(t, err)
	assert.JSONEq(t, `{"Key":"xxxxx"}`, string(b))
	assert.NotContains(t, fmt.Sprintf("%+v", Config{TemporalAPIKey: s, CodecToken: s}), "hunter2")
}
