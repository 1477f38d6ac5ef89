package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// The table names the engine, shows the engine-work columns, the db CPU column only when a
// step measured it, and the mixed phase's account under the table.
func TestPrintTable(t *testing.T) {
	c, err := parseConfig([]string{"-engine", "postgres", "-phases", "sustained,mixed"}, nil)
	assert.NoError(t, err)
	r := &report{Machine: machine{TemporalServer: devserver.EnginePostgres.ServerName()}, Settings: settings{Engine: string(c.Engine), DelayMs: 1000, P99TargetMs: 250, KeepUp: 0.95}}
	work := &engineWork{PersistenceRequests: 4000, PersistencePerRetry: 40, VisibilityWritesPerRetry: 4,
		History: &historySummary{Sampled: 20, PerRetry: shapeFigures{Events: 13, WorkflowTasks: 2}}}
	r.Steps = []step{
		{Phase: phaseSustained, Rate: 50, Sent: 100, Completed: 100, Pass: true, Engine: work,
			CPU: map[string]float64{"server": 1, "db": 0.5}, CPUPerRetry: map[string]float64{"server": 10, "db": 5}},
		{Phase: phaseMixed, Rate: 50, Sent: 100, Completed: 140, Lost: 1, Why: "lost",
			Mixed: &mixedStats{Fates: map[string]int{"delivered": 65, "refail_at_once": 15, "refail_after_window": 15, "exhaust": 5},
				Lateness: map[string]latency{"first": {Count: 100, P50: 40, P99: 120, Max: 200}}, DeadExhausted: 5, Ended: 99}},
	}
	r.finish(false)
	var out bytes.Buffer
	r.printTable(&out)
	text := out.String()
	assert.Contains(t, text, "engine postgres: Temporal server "+devserver.ServerVersion+" on PostgreSQL")
	assert.Contains(t, text, "db cpu ms/retry")
	assert.Contains(t, text, "ev/wft/vis /retry")
	assert.Contains(t, text, "13/2/4")
	assert.Contains(t, text, "no: lost")
	assert.Contains(t, text, "mixed 50/s: 100 messages (65 delivered at once, 15 re-failed at once, 15 after the window, 5 exhausting); 140 retries")
	assert.Contains(t, text, "first 40/120/200 ms (100)")
	assert.NotNil(t, r.Summary.MixedPass)
	assert.False(t, *r.Summary.MixedPass)
	assert.Equal(t, 50, r.Summary.PipelineRate, "the mixed phase does not make the pipeline rate")

	r.Steps[0].CPU = map[string]float64{"server": 1}
	out.Reset()
	r.printTable(&out)
	assert.NotContains(t, out.String(), "db cpu ms/retry", "the dev engine has no db column")
}
