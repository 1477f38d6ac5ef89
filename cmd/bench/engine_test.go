package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// A scrape as the Temporal server writes it (lines taken from a dev server), with other
// families around the two the bench reads, and one malformed line of another family that must
// not spoil the sample.
const scrapeText = `# HELP persistence_latency persistence_latency histogram
# TYPE persistence_latency histogram
persistence_latency_bucket{namespace="default",operation="GetNamespace",service_name="worker",le="0.001"} 0
persistence_latency_count{namespace="default",operation="GetNamespace",service_name="worker"} 2
# HELP persistence_requests persistence_requests counter
# TYPE persistence_requests counter
persistence_requests{namespace="_unknown_",operation="GetNamespace",service_name="worker"} 1
persistence_requests{namespace="default",operation="GetNamespace",service_name="frontend"} 2
persistence_requests{namespace="default",operation="CreateWorkflowExecution",service_name="history"} 10
persistence_requests{namespace="default",operation="UpdateWorkflowExecution",service_name="history"} 25
persistence_requests{namespace="system",operation="UpdateShard",service_name="history"} 1
broken_family{oops="unterminated} 1
# HELP visibility_persistence_requests visibility_persistence_requests counter
# TYPE visibility_persistence_requests counter
visibility_persistence_requests{operation="RecordWorkflowExecutionClosed",service_name="history",visibility_index_name="x",visibility_plugin_name="sqlite"} 9
visibility_persistence_requests{operation="RecordWorkflowExecutionStarted",service_name="history",visibility_index_name="x",visibility_plugin_name="sqlite"} 10
visibility_persistence_requests{operation="ListWorkflowExecutions",service_name="frontend",visibility_index_name="x",visibility_plugin_name="sqlite"} 4
`

func TestParseMetricsSumsByOperation(t *testing.T) {
	got, err := parseMetrics(strings.NewReader(scrapeText))
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{
		"GetNamespace": 3, "CreateWorkflowExecution": 10, "UpdateWorkflowExecution": 25, "UpdateShard": 1,
	}, got.persistence, "summed over service and namespace")
	assert.Equal(t, map[string]float64{
		"RecordWorkflowExecutionClosed": 9, "RecordWorkflowExecutionStarted": 10, "ListWorkflowExecutions": 4,
	}, got.visibility)

	empty, err := parseMetrics(strings.NewReader("# HELP up up\nup 1\n"))
	require.NoError(t, err)
	assert.Empty(t, empty.persistence, "a server without the counters yet")
}

func TestFamilyOf(t *testing.T) {
	for line, want := range map[string]string{
		`persistence_requests{operation="x"} 1`:        "persistence_requests",
		`up 1`:                                         "up",
		`# TYPE persistence_requests counter`:          "persistence_requests",
		`# HELP visibility_persistence_requests a b c`: "visibility_persistence_requests",
		`# a comment`:                                  "",
		``:                                             "",
		`persistence_requests_total{operation="x"} 1`:     "persistence_requests_total",
		`persistence_latency_bucket{le="0.001"} 0`:        "persistence_latency_bucket",
		`# TYPE visibility_persistence_latency histogram`: "visibility_persistence_latency",
	} {
		assert.Equal(t, want, familyOf(line), line)
	}
}

func TestVisibilityWrite(t *testing.T) {
	for _, op := range []string{"RecordWorkflowExecutionStarted", "UpsertWorkflowExecution", "RecordWorkflowExecutionClosed", "DeleteWorkflowExecution"} {
		assert.True(t, visibilityWrite(op), op)
	}
	for _, op := range []string{"ListWorkflowExecutions", "CountWorkflowExecutions", "GetWorkflowExecution", "ScanWorkflowExecutions"} {
		assert.False(t, visibilityWrite(op), op)
	}
}

