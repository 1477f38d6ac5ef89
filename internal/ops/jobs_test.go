package ops

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// fakeJob is a job the fake was asked to start.
type fakeJob struct {
	opts client.StartWorkflowOptions
	in   jobs.Input
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, fakeJob{opts: o, in: args[0].(jobs.Input)})
	return nil, nil
}

func (f *fakeTemporal) GetWorkflow(context.Context, string, string) client.WorkflowRun { return nil }

// runJob runs the job the API started last in the SDK's test environment, acting on the
// fake's items with the API's own item code, and returns its result.
func (h *harness) runJob() jobs.Progress {
	h.t.Helper()
	h.fake.mu.Lock()
	require.NotEmpty(h.t, h.fake.jobs, "no job was started")
	job := h.fake.jobs[len(h.fake.jobs)-1]
	h.fake.mu.Unlock()
	items, err := NewJobItems(APIConfig{Client: h.fake, TaskQueue: "tq", Now: func() time.Time { return t0 }})
	require.NoError(h.t, err)
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(jobs.JobWorkflow, workflow.RegisterOptions{Name: jobs.WorkflowName})
	env.RegisterActivity(&jobs.Activities{Items: items})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: job.opts.ID})
	env.ExecuteWorkflow(jobs.WorkflowName, job.in)
	require.True(h.t, env.IsWorkflowCompleted())
	require.NoError(h.t, env.GetWorkflowError())
	var p jobs.Progress
	require.NoError(h.t, env.GetWorkflowResult(&p))
	return p
}

// A long action answers 202 with its job and a Location at once; the job's input is the
// call's: the action, the actor and tenant, the query, the rate.
func TestLongActionsStartJobs(t *testing.T) {
	h := newHarness(t)
	code, out := h.do("acme", "POST", "/api/retry-queue/retry-matching", `{"queue":"orders","reason":"smtp back"}`)
	require.Equal(t, 202, code, out)
	job := out["job"].(map[string]any)
	assert.Regexp(t, `^job/retry-matching/[0-9a-f-]{36}$`, job["id"])
	assert.Equal(t, "running", job["state"])
	assert.Equal(t, "acme", job["actor"])
	in := h.fake.jobs[0].in
	assert.Equal(t, jobs.Target{Action: "retry", Actor: "acme", Tenant: "acme", Reason: "smtp back", Only: []string{"scheduled", "held"}}, in.Target)
	assert.Contains(t, in.Query, `TenantId = 'acme'`)
	assert.EqualValues(t, 1000, in.Rate)
	assert.Equal(t, "tq", h.fake.jobs[0].opts.TaskQueue)
	assert.Contains(t, h.log.String(), `"job":"`+job["id"].(string)+`"`, "the audit line names the job")

	code, out = h.do("o", "POST", "/api/dead-letters/bulk-discard", `{"ids":["retry/orders/a","retry/orders/b"]}`)
	require.Equal(t, 202, code, out)
	assert.Equal(t, []string{"retry/orders/a", "retry/orders/b"}, h.fake.jobs[1].in.IDs)
	assert.EqualValues(t, 2, out["job"].(map[string]any)["total"])

	code, out = h.do("o", "POST", "/api/dead-letters/bulk-discard?wait=maybe", `{"ids":["retry/orders/a"]}`)
	assert.Equal(t, 400, code, out)
	assert.Len(t, h.fake.jobs, 2, "a refused call starts no job")
}

// An Idempotency-Key names the job: the same request sent again answers with the job the
// first one started, and starts nothing.
func TestIdempotencyKeyFindsTheJobItStarted(t *testing.T) {
	h := newHarness(t)
	const key = "6f1c2a9e-2b7d-4c1e-9a5f-0d3b8e7c4a21"
	send := func() (int, map[string]any) {
		return h.doWithHeader("acme", "POST", "/api/retry-queue/retry-matching", `{"queue":"orders","reason":"smtp back"}`,
			"Idempotency-Key", key)
	}
	code, first := send()
	require.Equal(t, 202, code, first)
	code, again := send()
	require.Equal(t, 202, code, again)
	id := first["job"].(map[string]any)["id"]
	assert.Equal(t, "job/retry-matching/"+key, id)
	assert.Equal(t, id, again["job"].(map[string]any)["id"])
	assert.Len(t, h.fake.jobs, 1, "the second request started nothing")
	assert.Equal(t, "acme", again["job"].(map[string]any)["actor"], "the existing job, from its memo")
	assert.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, h.fake.jobs[0].opts.WorkflowIDReusePolicy,
		"a key reused after its job ended never runs the action again")
}

