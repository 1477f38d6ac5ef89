package message

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// MaxHeaderNameBytes is the longest header name an operator may set: an AMQP field table's
// keys are short strings.
const MaxHeaderNameBytes = 255

// CheckEditedHeaders validates the headers an operator gives a message to replace its own
// with, as ingress validates a producer's: no header the scheduler or the broker owns
// (HeaderDenied), names that are AMQP short strings at any depth, values that survive the
// trip through Temporal (HeaderConverter) and nest at most MaxHeaderDepth deep. It returns the
// converted headers (JSON numbers become int64 or float64), nil for none, or an error naming
// the first header refused, in name order.
func CheckEditedHeaders(h map[string]any) (map[string]any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(h)) {
		switch {
		case strings.TrimSpace(k) == "":
			errs = append(errs, errors.New("a header name is empty"))
		case HeaderDenied(k):
			errs = append(errs, fmt.Errorf("header %q is the scheduler's or the broker's own and cannot be set by an edit", k))
		}
		if err := checkNames(h[k], k); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := checkNames(h, ""); err != nil {
		return nil, err
	}
	var c HeaderConverter
	out := c.Convert(h, nil)
	if len(c.Notes) > 0 {
		return nil, errors.New(strings.ReplaceAll(strings.Join(c.Notes, "; "), "dropped", "refused"))
	}
	return out, nil
}

// checkNames refuses a name, in the table v or any table within, over the short-string
// limit; path is v's, "" for the headers table.
func checkNames(v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if len(k) > MaxHeaderNameBytes {
				where := "header name"
				if path != "" {
					where = "name of a field in header " + path
				}
				return fmt.Errorf("%s %q… is %d bytes, over AMQP's %d-byte short-string limit", where, k[:32], len(k), MaxHeaderNameBytes)
			}
			p := k
			if path != "" {
				p = path + "." + k
			}
			if err := checkNames(x[k], p); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkNames(e, path+"[]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// PayloadDigest identifies a payload without holding it: the hex sha256 of its bytes and
// their count, so that an edit's record says what was replaced.
type PayloadDigest struct {
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
}

// DigestOf is the digest of payload.
func DigestOf(payload []byte) PayloadDigest {
	sum := sha256.Sum256(payload)
	return PayloadDigest{SHA256: hex.EncodeToString(sum[:]), Size: len(payload)}
}

// String is "sha256 <first 16 hex> (<n> bytes)".
func (d PayloadDigest) String() string {
	return fmt.Sprintf("sha256 %.16s… (%d bytes)", d.SHA256, d.Size)
}
