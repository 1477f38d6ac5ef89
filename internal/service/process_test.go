package service

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

// Each mode runs its parts: all three in all, the worker alone in worker, the bridge and the
// ops API in bridge.
func TestProcessModes(t *testing.T) {
	for _, tt := range []struct {
		mode                string
		ops, worker, bridge bool
	}{
		{config.ModeAll, true, true, true},
		{config.ModeWorker, false, true, false},
		{config.ModeBridge, true, false, true},
	} {
		p := &process{cfg: config.Config{Mode: tt.mode}}
		assert.Equal(t, tt.ops, p.runsOps(), tt.mode)
		assert.Equal(t, tt.worker, p.runsWorker(), tt.mode)
		assert.Equal(t, tt.bridge, p.runsBridge(), tt.mode)
	}
}

// Without the OTEL_* variables tracing is off: the Temporal client gets no interceptor, and
// the flush is a no-op that returns.
func TestProcessTracingOffAddsNoInterceptor(t *testing.T) {
	tracingOff(t)
	p := &process{cfg: config.Config{ServiceName: "retry-scheduler"}, logger: discard}
	flush, err := p.setupTracing(context.Background())
	require.NoError(t, err)
	assert.Empty(t, p.interceptors)
	flush()
}
