package codec

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

func newKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

type report struct {
	MessageID string `json:"message_id"`
	Payload   []byte `json:"payload"`
}

var secret = report{MessageID: "m-1", Payload: []byte("Jane Doe, 12 Privet Drive, card 4111111111111111")}

func TestRoundTripThroughDataConverter(t *testing.T) {
	c, err := New(map[string][]byte{"k1": newKey(t)}, "k1")
	require.NoError(t, err)
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)

	payloads, err := dc.ToPayloads(secret, "second value", []byte{0, 1, 2})
	require.NoError(t, err)
	for _, p := range payloads.Payloads {
		assert.Equal(t, EncodingEncrypted, string(p.Metadata[converter.MetadataEncoding]))
		assert.Equal(t, "k1", string(p.Metadata[MetadataKeyID]))
		assert.Equal(t, CipherAES256GCM, string(p.Metadata[MetadataCipher]))
		assert.NotContains(t, string(p.Data), "Privet")
		assert.NotContains(t, string(p.Data), base64.StdEncoding.EncodeToString(secret.Payload)[:20])
	}

	var got report
	var s string
	var b []byte
	require.NoError(t, dc.FromPayloads(payloads, &got, &s, &b))
	assert.Equal(t, secret, got)
	assert.Equal(t, "second value", s)
	assert.Equal(t, []byte{0, 1, 2}, b)
}

func TestSamePlaintextSealsDifferently(t *testing.T) {
	c, err := New(map[string][]byte{"k1": newKey(t)}, "k1")
	require.NoError(t, err)
	p := &commonpb.Payload{Data: []byte("same")}
	a, err := c.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	b, err := c.Encode([]*commonpb.Payload{p})
	require.NoError(t, err)
	assert.NotEqual(t, a[0].Data, b[0].Data, "a fresh nonce per payload")
}

func TestRotation(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	old, err := New(map[string][]byte{"2025-01": k1}, "2025-01")
	require.NoError(t, err)
	sealedOld, err := old.Encode([]*commonpb.Payload{{Data: []byte("written before rotation")}})
	require.NoError(t, err)

	// Rotated: the new key seals, the old one still opens what it sealed.
	rotated, err := New(map[string][]byte{"2025-01": k1, "2026-01": k2}, "2026-01")
	require.NoError(t, err)
	opened, err := rotated.Decode(sealedOld)
	require.NoError(t, err)
	assert.Equal(t, "written before rotation", string(opened[0].Data))

	sealedNew, err := rotated.Encode([]*commonpb.Payload{{Data: []byte("after")}})
	require.NoError(t, err)
	assert.Equal(t, "2026-01", string(sealedNew[0].Metadata[MetadataKeyID]))

	// The old key retired: its payloads fail with a message naming the key, never silently.
	retired, err := New(map[string][]byte{"2026-01": k2}, "2026-01")
	require.NoError(t, err)
	_, err = retired.Decode(sealedOld)
	require.ErrorContains(t, err, `sealed with key id "2025-01", which is not among the keys (2026-01)`)
	_, err = old.Decode(sealedNew)
	require.ErrorContains(t, err, `"2026-01"`)
}

func TestPlainPayloadsPassThrough(t *testing.T) {
	c, err := New(map[string][]byte{"k1": newKey(t)}, "k1")
	require.NoError(t, err)
	plain, err := converter.GetDefaultDataConverter().ToPayload("from before encryption")
	require.NoError(t, err)
	out, err := c.Decode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	assert.Same(t, plain, out[0])
}

