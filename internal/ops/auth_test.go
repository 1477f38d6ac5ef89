package ops

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTokens(t *testing.T) {
	tokens, err := ParseTokens("API_TOKENS", `alice:operator=alice-secret-0123456789, bob:Viewer:acme=bob-secret-0123456789
# a comment
carol:admin=carol=secret=0123456789`)
	require.NoError(t, err)
	require.Len(t, tokens, 3)
	assert.Equal(t, Principal{Name: "alice", Role: RoleOperator}, tokens[0].Principal)
	assert.Equal(t, Principal{Name: "bob", Role: RoleViewer, Tenant: "acme"}, tokens[1].Principal)
	assert.Equal(t, Principal{Name: "carol", Role: RoleAdmin}, tokens[2].Principal, "the secret may hold '='")

	none, err := ParseTokens("API_TOKENS", " \n# only comments\n,")
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestParseTokensRefusesBadEntries(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"alice-secret-0123456789", "want name:role[:tenant]=token"},
		{"alice=alice-secret-0123456789", "want name:role[:tenant]"},
		{"alice:boss=alice-secret-0123456789", `unknown role "boss"`},
		{"alice:viewer=short", "shorter than 16"},
		{"alice:viewer:=alice-secret-0123456789", "empty tenant"},
		{"al ice:viewer=alice-secret-0123456789", "name"},
		{"alice:viewer:a:b=alice-secret-0123456789", "want name:role[:tenant]"},
		{"alice:viewer=alice secret 0123456789", "white space"},
		{"ops-admin:admin=CHANGE-ME-to-a-random-token", "placeholder"},
		{"ops-admin:admin=changeme0123456789", "placeholder"},
		{"ops-admin:admin=replace_me_0123456789", "placeholder"},
	} {
		_, err := ParseTokens("API_TOKENS", tt.in)
		require.Error(t, err, tt.in)
		assert.Contains(t, err.Error(), tt.want, tt.in)
		assert.Contains(t, err.Error(), "API_TOKENS: entry 1", tt.in)
		assert.NotContains(t, err.Error(), "0123456789", "errors never quote a secret")
	}
}

func TestNewAuthRefusesDuplicates(t *testing.T) {
	a, _ := ParseTokens("x", "a:viewer=secret-secret-0001")
	b, _ := ParseTokens("x", "a:admin=secret-secret-0002")
	c, _ := ParseTokens("x", "c:admin=secret-secret-0001")
	_, err := NewAuth(append(a, b...))
	assert.ErrorContains(t, err, `"a" is used twice`)
	_, err = NewAuth(append(a, c...))
	assert.ErrorContains(t, err, "reuses the secret")
}

func TestAuthenticate(t *testing.T) {
	tokens, err := ParseTokens("x", "alice:operator=alice-secret-0123456789,bob:viewer:acme=bob-secret-0123456789")
	require.NoError(t, err)
	auth, err := NewAuth(tokens)
	require.NoError(t, err)

	p, err := auth.Authenticate("Bearer alice-secret-0123456789")
	require.NoError(t, err)
	assert.Equal(t, "alice", p.Name)
	p, err = auth.Authenticate("bearer  bob-secret-0123456789 ")
	require.NoError(t, err)
	assert.Equal(t, Principal{Name: "bob", Role: RoleViewer, Tenant: "acme"}, p)
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic alice-secret-0123456789", "Bearer alice-secret-012345678", "alice-secret-0123456789"} {
		_, err := auth.Authenticate(h)
		assert.ErrorIs(t, err, errUnauthenticated, "%q", h)
	}

	empty, err := NewAuth(nil)
	require.NoError(t, err)
	_, err = empty.Authenticate("Bearer anything-at-all-here")
	assert.ErrorIs(t, err, errNoTokens, "no tokens configured: refuse, do not open up")

	p, err = Disabled().Authenticate("")
	require.NoError(t, err)
	assert.Equal(t, Principal{Name: "anonymous", Role: RoleAdmin}, p)
}

func TestRoleChecks(t *testing.T) {
	tokens, err := ParseTokens("x", "v:viewer=viewer-secret-0123456789,o:operator=operator-secret-012345,a:admin=admin-secret-0123456789")
	require.NoError(t, err)
	auth, err := NewAuth(tokens)
	require.NoError(t, err)
	ok := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"caller": principalOf(r.Context()).Name})
	}
	call := func(min Role, header string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/api/x", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		auth.require(min, ok)(rec, req)
		return rec
	}
	for _, tt := range []struct {
		min    Role
		token  string
		status int
	}{
		{RoleViewer, "viewer-secret-0123456789", 200},
		{RoleOperator, "viewer-secret-0123456789", 403},
		{RoleOperator, "operator-secret-012345", 200},
		{RoleAdmin, "operator-secret-012345", 403},
		{RoleAdmin, "admin-secret-0123456789", 200},
		{RoleViewer, "admin-secret-0123456789", 200},
		{RoleViewer, "nope-nope-nope-nope-nope", 401},
	} {
		rec := call(tt.min, "Bearer "+tt.token)
		assert.Equal(t, tt.status, rec.Code, "%s with %s", tt.min, tt.token)
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		assert.True(t, strings.HasPrefix(rec.Body.String(), "{"), rec.Body.String())
		assert.NotContains(t, rec.Body.String(), "secret", "answers never echo a token")
	}
	rec := call(RoleViewer, "")
	assert.Equal(t, 401, rec.Code)
	assert.Equal(t, `Bearer realm="retry-scheduler"`, rec.Header().Get("WWW-Authenticate"))
	assert.Contains(t, call(RoleAdmin, "Bearer operator-secret-012345").Body.String(), "o has the operator role; this needs admin")
}
