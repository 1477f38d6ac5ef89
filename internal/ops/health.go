package ops

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one probe: nil means it passes. A check runs on every request, within a short
// deadline.
type Check func(ctx context.Context) error

// Handler returns the ops routes: /healthz (the process is up: every live check passes; a
// failing one means only a restart helps), /readyz (every live and ready check passes) and
// /metrics (the process registry). Each check answers under its name in the JSON body ("ok"
// or its error), and /healthz adds "status" ("ok" or "unhealthy"); a failing check makes the
// answer 503. Live and ready checks have distinct names, none of them "status".
func Handler(reg *prometheus.Registry, live, ready map[string]Check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		status, body := runChecks(r.Context(), live)
		body["status"] = "ok"
		if status != http.StatusOK {
			body["status"] = "unhealthy"
		}
		writeJSON(w, status, body)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		status, body := runChecks(r.Context(), live, ready)
		writeJSON(w, status, body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// checkTimeout bounds one /healthz or /readyz answer, all its checks together: a probe that
// waits longer is as good as failed.
const checkTimeout = 2 * time.Second

// runChecks runs every check of the sets, in name order, within checkTimeout: 200 when all
// pass, 503 otherwise, and each check's result by name.
func runChecks(ctx context.Context, sets ...map[string]Check) (int, map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	checks := map[string]Check{}
	for _, set := range sets {
		maps.Copy(checks, set)
	}
	status, body := http.StatusOK, map[string]string{}
	for _, n := range slices.Sorted(maps.Keys(checks)) {
		if err := checks[n](ctx); err != nil {
			status, body[n] = http.StatusServiceUnavailable, err.Error()
		} else {
			body[n] = "ok"
		}
	}
	return status, body
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