func TestTamperingFails(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	c, err := New(map[string][]byte{"k1": k1, "k2": k2}, "k1")
	require.NoError(t, err)
	seal := func() *commonpb.Payload {
		out, err := c.Encode([]*commonpb.Payload{{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"secret"`)}})
		require.NoError(t, err)
		return out[0]
	}
	cases := map[string]func(p *commonpb.Payload){
		"flipped ciphertext bit": func(p *commonpb.Payload) { p.Data[len(p.Data)/2] ^= 1 },
		"flipped nonce bit":      func(p *commonpb.Payload) { p.Data[0] ^= 0x80 },
		"flipped tag bit":        func(p *commonpb.Payload) { p.Data[len(p.Data)-1] ^= 1 },
		"truncated":              func(p *commonpb.Payload) { p.Data = p.Data[:len(p.Data)-1] },
		"too short":              func(p *commonpb.Payload) { p.Data = p.Data[:10] },
		"appended byte":          func(p *commonpb.Payload) { p.Data = append(p.Data, 0) },
		"key id swapped":         func(p *commonpb.Payload) { p.Metadata[MetadataKeyID] = []byte("k2") },
		"key id unknown":         func(p *commonpb.Payload) { p.Metadata[MetadataKeyID] = []byte("nope") },
		"key id removed":         func(p *commonpb.Payload) { delete(p.Metadata, MetadataKeyID) },
		"cipher changed":         func(p *commonpb.Payload) { p.Metadata[MetadataCipher] = []byte("ROT13") },
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			p := seal()
			tamper(p)
			_, err := c.Decode([]*commonpb.Payload{p})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "decrypt payload")
		})
	}
	t.Run("untouched still opens", func(t *testing.T) {
		out, err := c.Decode([]*commonpb.Payload{seal()})
		require.NoError(t, err)
		assert.Equal(t, `"secret"`, string(out[0].Data))
		assert.Equal(t, "json/plain", string(out[0].Metadata["encoding"]))
	})
}

func TestNewRefusesBadKeys(t *testing.T) {
	key := newKey(t)
	for name, tc := range map[string]struct {
		keys   map[string][]byte
		active string
		want   string
	}{
		"no keys":       {nil, "k", "no keys"},
		"short key":     {map[string][]byte{"k": key[:16]}, "k", `key "k" is 16 bytes, want 32`},
		"bad id":        {map[string][]byte{"k 1": key}, "k 1", "may hold only"},
		"long id":       {map[string][]byte{strings.Repeat("k", 65): key}, "k", "1 to 64 characters"},
		"active absent": {map[string][]byte{"k1": key}, "k2", `active key id "k2" is not among the keys (k1)`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.keys, tc.active)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseKeys(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	keys, err := ParseKeys(" k1=" + base64.StdEncoding.EncodeToString(k1) + ", k2=" + base64.RawURLEncoding.EncodeToString(k2) + ",")
	require.NoError(t, err)
	assert.Equal(t, map[string][]byte{"k1": k1, "k2": k2}, keys)

	secretB64 := base64.StdEncoding.EncodeToString(k1)
	for name, tc := range map[string]struct{ in, want string }{
		"empty":      {"", "no keys"},
		"no equals":  {"k1", "want id=base64key"},
		"not base64": {"k1=" + secretB64[:20] + "!!", `key "k1" is not base64`},
		"short":      {"k1=" + base64.StdEncoding.EncodeToString(k1[:31]), `key "k1" is 31 bytes`},
		"duplicate":  {"k1=" + secretB64 + ",k1=" + secretB64, `"k1" given twice`},
		"bad id":     {"k/1=" + secretB64, "entry 1: a key id may hold only"},
		"key alone":  {secretB64, "entry 1: "},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseKeys(tc.in)
			require.ErrorContains(t, err, tc.want)
			assert.NotContains(t, err.Error(), secretB64[:20], "the key leaked into the error")
		})
	}
}

func FuzzDecode(f *testing.F) {
	key := bytes.Repeat([]byte{7}, KeySize)
	c, err := New(map[string][]byte{"k1": key}, "k1")
	if err != nil {
		f.Fatal(err)
	}
	sealed, err := c.Encode([]*commonpb.Payload{{Data: []byte("x")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed[0].Data, "k1", CipherAES256GCM)
	f.Add([]byte{}, "k1", "")
	f.Add(make([]byte, 28), "nope", "AES256-GCM")
	f.Fuzz(func(t *testing.T, data []byte, keyID, ciph string) {
		p := &commonpb.Payload{Metadata: map[string][]byte{
			converter.MetadataEncoding: []byte(EncodingEncrypted), MetadataKeyID: []byte(keyID), MetadataCipher: []byte(ciph),
		}, Data: data}
		out, err := c.Decode([]*commonpb.Payload{p})
		if err == nil && len(out) != 1 {
			t.Fatalf("decoded %d payloads from one", len(out))
		}
	})
}

// FuzzParseKeys: PAYLOAD_KEYS comes from the environment; whatever it holds, parsing returns
// 32-byte keys or an error, and an error never repeats what followed an "=" (a key).
func FuzzParseKeys(f *testing.F) {
	f.Add("k1=" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)))
	f.Add("a=AQ==,b=,=c,d")
	f.Add(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)))
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseKeys(s)
		if err != nil {
			// Errors may quote an id, even one that looks like a key (testdata/fuzz:
			// "00000000=00000000", `0000000="0000000`); with the quoted ids taken out, nothing
			// that followed an "=" may remain.
			msg := err.Error()
			for _, entry := range strings.Split(s, ",") {
				id, _, _ := strings.Cut(entry, "=")
				msg = strings.ReplaceAll(msg, strconv.Quote(strings.TrimSpace(id)), "")
			}
			for _, entry := range strings.Split(s, ",") {
				_, v, ok := strings.Cut(entry, "=")
				if v = strings.TrimSpace(v); ok && len(v) >= 8 && strings.Contains(msg, v) {
					t.Fatalf("error %q repeats key material %q", err, v)
				}
			}
			return
		}
		for id, k := range keys {
			if len(k) != KeySize || checkKeyID(id) != nil {
				t.Fatalf("accepted key %q of %d bytes", id, len(k))
			}
		}
	})
}
