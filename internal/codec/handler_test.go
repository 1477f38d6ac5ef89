package codec

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
)

const (
	testToken = "s3cret-codec-token-0123456789"
	uiOrigin  = "http://127.0.0.1:8233"
)

func testServer(t *testing.T) (*httptest.Server, *Codec) {
	t.Helper()
	c, err := New(map[string][]byte{"k1": newKey(t)}, "k1")
	require.NoError(t, err)
	h, err := Handler(c, HandlerOptions{Token: testToken, AllowedOrigins: []string{uiOrigin}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/codec/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, c
}

func post(t *testing.T, url, auth string, body []byte, origin string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", "default")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func sealedBody(t *testing.T, c *Codec, v any) []byte {
	t.Helper()
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
	ps, err := dc.ToPayloads(v)
	require.NoError(t, err)
	b, err := protojson.Marshal(ps)
	require.NoError(t, err)
	return b
}

func TestHandlerDecodesWithToken(t *testing.T) {
	srv, c := testServer(t)
	resp := post(t, srv.URL+"/codec/decode", "Bearer "+testToken, sealedBody(t, c, secret), uiOrigin)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, uiOrigin, resp.Header.Get("Access-Control-Allow-Origin"))

	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var ps commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(raw, &ps))
	var got report
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(&ps, &got))
	assert.Equal(t, secret, got)
}

func TestHandlerEncodeThenDecode(t *testing.T) {
	srv, _ := testServer(t)
	plain, err := converter.GetDefaultDataConverter().ToPayloads("typed in the CLI")
	require.NoError(t, err)
	body, err := protojson.Marshal(plain)
	require.NoError(t, err)

	enc := post(t, srv.URL+"/codec/encode", "Bearer "+testToken, body, "")
	require.Equal(t, http.StatusOK, enc.StatusCode)
	sealed, err := io.ReadAll(enc.Body)
	require.NoError(t, err)
	assert.NotContains(t, string(sealed), "typed in the CLI")
	assert.Contains(t, string(sealed), `"encoding":"YmluYXJ5L2VuY3J5cHRlZA=="`, `metadata "binary/encrypted", base64`)

	dec := post(t, srv.URL+"/codec/decode", "Bearer "+testToken, sealed, "")
	require.Equal(t, http.StatusOK, dec.StatusCode)
	var ps commonpb.Payloads
	raw, _ := io.ReadAll(dec.Body)
	require.NoError(t, protojson.Unmarshal(raw, &ps))
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(&ps, &s))
	assert.Equal(t, "typed in the CLI", s)
}

