package workflows_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/worker"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// historiesDir holds the histories recorded from a real server (CONTRIBUTING.md, "Changing workflow code: replay histories").
var historiesDir = filepath.Join("testdata", "histories")

// unreplayable lists the recorded histories that the code cannot replay, each with why that
// is safe. Their names end in .unreplayable.json; each must still fail as nondeterministic, so
// a change that makes one replay again shows here.
var unreplayable = map[string]string{
	// Recorded at 0bbf799 and replaced in 8f5387a, which let a run started by signal-with-start
	// with a start delay take its report without arming the first-report timeout timer, and
	// re-recorded delivered-signal-with-start-delay.json instead of gating the change. Neither
	// history has a version marker, so no GetVersion gate can tell the two shapes apart: a gate
	// now would break every run started since 8f5387a to keep these. Runs of this shape came
	// only from 8d41d91 to 9fe65f6, development commits that no release contains.
	"delivered-signal-with-start-delay-timeout-timer.unreplayable.json": "first-report timer before 8f5387a",
}

// TestReplayRecordedHistories replays every recorded history. A change to RetryWorkflow that
// would break running workflows fails here; guard such a change with workflow.GetVersion.
// Histories named *.nondeterministic.json were edited to disagree with the code and must fail,
// which proves the replayer is really checking; *.unreplayable.json are listed in unreplayable.
// With REPLAY_HISTORIES set, the histories exported from a deployment must replay too.
func TestReplayRecordedHistories(t *testing.T) {
	files := recordedHistories(t)
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			err := replayHistory(t, f)
			switch {
			case strings.HasSuffix(name, ".nondeterministic.json"):
				require.ErrorContains(t, err, "nondeterministic", "an edited history must not replay")
			case strings.HasSuffix(name, ".unreplayable.json"):
				why, listed := unreplayable[name]
				require.True(t, listed, "%s is not listed in unreplayable with why it need not replay", name)
				require.ErrorContains(t, err, "nondeterministic", "%s replays again (%s): rename it", name, why)
			default:
				require.NoError(t, err)
			}
		})
	}
	for name := range unreplayable {
		require.True(t, strings.HasSuffix(name, ".unreplayable.json"), "%s: an unreplayable history's name ends in .unreplayable.json", name)
		require.Contains(t, files, filepath.Join(historiesDir, name), "unreplayable lists a history that is not stored")
	}
	replayExportedHistories(t)
}

// replayHistoriesEnv names a directory of histories exported from a deployment (`temporal
// workflow show -w ID -o json > dir/file.json`) that the code about to be deployed must replay.
const replayHistoriesEnv = "REPLAY_HISTORIES"

// replayExportedHistories replays every history in $REPLAY_HISTORIES, each as the subtest
// exported/<file>, whatever its name: they are runs that exist, so each must replay. Without
// the variable there are none. A set variable that names no directory, or one without *.json,
// fails: a wrong path must not pass as "nothing to replay".
func replayExportedHistories(t *testing.T) {
	dir, set := os.LookupEnv(replayHistoriesEnv)
	if !set {
		return
	}
	files, err := historyFiles(dir)
	hint := ""
	if !filepath.IsAbs(dir) {
		hint = " (a relative path is read from ./workflows/, where go test runs: give an absolute one)"
	}
	require.NoError(t, err, "%s=%q names no directory of exported histories%s", replayHistoriesEnv, dir, hint)
	t.Logf("replaying %d exported histories from %s", len(files), dir)
	for _, f := range files {
		t.Run("exported/"+filepath.Base(f), func(t *testing.T) {
			require.NoError(t, replayHistory(t, f), "%s does not replay on this code: gate the change with workflow.GetVersion", f)
		})
	}
}

// historyFiles are the *.json files of dir, sorted; an error when dir is empty (as a name),
// cannot be read, or holds none.
func historyFiles(dir string) ([]string, error) {
	if dir == "" {
		return nil, errors.New("no directory named")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read history directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.json history in %s", dir)
	}
	slices.Sort(files)
	return files, nil
}

// TestHistoryFilesRefusesAWrongPath: REPLAY_HISTORIES naming nothing, a missing directory, a
// file, or a directory without histories is an error, not an empty list that would pass.
func TestHistoryFilesRefusesAWrongPath(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600))
	}
	for _, bad := range []string{"", filepath.Join(dir, "missing")} {
		_, err := historyFiles(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err := historyFiles(dir)
	require.ErrorContains(t, err, "no *.json history in "+dir, "an empty directory")

	write("notes.txt")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "old.json"), 0o700))
	_, err = historyFiles(dir)
	require.ErrorContains(t, err, "no *.json history", "only a text file and a directory named *.json")
	_, err = historyFiles(filepath.Join(dir, "notes.txt"))
	require.Error(t, err, "a file, not a directory")

	write("b.json")
	write("a.json")
	files, err := historyFiles(dir)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")}, files)
}

// recordedHistories are the paths of the stored histories.
func recordedHistories(t *testing.T) []string {
	t.Helper()
	files, err := historyFiles(historiesDir)
	require.NoError(t, err)
	return files
}

// replays says whether the history in file f is one the code must replay.
func replays(f string) bool {
	return !strings.HasSuffix(f, ".nondeterministic.json") && !strings.HasSuffix(f, ".unreplayable.json")
}

// loadHistory reads the recorded history in file f.
func loadHistory(t *testing.T, f string) *historypb.History {
	t.Helper()
	fh, err := os.Open(f)
	require.NoError(t, err)
	defer fh.Close()
	h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
	require.NoError(t, err, "read %s", f)
	require.NotEmpty(t, h.GetEvents(), "%s holds no history events", f)
	return h
}

// replayHistory replays the history in file f with RetryWorkflow, through the interceptors
// given.
func replayHistory(t *testing.T, f string, interceptors ...interceptor.WorkerInterceptor) error {
	t.Helper()
	r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{Interceptors: interceptors})
	require.NoError(t, err)
	worker.RegisterWorkflows(r)
	h := loadHistory(t, f)
	// The replay runs under the recorded workflow ID, not the replayer's "ReplayId": the
	// jitter is a hash of it, so a jittered delay replays as it was decided.
	return r.ReplayWorkflowHistoryWithOptions(nil, h, sdkworker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: recordedWorkflowID(t, h)},
	})
}

// recordedWorkflowID is the ID of the workflow that recorded h. Servers since 1.21 write it in
// the started event (a BreakerWorkflow's history has no report to make it from); before, it is
// made from the first report's message (message.WorkflowID), which the start input or the
// first failure-report signal carries.
func recordedWorkflowID(t *testing.T, h *historypb.History) string {
	t.Helper()
	if id := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowId(); id != "" {
		return id
	}
	dc := converter.GetDefaultDataConverter()
	for _, e := range h.GetEvents() {
		var rep *message.FailureReport
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			var in workflows.Input
			p := e.GetWorkflowExecutionStartedEventAttributes().GetInput()
			require.NoError(t, dc.FromPayloads(p, &in))
			rep = in.Report
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			a := e.GetWorkflowExecutionSignaledEventAttributes()
			if a.GetSignalName() != workflows.SignalFailureReport {
				continue
			}
			rep = &message.FailureReport{}
			require.NoError(t, dc.FromPayloads(a.GetInput(), rep))
		}
		if rep != nil {
			return message.WorkflowID(rep.Message.OriginalQueue, rep.Message.MessageID)
		}
	}
	t.Fatal("no failure report in the history")
	return ""
}
