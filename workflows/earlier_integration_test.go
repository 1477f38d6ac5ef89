//go:build integration

package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// noEarlierRunHistory names the recorded history of TestLaterReportWithoutEarlierRunOnADevServer.
const noEarlierRunHistory = "late-report-without-earlier-run"

// askedHistory is a History that fails every look-up, as visibility does while it lists no
// earlier run, and counts them.
type askedHistory struct{ asked chan string }

func (h askedHistory) PriorAttempts(_ context.Context, _, _, earlierRunID string) ([]message.Attempt, error) {
	h.asked <- earlierRunID
	return nil, errors.New("no earlier run: no closed run listed yet")
}

// A report that continues a count of a message with no run left (its last run's retention
// over, say) is handed "no earlier run" by the bridge, and the run it starts looks nothing up:
// no PriorAttempts local activity, the gate's Version marker instead (the current revision
// does not include it yet); the retry goes out and is delivered. With RECORD_HISTORIES set,
// its history is written there (the gate's new branch) for the replay tests.
func TestLaterReportWithoutEarlierRunOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	taskQueue := devserver.UniqueName("noearlier")
	pub := &queuePublisher{}
	hist := askedHistory{asked: make(chan string, 8)}
	t.Cleanup(startWorker(t, c, taskQueue, &activities.Activities{Publisher: pub, History: hist, Logger: discardLogger()}))
	reports := &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: time.Hour}
	id := message.WorkflowID(pathsQueue, taskQueue)
	require.NoError(t, reports.Report(ctx, message.FailureReport{
		Message:    message.Message{MessageID: taskQueue, Payload: []byte("x"), OriginalQueue: pathsQueue},
		RetryCount: 1, RetryKey: workflows.RetryKey(taskQueue, 1),
		Failure: policy.Failure{Category: "transient", Reason: "503"},
		Policy: policy.Policy{Name: "quick", Backoff: policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{300 * time.Millisecond}},
			Jitter: policy.Jitter{Mode: policy.NoJitter}, MaxRetries: 3, QuietWindow: time.Second},
		DeadLetterQueue: "dead",
		ReportedAt:      time.Now(),
	}))

	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, 2, res.RetryCount, "the count continued from the report")
	require.Len(t, pub.to(pathsQueue), 1)
	require.Empty(t, hist.asked, "no look-up")
	markers := markersOf(t, ctx, c, id)
	require.NotContains(t, markers, "LocalActivity:PriorAttempts")
	require.Contains(t, markers, "Version:no-look-up-when-bridge-found-no-earlier-run")
	_, err := historytest.Record(ctx, c, id, noEarlierRunHistory)
	require.NoError(t, err)
}

// markersOf are the markers of workflow id's latest run, in order: Version:<change id> and
// LocalActivity:<activity type>.
func markersOf(t *testing.T, ctx context.Context, c client.Client, id string) []string {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	var out []string
	it := c.GetWorkflowHistory(ctx, id, "", false, 0)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		m := e.GetMarkerRecordedEventAttributes()
		switch m.GetMarkerName() {
		case "Version":
			var change string
			require.NoError(t, dc.FromPayloads(m.GetDetails()["change-id"], &change))
			out = append(out, "Version:"+change)
		case "LocalActivity":
			var data struct{ ActivityType string }
			require.NoError(t, dc.FromPayloads(m.GetDetails()["data"], &data))
			out = append(out, "LocalActivity:"+data.ActivityType)
		}
	}
	return out
}
