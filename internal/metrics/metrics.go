// Package metrics wires the process's Prometheus registry: the project's own collectors and
// the Temporal SDK's metrics, which arrive through tally.
package metrics

import (
	"io"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	sdkmetrics "go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"

	"github.com/retry-scheduler/retry-scheduler/internal/buildinfo"
)

// NewRegistry returns a registry with the Go and process collectors and the build's
// identity (BuildInfoName); every component registers on it, never on the global one.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfo(buildinfo.Get()))
	return reg
}

// TemporalHandler reports the SDK's metrics to reg through tally, and the workflows' own
// replay-safe counters (retries_scheduled_total, retries_exhausted_total,
// breaker_transitions_total) to plain collectors on reg. Close the returned closer on shutdown to flush.
func TemporalHandler(reg *prometheus.Registry, onError func(error)) (sdkmetrics.MetricsHandler, io.Closer) {
	// NewReporter, not Configuration.NewReporter: the latter also registers /metrics on
	// http.DefaultServeMux, a hidden global that panics on the second call in one process.
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer:       reg,
		Gatherer:         reg,
		DefaultTimerType: tallyprom.HistogramTimerType,
		OnRegisterError:  onError,
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sanitizeOptions,
	}, time.Second)
	// The naming scope gives the SDK's counters "_total" and its timers (histograms of
	// seconds) "_seconds", as Prometheus names them and Temporal's dashboards expect.
	return newWorkflowHandler(sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), reg), closer
}

// sanitizeOptions are the SDK's Prometheus rules for metric names and label names, but keep
// label values as they are: Prometheus takes any UTF-8 there, and the SDK's options would
// turn the task queue "retry-scheduler" into "retry_scheduler".
var sanitizeOptions = tally.SanitizeOptions{
	NameCharacters:       sdktally.PrometheusSanitizeOptions.NameCharacters,
	KeyCharacters:        sdktally.PrometheusSanitizeOptions.KeyCharacters,
	ValueCharacters:      tally.ValidCharacters{Ranges: []tally.SanitizeRange{{0, unicode.MaxRune}}},
	ReplacementCharacter: tally.DefaultReplacementCharacter,
}