// A job whose workflow does not answer its progress query (no worker has started it) is shown
// from its memo, and says that its counts are not known rather than showing zeros as counts.
func TestAJobThatDoesNotAnswerSaysItsProgressIsUnknown(t *testing.T) {
	h := newHarness(t)
	code, out := h.do("o", "POST", "/api/dead-letters/bulk-discard", `{"ids":["retry/orders/a"]}`)
	require.Equal(t, 202, code, out)
	started := out["job"].(map[string]any)
	assert.NotContains(t, started, "progress_unknown", "the job just started: its counts are the start's")

	code, out = h.do("v", "GET", "/api/jobs/"+started["id"].(string), "")
	require.Equal(t, 200, code, out)
	job := out["job"].(map[string]any)
	assert.Equal(t, "running", job["state"])
	assert.Equal(t, "o", job["actor"], "what the memo says")
	assert.Contains(t, job["progress_unknown"], "did not answer")
	assert.EqualValues(t, -1, job["total"])
}

// A running job whose workflow answered once and then not in time (a batch keeps it busy on a
// loaded server) is shown with its last counts and their time, not as unknown.
func TestAJobThatDoesNotAnswerInTimeShowsItsLastCounts(t *testing.T) {
	h := newHarness(t)
	code, out := h.do("o", "POST", "/api/dead-letters/bulk-discard", `{"ids":["retry/orders/a","retry/orders/b"]}`)
	require.Equal(t, 202, code, out)
	id := out["job"].(map[string]any)["id"].(string)
	h.fake.mu.Lock()
	h.fake.jobProgress = map[string]jobs.Progress{id: {ID: id, Kind: jobs.KindBulkDiscard, Action: "discard", State: jobs.StateRunning, Actor: "o",
		Total: 2, Done: 1, Remaining: 1, StartedAt: t0}}
	h.fake.queryFails = map[string]int{id: 2}
	h.fake.mu.Unlock()

	// Unanswered before any answer: unknown, from the memo.
	code, out = h.do("v", "GET", "/api/jobs/"+id, "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, out["job"].(map[string]any)["progress_unknown"], "did not answer")

	h.fake.queryFails[id] = 0
	code, out = h.do("v", "GET", "/api/jobs/"+id, "")
	require.Equal(t, 200, code, out)
	answered := out["job"].(map[string]any)
	assert.EqualValues(t, 1, answered["done"])
	assert.NotContains(t, answered, "progress_as_of", "answered now")

	h.fake.queryFails[id] = 1
	code, out = h.do("v", "GET", "/api/jobs/"+id, "")
	require.Equal(t, 200, code, out)
	late := out["job"].(map[string]any)
	assert.EqualValues(t, 1, late["done"], "the last answer's counts")
	assert.EqualValues(t, 2, late["total"])
	assert.Equal(t, "running", late["state"])
	assert.NotContains(t, late, "progress_unknown")
	assert.Equal(t, t0.UTC().Format(time.RFC3339), late["progress_as_of"], "the time of the last answer")
}

// A job's item whose state cannot be read failed before anything was sent to it: it is marked
// Unsent, for the job to try again. A refusal after reading it is not.
func TestAJobItemWhoseStateIsUnreadableIsUnsent(t *testing.T) {
	dead := item("orders", "d", workflows.StatusDead, t0, "")
	h := newHarness(t, dead, item("orders", "s", workflows.StatusScheduled, t0, ""))
	h.fake.queryFails = map[string]int{dead.WorkflowID: 1}
	items, err := NewJobItems(APIConfig{Client: h.fake, TaskQueue: "tq", Now: func() time.Time { return t0 }})
	require.NoError(t, err)
	retry := jobs.Target{Action: "retry", Actor: "o", Only: []string{"dead"}}

	r := items.Apply(context.Background(), retry, dead.WorkflowID)
	assert.True(t, r.Unsent, "%+v", r)
	assert.Contains(t, r.Err, "cannot read the state")

	r = items.Apply(context.Background(), retry, dead.WorkflowID)
	assert.Empty(t, r.Err)
	assert.False(t, r.Unsent)

	r = items.Apply(context.Background(), retry, message.WorkflowID("orders", "s"))
	assert.Contains(t, r.Err, "is scheduled, not dead")
	assert.False(t, r.Unsent, "refused after reading it: not to be tried again")
}
