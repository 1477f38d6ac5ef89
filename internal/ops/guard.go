package ops

import (
	"mime"
	"net/http"
	"strconv"
	"time"
)

// DefaultMaxScans is how many list scans (reads of Temporal visibility) run at a time unless
// APIConfig.MaxScans says otherwise.
const DefaultMaxScans = 4

// scanRetryAfter is what a caller turned away by the scan cap is told to wait.
const scanRetryAfter = 2 * time.Second

// BoundedCallTimeout is the longest an API call runs (a bulk call with ?wait=true; the long
// actions run as jobs): the HTTP server's write timeout must exceed it.
const BoundedCallTimeout = bulkTimeout

// errBusy turns a caller away while MaxScans scans run.
var errBusy = &apiError{Status: http.StatusServiceUnavailable, RetryAfter: scanRetryAfter,
	Msg: "too many list scans at once; retry shortly"}

// acquireScan takes one of the MaxScans scan slots, or answers errBusy at once: a scan reads
// up to MaxScan executions from visibility, and a crowd of them would load Temporal for every
// other caller.
func (a *API) acquireScan() (release func(), err error) {
	select {
	case a.scans <- struct{}{}:
		return func() { <-a.scans }, nil
	default:
		return nil, errBusy
	}
}

// mutating is the HTTP methods that change state.
func mutating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// requireJSON answers 415 to a state-changing request not declared application/json. A
// browser sends a cross-site form or plain-text POST without a preflight, but never with
// that content type, so another site cannot make an operator's browser act. A request with
// no body and an Authorization header needs no content type (DELETE /api/dead-letters/{id}
// from curl): a browser sends that header cross-site only after a preflight, which the API
// does not answer.
func requireJSON(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mutating(r.Method) && !bodilessWithCredentials(r) {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType,
					"a "+r.Method+" needs Content-Type: application/json (got "+strconv.Quote(r.Header.Get("Content-Type"))+")")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// bodilessWithCredentials says the request declares no body and no content type, and
// carries an Authorization header.
func bodilessWithCredentials(r *http.Request) bool {
	return r.ContentLength == 0 && r.Header.Get("Content-Type") == "" && r.Header.Get("Authorization") != ""
}
