package message

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckEditedHeadersConvertsJSONValues(t *testing.T) {
	var h map[string]any
	dec := json.NewDecoder(strings.NewReader(`{"x-n": 3, "x-f": 1.5, "x-s": "a", "x-t": {"k": [true, null]}}`))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&h))
	got, err := CheckEditedHeaders(h)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"x-n": int64(3), "x-f": 1.5, "x-s": "a", "x-t": map[string]any{"k": []any{true, nil}}}, got)

	got, err = CheckEditedHeaders(nil)
	require.NoError(t, err)
	assert.Nil(t, got)
}

func TestCheckEditedHeadersRefuses(t *testing.T) {
	long := strings.Repeat("n", MaxHeaderNameBytes+1)
	deep := any("leaf")
	for range MaxHeaderDepth + 1 {
		deep = []any{deep}
	}
	for _, c := range []struct {
		name string
		h    map[string]any
		want string
	}{
		{"scheduler's own", map[string]any{"X-Retry-Key": "k"}, `header "X-Retry-Key" is the scheduler's or the broker's own`},
		{"routing", map[string]any{"CC": []any{"other"}}, `header "CC"`},
		{"failure detail", map[string]any{"x-error-reason": "r"}, `header "x-error-reason"`},
		{"empty name", map[string]any{" ": "v"}, "a header name is empty"},
		{"long name", map[string]any{long: "v"}, "over AMQP's 255-byte short-string limit"},
		{"long nested name", map[string]any{"x-t": map[string]any{long: 1}}, "name of a field in header x-t"},
		{"too deep", map[string]any{"x-deep": deep}, "refused, nested deeper than 31 levels"},
		{"unsupported", map[string]any{"x-c": complex(1, 2)}, "refused a value of unsupported type complex128"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckEditedHeaders(c.h)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestDigestOf(t *testing.T) {
	d := DigestOf([]byte("abc"))
	assert.Equal(t, PayloadDigest{SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", Size: 3}, d)
	assert.Equal(t, "sha256 ba7816bf8f01cfea… (3 bytes)", d.String())
}