// Two scrapes around ten retries: the growth per operation, the largest first, the writes
// among the visibility calls, and a counter that went down (a restarted server) counts from
// zero.
func TestEngineWorkDelta(t *testing.T) {
	before := metricsSample{
		persistence: map[string]float64{"UpdateWorkflowExecution": 100, "GetNamespace": 5, "UpdateShard": 50},
		visibility:  map[string]float64{"RecordWorkflowExecutionStarted": 3, "ListWorkflowExecutions": 1},
	}
	after := metricsSample{
		persistence: map[string]float64{"UpdateWorkflowExecution": 130, "GetNamespace": 5, "UpdateShard": 4, "CreateWorkflowExecution": 10},
		visibility: map[string]float64{
			"RecordWorkflowExecutionStarted": 13, "UpsertWorkflowExecution": 20, "RecordWorkflowExecutionClosed": 10, "ListWorkflowExecutions": 3,
		},
	}
	var w engineWork
	w.delta(before, after, 10)
	assert.Equal(t, 10, w.Retries)
	assert.Equal(t, 44.0, w.PersistenceRequests, "30 updates + 10 creates + 4 after the reset")
	assert.Equal(t, 4.4, w.PersistencePerRetry)
	assert.Equal(t, []opCount{
		{Operation: "UpdateWorkflowExecution", Count: 30, PerRetry: 3},
		{Operation: "CreateWorkflowExecution", Count: 10, PerRetry: 1},
		{Operation: "UpdateShard", Count: 4, PerRetry: 0.4},
	}, w.TopPersistence, "unchanged operations are left out")
	assert.Equal(t, 40.0, w.VisibilityWrites)
	assert.Equal(t, 4.0, w.VisibilityWritesPerRetry)
	assert.Equal(t, []opCount{
		{Operation: "UpsertWorkflowExecution", Count: 20, PerRetry: 2, Write: true},
		{Operation: "RecordWorkflowExecutionClosed", Count: 10, PerRetry: 1, Write: true}, // ties by name
		{Operation: "RecordWorkflowExecutionStarted", Count: 10, PerRetry: 1, Write: true},
		{Operation: "ListWorkflowExecutions", Count: 2, PerRetry: 0.2},
	}, w.Visibility)

	var none engineWork
	none.delta(before, after, 0)
	assert.Zero(t, none.PersistencePerRetry, "no retries: no per-retry figure")
	assert.Equal(t, 44.0, none.PersistenceRequests)
}

func TestEngineMeterReportsAnUnreachableServer(t *testing.T) {
	m := newEngineMeter(t.Context(), "http://127.0.0.1:1/metrics")
	m.stop(t.Context())
	w := m.work(5)
	require.NotEmpty(t, w.Errors)
	assert.Contains(t, w.Errors[0], "scrape http://127.0.0.1:1/metrics")
	assert.Zero(t, w.PersistenceRequests)
	assert.Equal(t, "-", dbOpsCell(step{Engine: w}))
	assert.Equal(t, "-/-/-", engineCell(step{Engine: w}))
}

// A recorded history of the product: a start delay, the republish (a local activity's
// marker), the quiet-window timer, two search-attribute upserts, two workflow tasks.
func TestShapeOfRecordedHistory(t *testing.T) {
	f, err := os.Open("../../workflows/testdata/histories/delivered-start-delay.json")
	require.NoError(t, err)
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	assert.Equal(t, historyShape{Runs: 1, Events: 13, WorkflowTasks: 2, Timers: 1, Markers: 1, Upserts: 2}, shapeOf(h.GetEvents()))
}

func TestSummarizeShapes(t *testing.T) {
	one := historyShape{Runs: 1, Events: 13, WorkflowTasks: 2, Timers: 1, Markers: 1, Upserts: 2}
	two := historyShape{Runs: 2, Events: 30, WorkflowTasks: 5, Timers: 2, Markers: 2, Upserts: 6}
	s := summarizeShapes([]sampledWorkflow{
		{id: "a", retries: 1, runs: 1, fate: "delivered", shape: one},
		{id: "b", retries: 2, runs: 2, fate: "refail_after_window", shape: two},
		{id: "c", retries: 1, runs: 1, fate: "delivered"}, // its history could not be read
	})
	assert.Equal(t, 2, s.Sampled)
	assert.Equal(t, 1.5, s.Runs)
	assert.Equal(t, 1.5, s.Retries)
	assert.Equal(t, shapeFigures{Events: 21.5, WorkflowTasks: 3.5, Timers: 1.5, Markers: 1.5, Upserts: 4}, s.PerWorkflow)
	assert.Equal(t, shapeFigures{Events: 14.3, WorkflowTasks: 2.3, Timers: 1, Markers: 1, Upserts: 2.7}, s.PerRetry, "43 events over 3 retries")
	require.Len(t, s.ByFate, 2)
	assert.Equal(t, shapeFigures{Events: 15, WorkflowTasks: 2.5, Timers: 1, Markers: 1, Upserts: 3}, s.ByFate["refail_after_window"].PerRetry)
	assert.Equal(t, 1, s.ByFate["delivered"].Sampled)
	assert.Nil(t, s.ByFate["delivered"].ByFate)

	single := summarizeShapes([]sampledWorkflow{{retries: 1, shape: one}})
	assert.Nil(t, single.ByFate, "no fates, no split")
	assert.Equal(t, shapeFigures{Events: 13, WorkflowTasks: 2, Timers: 1, Markers: 1, Upserts: 2}, single.PerRetry)
	assert.Equal(t, "13/2/-", engineCell(step{Engine: &engineWork{History: single}}), "no metrics: no visibility figure")
}

func TestSpread(t *testing.T) {
	var seqs []int
	for i := 99; i >= 0; i-- {
		seqs = append(seqs, i)
	}
	assert.Equal(t, []int{10, 30, 50, 70, 90}, spread(seqs, 5), "evenly over the range, sorted")
	assert.Equal(t, []int{1, 2, 3}, spread([]int{3, 1, 2}, 5), "all when fewer")
	assert.Empty(t, spread(nil, 5))
	assert.Equal(t, []int{50}, spread(seqs, 1))
}
