package broker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The worker and the bridge both ask for the counter on one registry: they share it, so a
// failure counted by either shows in the one series.
func TestDeadLetterPublishFailuresIsOneCounterPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	worker := DeadLetterPublishFailures(reg)
	bridge := DeadLetterPublishFailures(reg)
	assert.Same(t, worker, bridge)

	worker.WithLabelValues("retry.dead").Inc()
	bridge.WithLabelValues("retry.dead").Inc()
	fs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, fs, 1)
	assert.Equal(t, DeadLetterPublishFailuresName, fs[0].GetName())
	require.Len(t, fs[0].GetMetric(), 1)
	m := fs[0].GetMetric()[0]
	assert.Equal(t, 2.0, m.GetCounter().GetValue())
	require.Len(t, m.GetLabel(), 1)
	assert.Equal(t, "queue", m.GetLabel()[0].GetName())
	assert.Equal(t, "retry.dead", m.GetLabel()[0].GetValue())
}

func TestDeadLetterPublishFailuresWithoutARegistryIsUnregistered(t *testing.T) {
	a, b := DeadLetterPublishFailures(nil), DeadLetterPublishFailures(nil)
	assert.NotSame(t, a, b)
	reg := prometheus.NewRegistry()
	assert.NoError(t, reg.Register(a), "a is free to register: nothing holds it")
}
