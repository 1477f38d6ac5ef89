package codec

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"

	"go.temporal.io/sdk/converter"
)

// DefaultMaxBodyBytes bounds a codec request: a batch of payloads the Web UI shows at once.
// Temporal's own payload limit is 2 MB, encoded in JSON as base64.
const DefaultMaxBodyBytes = 16 << 20

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Token is required: every request but a CORS preflight must carry
	// "Authorization: Bearer <Token>", else it gets 401. There is no default.
	Token string
	// AllowedOrigins are the origins (scheme://host[:port]) of the Web UIs allowed to call
	// the endpoint from a browser; they get CORS headers. Defaults to none.
	AllowedOrigins []string
	// MaxBodyBytes bounds a request body. Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Handler serves the Temporal codec-server protocol (POST <prefix>/encode and
// <prefix>/decode, the JSON form of temporal.api.common.v1.Payloads) for the Web UI and the
// `temporal` CLI (--codec-endpoint, --codec-auth), behind a bearer token and CORS for the
// allowed origins. Mount it under a prefix such as "/codec/".
func Handler(c converter.PayloadCodec, o HandlerOptions) (http.Handler, error) {
	if o.Token == "" {
		return nil, errors.New("codec endpoint: a token is required")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	want := sha256.Sum256([]byte(o.Token))
	next := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		origin := r.Header.Get("Origin")
		if origin != "" {
			h.Add("Vary", "Origin")
		}
		allowed := origin != "" && slices.Contains(o.AllowedOrigins, origin)
		if allowed {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
		}
		if r.Method == http.MethodOptions {
			// A preflight carries no credentials; it only learns what the real request may send.
			if !allowed {
				http.Error(w, "origin not allowed", http.StatusForbidden)
				return
			}
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Namespace")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// Hashing both sides makes the comparison constant-time whatever the lengths.
		got := sha256.Sum256([]byte(bearer(r.Header.Get("Authorization"))))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			h.Set("WWW-Authenticate", `Bearer realm="codec"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost {
			h.Set("Allow", "POST, OPTIONS")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, o.MaxBodyBytes)
		next.ServeHTTP(w, r)
	}), nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header, else "".
func bearer(v string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
