package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// queueValues are the queue label values of family name on reg.
func queueValues(t *testing.T, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	f := families(t, reg)[name]
	require.NotNil(t, f, name)
	var out []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "queue" {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

func TestWorkflowHandlerBoundsQueueLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	labels.Queues(reg).SetMax(2)
	sdk := &recordingHandler{counters: map[string]int64{}}
	h := newWorkflowHandler(sdk, reg)

	for _, q := range []string{"a", "b", "c", "d"} {
		h.WithTags(map[string]string{"queue": q}).Counter(workflows.MetricRetriesScheduled).Inc(1)
	}
	scoped := h.WithTags(map[string]string{"queue": "e"}).(*workflowHandler)

	assert.ElementsMatch(t, []string{"a", "b", labels.Overflow}, queueValues(t, reg, workflows.MetricRetriesScheduled))
	assert.Equal(t, labels.Overflow, scoped.sdk.(*recordingHandler).tags["queue"], "the SDK's scope gets the bounded value too")
	assert.Equal(t, 3.0, families(t, reg)[labels.OverflowMetric].GetMetric()[0].GetCounter().GetValue())
}

func TestOneQueueCeilingForTheProcess(t *testing.T) {
	reg := prometheus.NewRegistry()
	labels.Queues(reg).SetMax(2)
	h := newWorkflowHandler(&recordingHandler{counters: map[string]int64{}}, reg)
	acts := activities.NewMetrics(reg)
	_ = bridge.NewMetrics(reg)

	h.WithTags(map[string]string{"queue": "a"}).Counter(workflows.MetricRetriesScheduled).Inc(1)
	acts.RetriesExecuted.WithLabelValues("a", "success") // admitted by the handler already
	a := activities.NewMetrics(reg)
	assert.Same(t, acts.RetriesExecuted, a.RetriesExecuted)
	h.WithTags(map[string]string{"queue": "b"}).Counter(workflows.MetricRetriesScheduled).Inc(1)
	h.WithTags(map[string]string{"queue": "c"}).Counter(workflows.MetricRetriesScheduled).Inc(1)

	assert.ElementsMatch(t, []string{"a", "b", labels.Overflow}, queueValues(t, reg, workflows.MetricRetriesScheduled))
	assert.Equal(t, labels.Overflow, labels.Queues(reg).Queue("z"), "the bridge and the activities share the one ceiling")
}