func TestHandlerRefusesWithoutToken(t *testing.T) {
	srv, c := testServer(t)
	body := sealedBody(t, c, secret)
	for name, auth := range map[string]string{
		"none":            "",
		"wrong token":     "Bearer not-the-token",
		"token prefix":    "Bearer " + testToken[:10],
		"token plus more": "Bearer " + testToken + "x",
		"basic scheme":    "Basic " + testToken,
		"bare token":      testToken,
	} {
		t.Run(name, func(t *testing.T) {
			resp := post(t, srv.URL+"/codec/decode", auth, body, uiOrigin)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			assert.Equal(t, `Bearer realm="codec"`, resp.Header.Get("WWW-Authenticate"))
			raw, _ := io.ReadAll(resp.Body)
			assert.NotContains(t, string(raw), "Privet")
			// The browser must still see the 401 rather than an opaque CORS failure.
			assert.Equal(t, uiOrigin, resp.Header.Get("Access-Control-Allow-Origin"))
		})
	}
	t.Run("bearer scheme is case-insensitive", func(t *testing.T) {
		resp := post(t, srv.URL+"/codec/decode", "bearer "+testToken, body, "")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

func TestHandlerCORS(t *testing.T) {
	srv, _ := testServer(t)
	preflight := func(origin string) *http.Response {
		req, err := http.NewRequest(http.MethodOptions, srv.URL+"/codec/decode", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-namespace")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	ok := preflight(uiOrigin)
	assert.Equal(t, http.StatusNoContent, ok.StatusCode)
	assert.Equal(t, uiOrigin, ok.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "true", ok.Header.Get("Access-Control-Allow-Credentials"))
	allowHeaders := strings.ToLower(ok.Header.Get("Access-Control-Allow-Headers"))
	for _, h := range []string{"authorization", "content-type", "x-namespace"} {
		assert.Contains(t, allowHeaders, h)
	}
	assert.Contains(t, ok.Header.Get("Access-Control-Allow-Methods"), "POST")

	other := preflight("http://evil.example")
	assert.Equal(t, http.StatusForbidden, other.StatusCode)
	assert.Empty(t, other.Header.Get("Access-Control-Allow-Origin"))
}

func TestHandlerBadRequests(t *testing.T) {
	srv, _ := testServer(t)
	t.Run("GET", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/codec/decode", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	})
	t.Run("not JSON", func(t *testing.T) {
		resp := post(t, srv.URL+"/codec/decode", "Bearer "+testToken, []byte("{nope"), "")
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
	t.Run("tampered payload", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"payloads": []any{map[string]any{
			"metadata": map[string]string{"encoding": "YmluYXJ5L2VuY3J5cHRlZA==", "encryption-key-id": "azE="},
			"data":     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		}}})
		resp := post(t, srv.URL+"/codec/decode", "Bearer "+testToken, body, "")
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		raw, _ := io.ReadAll(resp.Body)
		assert.Contains(t, string(raw), "decrypt payload")
	})
	t.Run("unknown path", func(t *testing.T) {
		resp := post(t, srv.URL+"/codec/other", "Bearer "+testToken, []byte(`{}`), "")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

func TestHandlerNeedsToken(t *testing.T) {
	c, err := New(map[string][]byte{"k1": newKey(t)}, "k1")
	require.NoError(t, err)
	_, err = Handler(c, HandlerOptions{})
	require.ErrorContains(t, err, "token is required")
}

// FuzzHandler: the codec endpoint parses request bodies from the network; with or without
// the token, any body gets an answer (never a panic) and a 200 only with the token.
func FuzzHandler(f *testing.F) {
	c, err := New(map[string][]byte{"k1": bytes.Repeat([]byte{3}, KeySize)}, "k1")
	if err != nil {
		f.Fatal(err)
	}
	h, err := Handler(c, HandlerOptions{Token: testToken, AllowedOrigins: []string{uiOrigin}, MaxBodyBytes: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"payloads":[{"metadata":{"encoding":"YmluYXJ5L2VuY3J5cHRlZA=="},"data":"AAAA"}]}`), "/codec/decode", true)
	f.Add([]byte(`{"payloads":[{"metadata":{"encoding":"anNvbi9wbGFpbg=="},"data":"IngiCg=="}]}`), "/codec/encode", true)
	f.Add([]byte(`{`), "/codec/decode", false)
	f.Fuzz(func(t *testing.T, body []byte, path string, withToken bool) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req := httptest.NewRequest(http.MethodPost, "http://codec.test/", bytes.NewReader(body))
		req.URL.Path = path
		if withToken {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !withToken && rec.Code != http.StatusUnauthorized && !strings.HasSuffix(path, "/login") {
			t.Fatalf("answered %d without the token", rec.Code)
		}
	})
}

// The Web UI cannot add a header of its own: a browser logs in once at /codec/login, and the
// cookie it gets (a digest, not the token) authenticates its codec requests.
func TestHandlerCookieLogin(t *testing.T) {
	srv, c := testServer(t)
	noRedirect := &http.Client{}

	resp, err := noRedirect.Get(srv.URL + "/codec/login")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(page), `<form method="post">`)

	resp, err = noRedirect.PostForm(srv.URL+"/codec/login", map[string][]string{"token": {"wrong"}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Empty(t, resp.Cookies())

	resp, err = noRedirect.PostForm(srv.URL+"/codec/login", map[string][]string{"token": {testToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	assert.Equal(t, CookieName, ck.Name)
	assert.True(t, ck.HttpOnly)
	assert.Equal(t, http.SameSiteLaxMode, ck.SameSite)
	assert.Equal(t, "/codec/", ck.Path)
	assert.NotContains(t, ck.Value, testToken)

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/codec/decode", bytes.NewReader(sealedBody(t, c, secret)))
	req.AddCookie(ck)
	req.Header.Set("Origin", uiOrigin)
	dec, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	dec.Body.Close()
	assert.Equal(t, http.StatusOK, dec.StatusCode)

	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/codec/decode", bytes.NewReader(sealedBody(t, c, secret)))
	req.AddCookie(&http.Cookie{Name: CookieName, Value: testToken})
	bad, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	bad.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, bad.StatusCode, "the raw token is not a cookie")
}
