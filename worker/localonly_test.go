package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The worker polls no activity tasks (LocalActivityWorkerOnly): that holds only while no
// workflow schedules a non-local activity, which would then wait for ever.
func TestWorkflowsScheduleOnlyLocalActivities(t *testing.T) {
	require.True(t, SDKOptions(Options{}).LocalActivityWorkerOnly)
	// The workflows of every package this worker registers: workflows and jobs.
	var files []string
	for _, dir := range []string{"../workflows", "../internal/jobs"} {
		fs, err := filepath.Glob(dir + "/*.go")
		require.NoError(t, err)
		files = append(files, fs...)
	}
	require.NotEmpty(t, files)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NotContains(t, string(b), "workflow.ExecuteActivity(", "%s schedules a non-local activity: drop LocalActivityWorkerOnly", f)
	}
}
