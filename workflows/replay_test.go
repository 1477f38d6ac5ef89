package workflows_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"retry-scheduler/message"
	"retry-scheduler/worker"
	"retry-scheduler/workflows"
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
			fh, err := os.Open(f)
			require.NoError(t, err)
			defer fh.Close()
			h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
			require.NoError(t, err)
			// The replay runs under the recorded workflow ID, not the replayer's "ReplayId": the
			// jitter is a hash of it, so a jittered delay replays as it was decided.
			err = r.ReplayWorkflowHistoryWithOptions(nil, h, sdkworker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: recordedWorkflowID(t, h)},
			})
			if strings.HasSuffix(f, ".nondeterministic.json") {
				require.ErrorContains(t, err, "nondeterministic", "an edited history must not replay")
				return
			}
			require.NoError(t, err)
		})
	}
}

// recordedWorkflowID is the ID of the workflow that recorded h: a history does not name it,
// but the ID is made from the first report's message (message.WorkflowID), which the start
// input or the first failure-report signal carries.
func recordedWorkflowID(t *testing.T, h *historypb.History) string {
	t.Helper()
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
