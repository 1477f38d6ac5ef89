package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/retry-scheduler/retry-scheduler/internal/buildinfo"
)

// BuildInfoName is the build's identity as a series, with the usual build_info shape
// (constant 1, the identity in labels). The prefix keeps it apart from other exporters'
// build_info in a shared Prometheus.
const BuildInfoName = "retry_scheduler_build_info"

// newBuildInfo is the BuildInfoName gauge of info.
func newBuildInfo(info buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: BuildInfoName,
		Help: "Always 1; labelled with the build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version":   info.Version,
			"revision":  info.Revision,
			"goversion": info.GoVersion,
		},
	})
	g.Set(1)
	return g
}
