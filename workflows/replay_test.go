package workflows_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"retry-scheduler/worker"
)

// TestReplayRecordedHistories replays every history recorded from a real server (see the
// README, "Recording a history"). A change to RetryWorkflow that would break running
// workflows fails here; guard such a change with workflow.GetVersion. Histories named
// *.nondeterministic.json were edited to disagree with the code and must fail, which proves
// the replayer is really checking.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata/histories")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			err := r.ReplayWorkflowHistoryFromJSONFile(nil, f)
			if strings.HasSuffix(f, ".nondeterministic.json") {
				require.ErrorContains(t, err, "nondeterministic", "an edited history must not replay")
				return
			}
			require.NoError(t, err)
		})
	}
}
