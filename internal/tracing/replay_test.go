package tracing_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/tracing"
	"github.com/retry-scheduler/retry-scheduler/worker"
)

// The Temporal interceptor runs inside every workflow task of a traced worker: with it, the
// recorded histories still replay (it adds no command), and the edited one still fails.
func TestRecordedHistoriesReplayWithTheTracingInterceptor(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ci, err := tracing.TemporalInterceptor(tp)
	require.NoError(t, err)
	wi, ok := ci.(interceptor.WorkerInterceptor)
	require.True(t, ok, "the tracing interceptor is a worker interceptor too, %T", ci)

	files, err := filepath.Glob(filepath.Join("..", "..", "workflows", "testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, ".unreplayable.json") {
			continue // known not to replay, with or without tracing (workflows/replay_test.go)
		}
		t.Run(name, func(t *testing.T) {
			r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
				Interceptors: []interceptor.WorkerInterceptor{wi},
			})
			require.NoError(t, err)
			worker.RegisterWorkflows(r)
			fh, err := os.Open(f)
			require.NoError(t, err)
			defer fh.Close()
			h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
			require.NoError(t, err)
			id := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowId()
			require.NotEmpty(t, id, "the history's started event names its workflow")
			// Under the recorded ID: the jitter is a hash of it.
			// A discarding logger: the edited history's expected panic is not news.
			err = r.ReplayWorkflowHistoryWithOptions(log.NewStructuredLogger(slog.New(slog.DiscardHandler)), h, sdkworker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: id},
			})
			if strings.HasSuffix(name, ".nondeterministic.json") {
				require.ErrorContains(t, err, "nondeterministic", "an edited history must not replay")
				return
			}
			require.NoError(t, err)
		})
	}
}
