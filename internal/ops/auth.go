package ops

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Role is what a token may do. Each role includes the ones below it.
type Role int

// The roles, weakest first.
const (
	// RoleViewer reads: lists and one item's state.
	RoleViewer Role = iota + 1
	// RoleOperator acts: retry, skip, resolve, discard, bulk actions and replay.
	RoleOperator
	// RoleAdmin also purges.
	RoleAdmin
)

var roleNames = map[string]Role{"viewer": RoleViewer, "operator": RoleOperator, "admin": RoleAdmin}

// String is the role's configuration name.
func (r Role) String() string {
	for n, v := range roleNames {
		if v == r {
			return n
		}
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ParseRole reads a role name (viewer, operator, admin).
func ParseRole(s string) (Role, bool) {
	r, ok := roleNames[strings.ToLower(strings.TrimSpace(s))]
	return r, ok
}

// Principal is who is calling: the token's name (the actor in signals and logs), its role and
// its tenant scope ("" for all tenants).
type Principal struct {
	Name   string `json:"name"`
	Role   Role   `json:"-"`
	Tenant string `json:"tenant,omitempty"`
}

// Allows reports whether p may act on an item of the given tenant.
func (p Principal) Allows(tenant string) bool { return p.Tenant == "" || p.Tenant == tenant }

// MinTokenLen is the shortest accepted token: shorter ones are guessable.
const MinTokenLen = 16

// Token is one configured bearer token.
type Token struct {
	Principal
	// sum is the SHA-256 of the secret: comparisons run on equal-length digests, in constant
	// time, and the secret itself is not kept.
	sum [sha256.Size]byte
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)

// ParseTokens reads token entries separated by commas or newlines, each
// "name:role[:tenant]=secret" (role viewer, operator or admin; tenant optional). Blank entries
// and lines starting with "#" are skipped. source names where the text came from (API_TOKENS,
// a file) in errors; errors never quote a secret.
func ParseTokens(source, text string) ([]Token, error) {
	var out []Token
	var errs []error
	n := 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, entry := range strings.Split(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			t, err := parseToken(entry)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: entry %d: %w", source, n, err))
				continue
			}
			out = append(out, t)
		}
	}
	return out, errors.Join(errs...)
}

func parseToken(entry string) (Token, error) {
	head, secret, ok := strings.Cut(entry, "=")
	if !ok {
		return Token{}, errors.New(`want name:role[:tenant]=token`)
	}
	head, secret = strings.TrimSpace(head), strings.TrimSpace(secret)
	parts := strings.Split(head, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Token{}, fmt.Errorf("%q: want name:role[:tenant] before the =", head)
	}
	name := strings.TrimSpace(parts[0])
	if !tokenName.MatchString(name) {
		return Token{}, fmt.Errorf("name %q: use letters, digits and _.@- (at most 64)", name)
	}
	role, ok := ParseRole(parts[1])
	if !ok {
		return Token{}, fmt.Errorf("token %q: unknown role %q (want viewer, operator or admin)", name, parts[1])
	}
	var tenant string
	if len(parts) == 3 {
		if tenant = strings.TrimSpace(parts[2]); tenant == "" {
			return Token{}, fmt.Errorf("token %q: empty tenant (leave out the third part for all tenants)", name)
		}
		if err := checkText("tenant", tenant); err != nil {
			return Token{}, fmt.Errorf("token %q: %w", name, err)
		}
	}
	if len(secret) < MinTokenLen {
		return Token{}, fmt.Errorf("token %q: the secret is shorter than %d characters", name, MinTokenLen)
	}
	if strings.ContainsAny(secret, " \t") {
		return Token{}, fmt.Errorf("token %q: the secret contains white space", name)
	}
	if placeholder(secret) {
		return Token{}, fmt.Errorf("token %q: the secret is an example's placeholder; generate one (openssl rand -hex 24)", name)
	}
	return Token{Principal: Principal{Name: name, Role: role, Tenant: tenant}, sum: sha256.Sum256([]byte(secret))}, nil
}

// Auth decides who a request comes from.
type Auth struct {
	tokens []Token
	off    bool
}

// NewAuth checks tokens (names and secrets unique) and returns an Auth that accepts them.
// With no tokens every API call is refused with 401 (see Disabled for development).
func NewAuth(tokens []Token) (*Auth, error) {
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]bool{}
	for _, t := range tokens {
		if names[t.Name] {
			return nil, fmt.Errorf("token name %q is used twice", t.Name)
		}
		if sums[t.sum] {
			return nil, fmt.Errorf("token %q reuses the secret of another token", t.Name)
		}
		names[t.Name], sums[t.sum] = true, true
	}
	return &Auth{tokens: tokens}, nil
}

// Disabled is the development mode (API_AUTH=off): every call is made by "anonymous" with the
// admin role and no tenant scope.
func Disabled() *Auth { return &Auth{off: true} }

// Off reports whether authentication is disabled.
func (a *Auth) Off() bool { return a.off }

// Count is the number of configured tokens.
func (a *Auth) Count() int { return len(a.tokens) }

// errUnauthenticated is the 401 answer; it never says which part was wrong.
var errUnauthenticated = errors.New("missing or invalid bearer token (send Authorization: Bearer <token>)")

var errNoTokens = errors.New("no API tokens are configured: set API_TOKENS or API_TOKENS_FILE (or API_AUTH=off for local development)")

// Authenticate returns the principal of a bearer token. Every configured token is compared, in
// constant time, whatever matches.
func (a *Auth) Authenticate(header string) (Principal, error) {
	if a.off {
		return Principal{Name: "anonymous", Role: RoleAdmin}, nil
	}
	if len(a.tokens) == 0 {
		return Principal{}, errNoTokens
	}
	scheme, secret, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, errUnauthenticated
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	found := -1
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], a.tokens[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, errUnauthenticated
	}
	return a.tokens[found].Principal, nil
}

type principalKey struct{}

// principalOf is the caller of an authenticated request.
func principalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// require wraps h: the caller must authenticate and hold at least role min.
func (a *Auth) require(min Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="retry-scheduler"`)
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		if p.Role < min {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s has the %s role; this needs %s", p.Name, p.Role, min))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// placeholder says whether a secret is the kind of stand-in an example file carries
// ("CHANGE-ME-to-a-random-token"): deployed as it is, it would be a known admin token.
func placeholder(secret string) bool {
	s := strings.ToUpper(strings.NewReplacer("-", "", "_", "").Replace(secret))
	return strings.Contains(s, "CHANGEME") || strings.Contains(s, "REPLACEME")
}
