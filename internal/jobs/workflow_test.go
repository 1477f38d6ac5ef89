package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// fakeItems is a set of items in memory: Page lists the ones not acted on in id order (keyset
// on the id, like visibility's own paging), Apply marks one acted on.
type fakeItems struct {
	mu      sync.Mutex
	ids     []string
	acted   map[string]int
	refuse  map[string]bool
	outcome Outcome
	pages   int
	applied []time.Time
}

func newFakeItems(n int) *fakeItems {
	f := &fakeItems{acted: map[string]int{}, refuse: map[string]bool{}}
	for i := range n {
		f.ids = append(f.ids, fmt.Sprintf("retry/q/%05d", i))
	}
	return f
}

func (f *fakeItems) Count(context.Context, string) (int64, error) {
	return int64(len(f.ids)), nil
}

func (f *fakeItems) Page(_ context.Context, _ string, token []byte, size int) ([]string, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pages++
	after := string(token)
	var out []string
	for _, id := range f.ids {
		if id > after && f.acted[id] == 0 {
			out = append(out, id)
		}
		if len(out) == size {
			return out, []byte(id), nil
		}
	}
	return out, nil, nil
}

func (f *fakeItems) Apply(_ context.Context, t Target, id string) Applied {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, time.Now())
	if f.refuse[id] {
		return Applied{Err: "message " + strconv.Quote(id) + " is retrying, not dead"}
	}
	f.acted[id]++
	return Applied{Attempts: 3, QuietWindow: time.Second}
}

func (f *fakeItems) Outcome(context.Context, Baseline) Outcome { return f.outcome }

func (f *fakeItems) actedOnce(t *testing.T) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, n := range f.acted {
		require.Equal(t, 1, n, "%s acted on %d times", id, n)
	}
	return len(f.acted)
}

func newEnv(t *testing.T, items Items) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(JobWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	env.RegisterActivity(&Activities{Items: items})
	return env
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) Progress {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var p Progress
	require.NoError(t, env.GetWorkflowResult(&p))
	return p
}

func replayInput() Input {
	return Input{Kind: KindReplay, Target: Target{Action: "retry", Actor: "ops", Reason: "fixed"}, Query: "q", Rate: 1000}
}

func TestJobPagesThroughEveryMatch(t *testing.T) {
	items := newFakeItems(1234)
	items.refuse["retry/q/00007"] = true
	env := newEnv(t, items)
	env.ExecuteWorkflow(JobWorkflow, replayInput())
	p := result(t, env)
	assert.Equal(t, StateCompleted, p.State)
	assert.EqualValues(t, 1234, p.Total)
	assert.Equal(t, 1233, p.Done)
	assert.Equal(t, 1, p.Failed)
	assert.Contains(t, p.Errors["retry/q/00007"], "not dead")
	assert.Zero(t, p.Remaining)
	assert.NotNil(t, p.EndedAt)
	assert.Equal(t, 1233, items.actedOnce(t))
	// 1234 items at pageSize a page: 3 pages.
	assert.Equal(t, 3, items.pages)
}

func TestJobOfListedIDs(t *testing.T) {
	items := newFakeItems(10)
	env := newEnv(t, items)
	in := Input{Kind: KindBulkDiscard, Target: Target{Action: "discard", Actor: "ops"}, IDs: items.ids[:7], Rate: 100}
	env.ExecuteWorkflow(JobWorkflow, in)
	p := result(t, env)
	assert.EqualValues(t, 7, p.Total)
	assert.Equal(t, 7, p.Done)
	assert.Equal(t, 7, items.actedOnce(t))
	assert.Zero(t, items.pages, "a job of listed ids lists nothing")
}

func TestJobKeepsTheRate(t *testing.T) {
	var sizes []int
	items := newFakeItems(100)
	env := newEnv(t, items)
	env.SetOnLocalActivityStartedListener(func(_ *activity.Info, _ context.Context, args []interface{}) {
		if req, ok := args[0].(ApplyRequest); ok {
			sizes = append(sizes, len(req.IDs))
		}
	})
	in := replayInput()
	in.Rate = 20
	env.ExecuteWorkflow(JobWorkflow, in)
	p := result(t, env)
	assert.Equal(t, 100, p.Done)
	// A second of items a batch at 20/s, and the job waits a second per batch: 100 items take
	// five seconds.
	assert.Equal(t, []int{20, 20, 20, 20, 20}, sizes)
	assert.GreaterOrEqual(t, p.EndedAt.Sub(p.StartedAt), 5*time.Second)
}

