package labels

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQueueLimiterCeiling(t *testing.T) {
	l := NewQueueLimiter(2)
	assert.Equal(t, "a", l.Queue("a"))
	assert.Equal(t, "b", l.Queue("b"))
	assert.Equal(t, Overflow, l.Queue("c"), "past the ceiling")
	assert.Equal(t, Overflow, l.Queue("d"))
	assert.Equal(t, "a", l.Queue("a"), "an admitted queue keeps its value")
	assert.Equal(t, Overflow, l.Queue("c"), "an overflowed queue is never admitted later")
	assert.Equal(t, 3.0, value(t, l.overflow))
	assert.True(t, l.Admitted("b"))
	assert.False(t, l.Admitted("e"))
}

func TestQueueLimiterDefaults(t *testing.T) {
	l := NewQueueLimiter(0)
	assert.Equal(t, DefaultMaxQueues, l.Max())
	for i := range DefaultMaxQueues {
		require.Equal(t, fmt.Sprint(i), l.Queue(fmt.Sprint(i)))
	}
	assert.Equal(t, Overflow, l.Queue("one-more"))
}

func TestQueuesIsOnePerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := Queues(reg)
	a.SetMax(1)
	b := Queues(reg)
	assert.Same(t, a, b, "every component of a process shares the ceiling")
	assert.Equal(t, "x", b.Queue("x"))
	assert.Equal(t, Overflow, a.Queue("y"))
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, families, 1)
	assert.Equal(t, OverflowMetric, families[0].GetName())
	assert.Equal(t, 1.0, families[0].GetMetric()[0].GetCounter().GetValue())
	assert.NotSame(t, Queues(nil), Queues(nil))
	assert.NotSame(t, a, Queues(prometheus.NewRegistry()))
}

func TestQueueLimiterConcurrent(t *testing.T) {
	l := NewQueueLimiter(50)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				l.Queue(fmt.Sprint(g*100 + i))
			}
		})
	}
	wg.Wait()
	assert.Len(t, l.seen, 50)
	assert.Equal(t, 750.0, value(t, l.overflow))
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
