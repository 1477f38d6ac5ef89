package ops

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A state-changing call not declared JSON is refused before anything runs: a cross-site
// form or plain-text POST (which a browser sends without asking) cannot purge dead letters.
func TestStateChangingCallsNeedJSON(t *testing.T) {
	h := newHarness(t, item("orders", "d1", workflows.StatusDead, t0, ""))
	id := item("orders", "d1", workflows.StatusDead, t0, "").WorkflowID
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
		for _, call := range []struct{ method, path string }{
			{"POST", "/api/dead-letters/purge"},
			{"POST", "/api/messages/" + id + "/discard"},
			{"DELETE", "/api/dead-letters/" + id},
			{"PUT", "/api/dead-letters/purge"},
			{"PATCH", "/api/dead-letters/purge"},
		} {
			req := httptest.NewRequest(call.method, call.path, strings.NewReader(`{"queue":"orders","reason":"x"}`))
			req.Header.Set("Authorization", "Bearer "+secrets["a"])
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, req)
			assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, "%s %s as %q", call.method, call.path, ct)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var out map[string]string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
			assert.Contains(t, out["error"], "Content-Type: application/json")
		}
	}
	assert.Equal(t, workflows.StatusDead, h.fake.wfs[id].Status, "nothing was purged")

	// JSON with a charset is JSON; reads need no content type.
	req := httptest.NewRequest("POST", "/api/dead-letters/purge", strings.NewReader(`{"dry_run":true}`))
	req.Header.Set("Authorization", "Bearer "+secrets["a"])
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	code, _ := h.do("v", "GET", "/api/dead-letters", "")
	assert.Equal(t, http.StatusOK, code)
}

// A call with no body needs no content type when it carries credentials (a browser sends
// an Authorization header cross-site only after a preflight); without them it still does.
func TestBodilessCallsWithCredentialsNeedNoContentType(t *testing.T) {
	h := newHarness(t, item("orders", "d1", workflows.StatusDead, t0, ""))
	id := item("orders", "d1", workflows.StatusDead, t0, "").WorkflowID

	req := httptest.NewRequest("DELETE", "/api/dead-letters/"+id, nil)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, "no credentials: %s", rec.Body.String())
	assert.Equal(t, workflows.StatusDead, h.fake.wfs[id].Status)

	req = httptest.NewRequest("DELETE", "/api/dead-letters/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+secrets["a"])
	rec = httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, workflows.StatusDiscarded, h.fake.wfs[id].Status)
}

// blockingTemporal holds every visibility list until released, telling when one is waiting.
type blockingTemporal struct {
	*fakeTemporal
	entered chan struct{}
	release chan struct{}
}

func (b *blockingTemporal) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.fakeTemporal.ListWorkflow(ctx, req)
}

// Past MaxScans scans at a time, a list is answered 503 with Retry-After at once; when the
// scan ends, lists are served again.
func TestListScansAreCapped(t *testing.T) {
	bt := &blockingTemporal{fakeTemporal: newFake(item("orders", "d1", workflows.StatusDead, t0, "")),
		entered: make(chan struct{}), release: make(chan struct{})}
	api, err := NewAPI(APIConfig{Client: bt, Auth: Disabled(), TaskQueue: "tq", MaxScans: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return t0 }})
	require.NoError(t, err)
	mux := Handler(prometheus.NewRegistry(), nil, nil)
	api.Register(mux)

	first := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/dead-letters", nil))
		first <- rec
	}()
	<-bt.entered // the first scan holds the only slot

	for _, path := range []string{"/api/retry-queue", "/api/dead-letters", "/api/delivered", "/api/breakers"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
		assert.Equal(t, "2", rec.Header().Get("Retry-After"), path)
		var out map[string]string
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), path)
		assert.Contains(t, out["error"], "too many list scans", path)
	}
	// A replay is a job: it pages through its matches on the worker and takes no slot here.
	req := httptest.NewRequest("POST", "/api/dead-letters/replay", strings.NewReader(`{"queue":"orders","reason":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())

	close(bt.release)
	assert.Equal(t, http.StatusOK, (<-first).Code)
	go func() { <-bt.entered }()
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/dead-letters", nil))
	assert.Equal(t, http.StatusOK, rec.Code, "the slot is free again")
}
