package codec

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/converter"
)

// DefaultMaxBodyBytes bounds a codec request: a batch of payloads the Web UI shows at once.
// Temporal's own payload limit is 2 MB, encoded in JSON as base64.
const DefaultMaxBodyBytes = 16 << 20

// CookieName is the cookie POST <prefix>/login sets: the browser's way to hold the token,
// since the Web UI cannot add an Authorization header of its own to codec requests.
const CookieName = "retry_scheduler_codec_token"

// cookieMaxAge is how long a browser keeps the token after a login.
const cookieMaxAge = 12 * time.Hour

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Token is required: every request but a CORS preflight and the login form must carry
	// "Authorization: Bearer <Token>" or the login cookie, else it gets 401. No default.
	Token string
	// AllowedOrigins are the origins (scheme://host[:port]) of the Web UIs allowed to call
	// the endpoint from a browser; they get CORS headers. Defaults to none.
	AllowedOrigins []string
	// MaxBodyBytes bounds a request body. Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Handler serves the Temporal codec-server protocol (POST <prefix>/encode and
// <prefix>/decode, the JSON form of temporal.api.common.v1.Payloads) for the `temporal` CLI
// (--codec-endpoint, --codec-auth "Bearer <token>") and the Web UI, behind the token and CORS
// for the allowed origins. Mount it under a prefix such as "/codec/".
//
// A browser gets the token once through the form at <prefix>/login, which sets an HttpOnly
// SameSite=Lax cookie; the Web UI then sends it with "include cross-origin credentials" on
// (the UI and this endpoint are same-site when they share a host, whatever the ports).
func Handler(c converter.PayloadCodec, o HandlerOptions) (http.Handler, error) {
	if o.Token == "" {
		return nil, errors.New("codec endpoint: a token is required")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	want := sha256.Sum256([]byte(o.Token))
	// Hashing both sides makes the comparison constant-time whatever the lengths.
	valid := func(token string) bool {
		got := sha256.Sum256([]byte(token))
		return token != "" && subtle.ConstantTimeCompare(got[:], want[:]) == 1
	}
	// The cookie holds a digest of the token, not the token: cookie values are restricted to
	// a few characters, and a stolen cookie then does not give the bearer token away.
	cookieValue := cookieDigest(o.Token)
	validCookie := func(v string) bool {
		return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(cookieValue)) == 1
	}
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
		if strings.HasSuffix(r.URL.Path, "/login") {
			login(w, r, valid, cookieValue)
			return
		}
		if !valid(bearer(r.Header.Get("Authorization"))) && !validCookie(cookie(r)) {
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

const loginPage = `<!doctype html>
<meta charset="utf-8"><title>retry-scheduler codec login</title>
<p>Token for the payload codec endpoint (CODEC_TOKEN). The browser keeps it in an HttpOnly
cookie for 12 hours; in the Temporal Web UI, set this endpoint as the codec server with
"include cross-origin credentials" on.</p>
<form method="post"><input type="password" name="token" autofocus> <button>Log in</button></form>
`

// login serves the token form (GET) and sets the cookie for a valid token (POST).
func login(w http.ResponseWriter, r *http.Request, valid func(string) bool, cookieValue string) {
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(loginPage))
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		token := r.PostFormValue("token")
		if !valid(token) {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name:     CookieName,
			Value:    cookieValue,
			Path:     strings.TrimSuffix(r.URL.Path, "login"),
			MaxAge:   int(cookieMaxAge.Seconds()),
			HttpOnly: true,
			Secure:   r.TLS != nil,
			SameSite: http.SameSiteLaxMode,
		})
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("logged in: this browser may now use the codec endpoint\n"))
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// bearer returns the token of an "Authorization: Bearer <token>" header, else "".
func bearer(v string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func cookieDigest(token string) string {
	d := sha256.Sum256([]byte("retry-scheduler codec cookie\x00" + token))
	return hex.EncodeToString(d[:])
}

func cookie(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	return c.Value
}