func TestJobCancel(t *testing.T) {
	items := newFakeItems(300)
	env := newEnv(t, items)
	in := replayInput()
	in.Rate = 100 // 100 a batch
	var batches int
	env.SetOnLocalActivityStartedListener(func(_ *activity.Info, _ context.Context, args []interface{}) {
		if _, ok := args[0].(ApplyRequest); !ok {
			return
		}
		batches++
		if batches == 2 {
			env.RegisterDelayedCallback(func() {
				env.UpdateWorkflow(UpdateCancel, "c1", &testsuite.TestUpdateCallback{
					OnReject:   func(err error) { t.Errorf("cancel rejected: %v", err) },
					OnComplete: func(any, error) {},
				}, Cancel{Actor: "alice", Reason: "wrong filter"})
			}, 0)
		}
	})
	env.ExecuteWorkflow(JobWorkflow, in)
	p := result(t, env)
	assert.Equal(t, StateCancelled, p.State)
	assert.Equal(t, "alice", p.CancelledBy)
	assert.Contains(t, p.Stopped, "wrong filter")
	assert.Less(t, p.Done, 300, "the cancel stopped nothing")
	assert.EqualValues(t, 300-p.Done, p.Remaining)
	assert.Equal(t, p.Done, items.actedOnce(t))
}

func TestJobCancelOfAnEndedJobIsRejected(t *testing.T) {
	items := newFakeItems(3)
	env := newEnv(t, items)
	var rejected error
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { rejected = err }, OnAccept: func() {}, OnComplete: func(any, error) {},
		}, Cancel{})
	}, 0)
	env.ExecuteWorkflow(JobWorkflow, replayInput())
	result(t, env)
	require.Error(t, rejected, "a cancel without an actor was accepted")
}

func TestJobCanaryStops(t *testing.T) {
	items := newFakeItems(500)
	items.outcome = FailedAgain
	env := newEnv(t, items)
	in := replayInput()
	in.Canary = &Canary{N: 5, MaxRatio: 0.5, Timeout: time.Minute}
	env.ExecuteWorkflow(JobWorkflow, in)
	p := result(t, env)
	assert.Equal(t, StateCompleted, p.State)
	require.NotNil(t, p.Canary)
	assert.Equal(t, VerdictFailed, p.Canary.Verdict)
	assert.Contains(t, p.Stopped, "the canary failed")
	assert.Equal(t, 5, p.Done, "the replay went on past a failed canary")
	assert.Equal(t, 5, p.Canary.Failed)
	assert.EqualValues(t, 495, p.Remaining)
	assert.Equal(t, 5, items.actedOnce(t))
}

func TestJobCanaryPasses(t *testing.T) {
	items := newFakeItems(50)
	items.outcome = Delivered
	env := newEnv(t, items)
	in := replayInput()
	in.Canary = &Canary{N: 5, MaxRatio: 0.5}
	env.ExecuteWorkflow(JobWorkflow, in)
	p := result(t, env)
	assert.Equal(t, VerdictPassed, p.Canary.Verdict)
	assert.Empty(t, p.Stopped)
	assert.Equal(t, 50, p.Done)
	assert.Equal(t, 50, p.Canary.Delivered)
	assert.Zero(t, p.Canary.Pending)
}

func TestJobCanaryUnsettledItemsAreUnknownAfterTheTimeout(t *testing.T) {
	items := newFakeItems(20)
	items.outcome = Pending
	env := newEnv(t, items)
	in := replayInput()
	in.Canary = &Canary{N: 4, MaxRatio: 0.5, Timeout: 10 * time.Second}
	env.ExecuteWorkflow(JobWorkflow, in)
	p := result(t, env)
	assert.Equal(t, VerdictFailed, p.Canary.Verdict)
	assert.Equal(t, 4, p.Canary.Unknown)
	assert.Equal(t, 4, p.Done)
}

func TestJobContinuesAsNew(t *testing.T) {
	items := newFakeItems(3000)
	items.refuse["retry/q/02999"] = true
	env := newEnv(t, items)
	in := replayInput()
	in.Rate = 1000 // 200 a batch: 15 batches
	in.MaxHistory = 20
	runs := 0
	for {
		env.ExecuteWorkflow(JobWorkflow, in)
		require.True(t, env.IsWorkflowCompleted())
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); err != nil && asCAN(err, &can) {
			runs++
			require.Less(t, runs, 100)
			var last Input
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &last))
			require.NotNil(t, last.Carry)
			in = last
			env = newEnv(t, items)
			continue
		}
		break
	}
	p := result(t, env)
	assert.Greater(t, runs, 1, "the job never continued as new")
	assert.Equal(t, runs+1, p.Runs)
	assert.Equal(t, 2999, p.Done)
	assert.Equal(t, 1, p.Failed)
	assert.EqualValues(t, 3000, p.Total)
	assert.Equal(t, 2999, items.actedOnce(t))
	ids := make([]string, 0, len(items.acted))
	for id := range items.acted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	assert.Equal(t, items.ids[:2999], ids)
}

func asCAN(err error, target **workflow.ContinueAsNewError) bool {
	return errors.As(err, target)
}
