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

func TestReadyzReportsEachCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	ready := false
	h := Handler(reg, map[string]Check{
		"temporal": func(context.Context) error { return nil },
		"bridge": func(context.Context) error {
			if !ready {
				return errors.New("not consuming")
			}
			return nil
		},
	})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	require.Equal(t, http.StatusOK, get("/healthz").Code)
	rec := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"bridge":"not consuming","temporal":"ok"}`, rec.Body.String())
	ready = true
	require.Equal(t, http.StatusOK, get("/readyz").Code)
	require.Equal(t, http.StatusOK, get("/metrics").Code)
}
