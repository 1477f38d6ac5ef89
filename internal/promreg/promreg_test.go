package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
)

func TestRegisterReusesTheCollectorTheRegistryHas(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "things_total", Help: "Things."}
	a := Register(reg, prometheus.NewCounterVec(opts, []string{"kind"}))
	b := Register(reg, prometheus.NewCounterVec(opts, []string{"kind"}))
	assert.Same(t, a, b)
	assert.Panics(t, func() {
		Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "things_total", Help: "Other help."}, []string{"other"}))
	}, "a clash that is not the same collector is a bug")
}
