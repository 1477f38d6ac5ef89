// Package codec encrypts Temporal payloads with AES-256-GCM for messages that carry
// personal data: with it, Temporal's history, the Web UI and the CLI see only
// ciphertext unless they go through the codec endpoint (see Handler).
//
// Each encrypted payload names the key that sealed it in its metadata, so keys rotate: a
// Codec encodes with its active key and decodes with any key it knows. A payload that is not
// encrypted (written before encryption was switched on) decodes unchanged.
package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload.
const (
	// EncodingEncrypted is the payload's "encoding" metadata once sealed.
	EncodingEncrypted = "binary/encrypted"
	// MetadataKeyID names the key that sealed the payload.
	MetadataKeyID = "encryption-key-id"
	// MetadataCipher names the cipher; CipherAES256GCM is the only one.
	MetadataCipher = "encryption-cipher"
	// CipherAES256GCM is AES-256 in GCM mode with a random 96-bit nonce prepended to the
	// ciphertext, and the key id and cipher name as additional authenticated data.
	CipherAES256GCM = "AES256-GCM"
)

// KeySize is the length of an AES-256 key in bytes.
const KeySize = 32

// maxKeyIDLen bounds a key id; it travels in every payload's metadata.
const maxKeyIDLen = 64

// Codec is a converter.PayloadCodec that seals payloads with AES-256-GCM. Create it with New;
// it is safe for concurrent use.
type Codec struct {
	active string
	aeads  map[string]cipher.AEAD
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New returns a Codec that encodes with the key named active and decodes with any of keys.
// Each key must be KeySize bytes; ids are 1-64 characters of letters, digits, '.', '_', '-'.
func New(keys map[string][]byte, active string) (*Codec, error) {
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	c := &Codec{active: active, aeads: make(map[string]cipher.AEAD, len(keys))}
	for id, key := range keys {
		if err := checkKeyID(id); err != nil {
			return nil, err
		}
		if len(key) != KeySize {
			// Never the key itself in an error: it ends up in logs.
			return nil, fmt.Errorf("key %q is %d bytes, want %d (AES-256)", id, len(key), KeySize)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		c.aeads[id] = aead
	}
	if _, ok := c.aeads[active]; !ok {
		return nil, fmt.Errorf("active key id %q is not among the keys (%s)", active, strings.Join(c.KeyIDs(), ", "))
	}
	return c, nil
}

// ActiveKeyID is the id of the key new payloads are sealed with.
func (c *Codec) ActiveKeyID() string { return c.active }

// KeyIDs lists the ids of every key the Codec decodes with, sorted.
func (c *Codec) KeyIDs() []string {
	ids := make([]string, 0, len(c.aeads))
	for id := range c.aeads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// checkKeyID refuses a malformed id without quoting it: a key pasted without its "id=" would
// otherwise be echoed into an error, and from there into a log.
func checkKeyID(id string) error {
	if id == "" || len(id) > maxKeyIDLen {
		return fmt.Errorf("a key id must be 1 to %d characters", maxKeyIDLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return errors.New("a key id may hold only letters, digits, '.', '_' and '-'")
		}
	}
	return nil
}

// additionalData binds the ciphertext to its key id and cipher, so that neither metadata
// entry can be swapped without the decryption failing.
func additionalData(keyID string) []byte {
	return []byte(CipherAES256GCM + "\x00" + keyID)
}

// Encode seals each payload (its data and metadata, marshalled) with the active key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.aeads[c.active]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encrypt payload: marshal: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("encrypt payload: nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(EncodingEncrypted),
				MetadataKeyID:              []byte(c.active),
				MetadataCipher:             []byte(CipherAES256GCM),
			},
			Data: aead.Seal(nonce, nonce, plain, additionalData(c.active)),
		}
	}
	return out, nil
}

// Decode opens each encrypted payload with the key its metadata names; payloads that are not
// encrypted pass unchanged. A payload sealed with an unknown key, or altered, is an error.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != EncodingEncrypted {
			out[i] = p
			continue
		}
		d, err := c.open(p)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

func (c *Codec) open(p *commonpb.Payload) (*commonpb.Payload, error) {
	if ciph := string(p.Metadata[MetadataCipher]); ciph != "" && ciph != CipherAES256GCM {
		return nil, fmt.Errorf("decrypt payload: unknown cipher %q", truncate(ciph, 32))
	}
	id := string(p.Metadata[MetadataKeyID])
	aead, ok := c.aeads[id]
	if !ok {
		return nil, fmt.Errorf("decrypt payload: sealed with key id %q, which is not among the keys (%s)", truncate(id, maxKeyIDLen), strings.Join(c.KeyIDs(), ", "))
	}
	if len(p.Data) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("decrypt payload (key %s): %d bytes is too short", id, len(p.Data))
	}
	nonce, sealed := p.Data[:aead.NonceSize()], p.Data[aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, sealed, additionalData(id))
	if err != nil {
		return nil, fmt.Errorf("decrypt payload (key %s): %w", id, err)
	}
	var d commonpb.Payload
	if err := proto.Unmarshal(plain, &d); err != nil {
		return nil, fmt.Errorf("decrypt payload (key %s): unmarshal: %w", id, err)
	}
	return &d, nil
}

// ParseKeys reads a key list "id=base64key,id2=base64key" (standard or URL-safe base64, padded
// or not; 32 bytes each). Errors name the key id, never the key.
func ParseKeys(s string) (map[string][]byte, error) {
	keys := map[string][]byte{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		id, b64, ok := strings.Cut(entry, "=")
		id = strings.TrimSpace(id)
		if !ok {
			return nil, fmt.Errorf("entry %d: want id=base64key", len(keys)+1)
		}
		if err := checkKeyID(id); err != nil {
			return nil, fmt.Errorf("entry %d: %w (want id=base64key)", len(keys)+1, err)
		}
		if _, dup := keys[id]; dup {
			return nil, fmt.Errorf("key id %q given twice", id)
		}
		b64 = strings.TrimSpace(b64)
		if strings.Trim(b64, "=") == "" {
			// "base64key=" with no id: the "id" is the key; say nothing of it.
			return nil, fmt.Errorf("entry %d: no key after the id (want id=base64key)", len(keys)+1)
		}
		key, err := decodeKey(b64)
		if err != nil {
			return nil, fmt.Errorf("key %q is not base64", id)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("key %q is %d bytes, want %d (AES-256)", id, len(key), KeySize)
		}
		keys[id] = key
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys (want id=base64key,...)")
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, error) {
	var firstErr error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err == nil {
			return b, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
