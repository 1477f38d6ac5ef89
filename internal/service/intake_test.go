package service

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
)

// Where a bridge runs, its admission control reads the service's task queue from Temporal
// (this fake frontend does not implement the call: the reading says so, and the process runs
// on), and its status is served at GET /intake.
func TestRunBridgeReadsTheEngineLagAndServesIt(t *testing.T) {
	front := startTemporalFake(t, nil)
	cfg := unitConfig(config.ModeAll)
	cfg.IntakeLagInterval = 10 * time.Millisecond
	p := connectedProcess(t, cfg, front.client(t))

	cancel, done := runInBackground(t, p, ops.Disabled())
	require.Eventually(t, func() bool { return front.called("DescribeTaskQueue") >= 2 }, 30*time.Second, 10*time.Millisecond,
		"the admission control reads the task queue's stats")
	require.Eventually(t, func() bool { return p.intake.Status().StatsError != "" }, 30*time.Second, 10*time.Millisecond)
	st := p.intake.Status()
	cancel()
	require.NoError(t, result(t, done))

	assert.Equal(t, "unit-tq", st.TaskQueue)
	assert.Contains(t, st.StatsError, `task queue "unit-tq"`)
	assert.Contains(t, st.StatsError, "DescribeTaskQueue not implemented")
	assert.Equal(t, 5.0, st.BoundSeconds)
	assert.False(t, st.IntakeLimited)

	srv := serve(t, p, ops.Disabled())
	resp, err := http.Get(srv.URL + "/intake")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Contains(t, body, "engine_lag_seconds")
	assert.Equal(t, false, body["intake_limited"])
}

// A worker process has no bridge, so no admission control and no /intake.
func TestHTTPHandlerOfAWorkerHasNoIntake(t *testing.T) {
	p := handlerProcess(t, unitConfig(config.ModeWorker))
	srv := serve(t, p, nil)

	assert.Equal(t, http.StatusNotFound, getStatus(t, srv, "/intake"))
}
