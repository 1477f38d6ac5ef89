// Package promreg registers Prometheus collectors so that building a component twice on one
// registry reuses the collector it already has. A leaf package: the bridge, the activities
// and the broker use it, and the metrics package imports those.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector reg already has under the same
// description. Any other registration error is a programming error and panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
