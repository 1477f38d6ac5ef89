package ops

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func serveGet(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestReadyzReportsEachCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	ready := false
	h := Handler(reg, nil, map[string]Check{
		"temporal": func(context.Context) error { return nil },
		"bridge": func(context.Context) error {
			if !ready {
				return errors.New("not consuming")
			}
			return nil
		},
	})
	rec := serveGet(h, "/healthz")
	require.Equal(t, http.StatusOK, rec.Code, "a readiness check does not touch liveness")
	require.JSONEq(t, `{"status":"ok"}`, rec.Body.String())
	rec = serveGet(h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"bridge":"not consuming","temporal":"ok"}`, rec.Body.String())
	ready = true
	require.Equal(t, http.StatusOK, serveGet(h, "/readyz").Code)
	require.Equal(t, http.StatusOK, serveGet(h, "/metrics").Code)
}

// A failing live check fails /healthz and /readyz alike, naming itself in both.
func TestHealthzFailsOnALiveCheck(t *testing.T) {
	var fatal error
	h := Handler(prometheus.NewRegistry(),
		map[string]Check{"worker": func(context.Context) error { return fatal }},
		map[string]Check{"temporal": func(context.Context) error { return nil }})

	rec := serveGet(h, "/healthz")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"status":"ok","worker":"ok"}`, rec.Body.String())
	rec = serveGet(h, "/readyz")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"temporal":"ok","worker":"ok"}`, rec.Body.String())

	fatal = errors.New("Namespace gone is not found.")
	rec = serveGet(h, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, `{"status":"unhealthy","worker":"Namespace gone is not found."}`, rec.Body.String())
	rec = serveGet(h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"temporal":"ok","worker":"Namespace gone is not found."}`, rec.Body.String())
}
