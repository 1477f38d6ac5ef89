package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a gauge or counter (prometheus/testutil would add a dependency to go.mod).
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatalf("read metric: %v", err)
	}
	switch {
	case d.Gauge != nil:
		return d.GetGauge().GetValue()
	case d.Counter != nil:
		return d.GetCounter().GetValue()
	}
	t.Fatalf("not a gauge or counter: %v", &d)
	return 0
}

// families gathers reg by name.
func families(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}
