// Package metrics wires the process's Prometheus registry: the project's own collectors and
// the Temporal SDK's metrics, which arrive through tally.
package metrics

import (
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	sdkmetrics "go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// NewRegistry returns a registry with the Go and process collectors; every component
// registers on it, never on the global one.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// TemporalHandler reports the SDK's metrics (and replay-safe metrics from workflow code) to
// reg through tally. Close the returned closer on shutdown to flush.
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
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	return sdktally.NewMetricsHandler(scope), closer
}
