package ops

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The fake's breakers: BreakerWorkflows that answer their state query and their pause and
// resume updates the way BreakerWorkflow does.

func breakerAttrs(b *workflows.BreakerState) *commonpb.SearchAttributes {
	dc := converter.GetDefaultDataConverter()
	q, _ := dc.ToPayload(b.Queue)
	m, _ := dc.ToPayload(string(b.Mode))
	return &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
		workflows.SAOriginalQueue.GetName(): q, workflows.SABreakerState.GetName(): m}}
}

// listBreakers lists every breaker; f.mu is held.
func (f *fakeTemporal) listBreakers(func(any) *commonpb.Payload) *workflowservice.ListWorkflowExecutionsResponse {
	ids := make([]string, 0, len(f.breakers))
	for id := range f.breakers {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	out := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, id := range ids {
		out.Executions = append(out.Executions, &workflowpb.WorkflowExecutionInfo{
			Execution:        &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run"},
			SearchAttributes: breakerAttrs(f.breakers[id]), StartTime: timestamppb.New(t0)})
	}
	return out
}

// fakeStartOp is a recorded start of an update-with-start.
type fakeStartOp struct {
	opts     client.StartWorkflowOptions
	workflow any
	args     []any
}

func (fakeStartOp) Get(context.Context) (client.WorkflowRun, error) { return nil, nil }

func (f *fakeTemporal) NewWithStartWorkflowOperation(opts client.StartWorkflowOptions, wf any, args ...any) client.WithStartWorkflowOperation {
	return fakeStartOp{opts: opts, workflow: wf, args: args}
}

// UpdateWithStartWorkflow starts the breaker when none runs (conflict policy use-existing),
// then applies the update.
func (f *fakeTemporal) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	op := o.StartWorkflowOperation.(fakeStartOp)
	f.mu.Lock()
	f.starts = append(f.starts, op)
	if op.opts.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING {
		f.mu.Unlock()
		return nil, fmt.Errorf("update-with-start needs the use-existing conflict policy")
	}
	if _, ok := f.breakers[op.opts.ID]; !ok {
		in := op.args[0].(workflows.BreakerInput)
		f.breakers[op.opts.ID] = &workflows.BreakerState{Queue: in.Queue, Mode: workflows.BreakerClosed, Since: t0, Settings: in.Settings}
	}
	f.mu.Unlock()
	return f.breakerUpdate(o.UpdateOptions)
}

// breakerUpdate pauses or resumes a breaker; a resume of one not paused is refused.
func (f *fakeTemporal) breakerUpdate(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.breakers[o.WorkflowID]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	a := o.Args[0].(workflows.OperatorAction)
	signal := map[string]string{workflows.UpdateBreakerPause: workflows.SignalBreakerPause, workflows.UpdateBreakerResume: workflows.SignalBreakerResume}[o.UpdateName]
	if why := workflows.BreakerActionRefusal(signal, b.Mode); why != "" {
		return &fakeUpdate{id: o.WorkflowID, err: temporal.NewNonRetryableApplicationError(why, workflows.ErrTypeIllegalAction, nil)}, nil
	}
	if o.UpdateName == workflows.UpdateBreakerPause {
		b.Mode, b.Since, b.PausedBy = workflows.BreakerPaused, t0.Add(time.Minute), &a
	} else {
		b.Mode, b.Since, b.PausedBy = workflows.BreakerClosed, t0.Add(2*time.Minute), nil
	}
	b.Events = append(b.Events, workflows.BreakerEvent{At: b.Since, To: b.Mode, Actor: a.Actor, Detail: a.Reason})
	return &fakeUpdate{id: o.WorkflowID, breaker: *b}, nil
}

func held(queue, id string, due time.Time) workflows.State {
	s := item(queue, id, workflows.StatusHeld, due, "")
	return s
}

func TestBreakersListed(t *testing.T) {
	h := newHarness(t, held("orders", "h1", t0.Add(-time.Minute)), held("orders", "h2", t0), held("billing", "h3", t0),
		item("orders", "s1", workflows.StatusScheduled, t0, ""))
	settings := policy.Breaker{}.WithDefaults()
	h.fake.breakers[message.BreakerWorkflowID("orders")] = &workflows.BreakerState{Queue: "orders", Mode: workflows.BreakerOpen, Since: t0,
		Opens: 3, Settings: settings, LastProbe: &workflows.BreakerProbe{At: t0.Add(-time.Minute), Released: 3, Failed: 2, Result: "failed"}}
	h.fake.breakers[message.BreakerWorkflowID("billing")] = &workflows.BreakerState{Queue: "billing", Mode: workflows.BreakerClosed, Since: t0}

	code, out := h.do("o", "GET", "/api/breakers", "")
	require.Equal(t, 200, code, out)
	list := out["breakers"].([]any)
	require.Len(t, list, 2)
	billing, orders := list[0].(map[string]any), list[1].(map[string]any)
	assert.Equal(t, "billing", billing["queue"], "sorted by queue")
	assert.Equal(t, "closed", billing["state"])
	assert.EqualValues(t, 1, billing["held"])
	assert.Equal(t, "orders", orders["queue"])
	assert.Equal(t, "breaker/orders", orders["workflow_id"])
	assert.Equal(t, "open", orders["state"])
	assert.EqualValues(t, 2, orders["held"], "held retries of orders only")
	assert.Equal(t, "40s", orders["cooldown"], "10 s doubled at each of 3 openings")
	assert.Equal(t, t0.Add(40*time.Second).Format(time.RFC3339), orders["cooldown_until"])
	assert.Equal(t, "failed", orders["last_probe"].(map[string]any)["result"])
	assert.Contains(t, h.fake.queries, `WorkflowType = 'BreakerWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'tq'`)

	code, out = h.do("o", "GET", "/api/breakers/orders", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, "open", out["state"])
	assert.EqualValues(t, 2, out["held"])
	code, out = h.do("o", "GET", "/api/breakers/nowhere", "")
	assert.Equal(t, 404, code, out)
	assert.Contains(t, out["error"], "it is closed")

	// Held retries are in the retry queue, and a status of its filter.
	code, out = h.do("v", "GET", "/api/retry-queue?status=held", "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `RetryStatus = 'held'`)
	code, out = h.do("v", "GET", "/api/retry-queue", "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `RetryStatus IN ('scheduled', 'held', 'republishing', 'awaiting-outcome')`)
}

func TestBreakersNeedAnUnscopedOperator(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ token, method, path string }{
		{"v", "GET", "/api/breakers"}, {"v", "GET", "/api/breakers/orders"}, {"v", "POST", "/api/breakers/orders/pause"},
		{"acme", "GET", "/api/breakers"}, {"acme", "GET", "/api/breakers/orders"}, {"acme", "POST", "/api/breakers/orders/pause"},
	} {
		code, out := h.do(c.token, c.method, c.path, "")
		assert.Equal(t, 403, code, "%s %s %s: %v", c.token, c.method, c.path, out)
	}
	assert.Empty(t, h.fake.breakers, "nothing started")
	code, out := h.do("o", "POST", "/api/breakers/orders/stop", "")
	assert.Equal(t, 404, code, out)
	code, out = h.do("o", "POST", "/api/breakers/a%22b/pause", "")
	assert.Equal(t, 400, code, out)
	code, out = h.do("o", "POST", "/api/breakers/orders/pause", `{"reason":"x","actor":"mallory"}`)
	assert.Equal(t, 400, code, out, "the actor comes from the token")
}

func TestPauseStartsTheBreakerAndResumeReleases(t *testing.T) {
	h := newHarness(t, held("orders.eu", "h1", t0))
	code, out := h.do("o", "POST", "/api/breakers/orders.eu/resume", `{"reason":"nothing to resume"}`)
	assert.Equal(t, 409, code, out)
	assert.Contains(t, out["error"], "no breaker runs")
	assert.Empty(t, h.fake.starts, "a resume starts no breaker")

	code, out = h.do("o", "POST", "/api/breakers/orders.eu/pause", `{"reason":"downstream maintenance"}`)
	require.Equal(t, 200, code, out)
	b := out["breaker"].(map[string]any)
	assert.Equal(t, "paused", b["state"])
	assert.Equal(t, "o", b["paused_by"].(map[string]any)["actor"])
	assert.EqualValues(t, 1, b["held"])
	require.Len(t, h.fake.starts, 1)
	start := h.fake.starts[0]
	assert.Equal(t, "breaker/orders.eu", start.opts.ID)
	assert.Equal(t, "tq", start.opts.TaskQueue)
	assert.Equal(t, workflows.BreakerWorkflowName, start.workflow)
	in := start.args[0].(workflows.BreakerInput)
	assert.Equal(t, "orders.eu", in.Queue)
	assert.Equal(t, 9*time.Second, in.Settings.Cooldown, "the queue's policy's settings")
	assert.Equal(t, policy.DefaultBreakerProbes, in.Settings.Probes, "with defaults")
	q, _ := start.opts.TypedSearchAttributes.GetKeyword(workflows.SAOriginalQueue)
	assert.Equal(t, "orders.eu", q, "visible by its queue from the start")

	// A second pause finds the running breaker, which refuses it.
	code, out = h.do("o", "POST", "/api/breakers/orders.eu/pause", "")
	assert.Equal(t, 409, code, out)
	assert.Contains(t, out["error"], "paused already")
	assert.Len(t, h.fake.breakers, 1)

	code, out = h.do("o", "POST", "/api/breakers/orders.eu/resume", `{"reason":"back"}`)
	require.Equal(t, 200, code, out)
	assert.Equal(t, "closed", out["breaker"].(map[string]any)["state"])
	code, out = h.do("o", "POST", "/api/breakers/orders.eu/resume", "")
	assert.Equal(t, 409, code, out)
	assert.Contains(t, out["error"], "allowed only while paused", "the workflow's refusal")

	// Audited: who, which breaker, the result.
	logs := h.log.String()
	assert.Contains(t, logs, `"action":"breaker-pause"`)
	assert.Contains(t, logs, `"actor":"o"`)
	assert.Contains(t, logs, `"reason":"downstream maintenance"`)
	assert.Contains(t, logs, `"ids":["breaker/orders.eu"]`)
	assert.Contains(t, logs, `"action":"breaker-resume"`)
	assert.Contains(t, logs, `"result":"refused"`)
}

func TestHeldRetriesInBulkActions(t *testing.T) {
	h := newHarness(t, held("orders", "h1", t0), item("orders", "d1", workflows.StatusDead, t0, ""))
	code, out := h.do("o", "POST", "/api/retry-queue/bulk-retry?wait=true", `{"ids":["retry/orders/h1","retry/orders/d1"]}`)
	require.Equal(t, 200, code, out)
	errs := out["errors"].(map[string]any)
	if workflows.ActionRefusal(workflows.SignalRetryNow, h.fake.wfs["retry/orders/h1"]) == "" {
		assert.EqualValues(t, 1, out["succeeded"], "a held retry is released by retry-now")
		assert.Nil(t, errs["retry/orders/h1"])
	}
	assert.Contains(t, errs["retry/orders/d1"], "not scheduled or held")
}

// canaryHarness has n dead letters of orders; outcome decides, as each is replayed, how it
// settles in the fake: "delivered", "failed" (a new attempt), "dead" (dead again) or ""
// (never settles).
func canaryHarness(t *testing.T, n int, outcome func(i int) string) *harness {
	var dead []workflows.State
	for i := range n {
		s := item("orders", fmt.Sprintf("d%03d", i), workflows.StatusDead, t0.Add(-time.Duration(i)*time.Minute), "")
		s.Policy.QuietWindow = time.Millisecond
		dead = append(dead, s)
	}
	h := newHarness(t, dead...)
	h.fake.onRetry = func(s *workflows.State) {
		var i int
		_, _ = fmt.Sscanf(s.Message.MessageID, "d%03d", &i)
		switch outcome(i) {
		case "delivered":
			s.Status = workflows.StatusDelivered
			h.fake.closed[s.WorkflowID] = true
		case "failed":
			s.Status = workflows.StatusScheduled
			s.Attempts = append(s.Attempts, message.Attempt{Attempt: 1, Error: "still broken"})
		case "dead":
			s.Status, s.DeadAt = workflows.StatusDead, t0
		}
	}
	return h
}

func replayedIDs(h *harness) []string {
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	var out []string
	for id, s := range h.fake.wfs {
		if s.Resets > 0 {
			out = append(out, id)
		}
	}
	return out
}

func TestCanaryReplayStopsAfterAFailingCanary(t *testing.T) {
	h := canaryHarness(t, 20, func(i int) string { return map[bool]string{true: "failed", false: "dead"}[i%2 == 0] })
	code, out := h.do("o", "POST", "/api/dead-letters/replay", `{"queue":"orders","canary":5,"reason":"payments fixed?"}`)
	require.Equal(t, 202, code, out)
	job := h.runJob()
	assert.EqualValues(t, 20, job.Total)
	assert.Equal(t, 5, job.Done)
	assert.Equal(t, 5, job.Canary.Failed)
	assert.Equal(t, 0, job.Canary.Delivered)
	assert.Equal(t, "failed", job.Canary.Verdict)
	assert.Contains(t, job.Stopped, "the canary failed: 5 of 5 judged failed again")
	assert.EqualValues(t, 15, job.Remaining, "15 not replayed")
	assert.Len(t, replayedIDs(h), 5, "only the canary was replayed")
	assert.Contains(t, h.log.String(), `"canary":5`)
}

func TestCanaryReplayGoesOnWhenTheCanarySucceeds(t *testing.T) {
	h := canaryHarness(t, 12, func(int) string { return "delivered" })
	code, out := h.do("o", "POST", "/api/dead-letters/replay", `{"canary":3,"max_failure_ratio":0.2}`)
	require.Equal(t, 202, code, out)
	job := h.runJob()
	assert.Equal(t, 12, job.Done)
	assert.Equal(t, 12, job.Canary.Delivered)
	assert.Equal(t, 0, job.Canary.Failed)
	assert.Equal(t, "passed", job.Canary.Verdict)
	assert.Empty(t, job.Stopped)
	assert.Equal(t, "30.001s", job.Canary.Timeout, "the longest quiet window and 30 s")
}

// The canary passes, then the destination breaks again: the replay stops by itself once the
// failures of what it judged reach the ratio.
func TestCanaryReplayStopsWhenTheRatioCrosses(t *testing.T) {
	h := canaryHarness(t, 40, func(i int) string {
		// d039 … d000 sorted by id: the fake lists ids in order, so the first replayed are d000….
		if i < 4 {
			return "delivered"
		}
		return "failed"
	})
	code, out := h.do("o", "POST", "/api/dead-letters/replay", `{"canary":4}`)
	require.Equal(t, 202, code, out)
	job := h.runJob()
	assert.Contains(t, job.Stopped, "the failure ratio crossed the threshold")
	replayed := job.Done
	assert.Less(t, replayed, 40, "it stopped before replaying everything")
	assert.GreaterOrEqual(t, replayed, 8, "4 delivered need 4 failures to reach 0.5")
	assert.Len(t, replayedIDs(h), replayed)
}

// An item that never settles counts as a failure when its timeout passes.
func TestCanaryUnsettledIsUnknown(t *testing.T) {
	h := canaryHarness(t, 4, func(int) string { return "" })
	code, out := h.do("o", "POST", "/api/dead-letters/replay", `{"canary":2,"canary_timeout":"50ms"}`)
	require.Equal(t, 202, code, out)
	job := h.runJob()
	assert.Equal(t, 2, job.Done)
	assert.Equal(t, 2, job.Canary.Unknown)
	assert.NotEmpty(t, job.Stopped)
	assert.Equal(t, "50ms", job.Canary.Timeout)
}

func TestCanaryRefusals(t *testing.T) {
	h := newHarness(t)
	for body, want := range map[string]string{
		`{"canary":-1}`:                        "negative",
		`{"max_failure_ratio":0.3}`:            "set canary",
		`{"canary":2,"max_failure_ratio":0}`:   "above 0",
		`{"canary":2,"max_failure_ratio":1.5}`: "at most 1",
		`{"canary":2,"canary_timeout":"soon"}`: "canary_timeout",
		`{"canary":2,"canary_timeout":"2h"}`:   "canary_timeout",
	} {
		code, out := h.do("o", "POST", "/api/dead-letters/replay", body)
		assert.Equal(t, 400, code, body)
		assert.Contains(t, out["error"], want, body)
	}
	for _, path := range []string{"/api/dead-letters/purge", "/api/retry-queue/retry-matching"} {
		code, out := h.do("a", "POST", path, `{"canary":2}`)
		assert.Equal(t, 400, code, path)
		assert.Contains(t, out["error"], "replay only", path)
	}
	// A dry run counts; it does not replay a canary.
	h = canaryHarness(t, 3, func(int) string { return "delivered" })
	code, out := h.do("o", "POST", "/api/dead-letters/replay", `{"canary":2,"dry_run":true}`)
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 3, out["count"])
	assert.Empty(t, replayedIDs(h))
}
