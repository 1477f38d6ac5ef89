package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Long actions run as jobs (package jobs): the API starts a JobWorkflow and answers 202 with
// its id at once; GET /api/jobs/{id} reads its progress, POST /api/jobs/{id}/cancel stops it.

// Bounds of the jobs' routes.
const (
	// maxSyncBulk is the most ids a bulk call may act on synchronously (?wait=true).
	maxSyncBulk = 100
	// maxListedJobs is how many jobs GET /api/jobs shows, newest first.
	maxListedJobs = 50
	// jobQueryTimeout bounds one job's progress read within a list.
	jobQueryTimeout = 3 * time.Second
)

// Memo fields of a job's workflow: what a list shows without asking the workflow.
const (
	memoKind      = "kind"
	memoActor     = "actor"
	memoTenant    = "tenant"
	memoReason    = "reason"
	memoAction    = "action"
	memoStartedAt = "started_at"
)

// JobResponse wraps one job.
type JobResponse struct {
	Job jobs.Progress `json:"job"`
}

// JobListResponse lists recent jobs, newest first.
type JobListResponse struct {
	Jobs []jobs.Progress `json:"jobs"`
}

// CancelRequest is the body of a job's cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// jobItems is jobs.Items over the API's own code for one item: the code a bulk call runs.
type jobItems struct{ a *API }

// NewJobItems returns what a job's activities act with, on the worker: the API's item code
// over cfg's client, namespace and task queue (Auth and Logger are not needed).
func NewJobItems(cfg APIConfig) (jobs.Items, error) {
	if cfg.Client == nil {
		return nil, errors.New("job items: no Temporal client")
	}
	cfg = cfg.withDefaults()
	return jobItems{a: &API{cfg: cfg, log: cfg.Logger, settleEvery: defaultSettleEvery, scans: make(chan struct{}, cfg.MaxScans)}}, nil
}

func (j jobItems) Count(ctx context.Context, query string) (int64, error) {
	c, err := j.a.cfg.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: j.a.cfg.Namespace, Query: query})
	if err != nil {
		return 0, fmt.Errorf("count workflows: %w", err)
	}
	return c.GetCount(), nil
}

func (j jobItems) Page(ctx context.Context, query string, token []byte, size int) ([]string, []byte, error) {
	resp, err := j.a.cfg.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: j.a.cfg.Namespace, PageSize: int32(size), NextPageToken: token, Query: query,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list workflows: %w", err)
	}
	ids := make([]string, 0, len(resp.GetExecutions()))
	for _, e := range resp.GetExecutions() {
		ids = append(ids, e.GetExecution().GetWorkflowId())
	}
	return ids, resp.GetNextPageToken(), nil
}

func (j jobItems) Apply(ctx context.Context, t jobs.Target, id string) jobs.Applied {
	act, ok := actionsByName[t.Action]
	if !ok {
		return jobs.Applied{Err: fmt.Sprintf("unknown action %q", t.Action)}
	}
	var only []workflows.Status
	for _, s := range t.Only {
		only = append(only, workflows.Status(s))
	}
	l, err := j.a.applyLoaded(ctx, Principal{Name: t.Actor, Tenant: t.Tenant}, act, id, t.Reason, only)
	if err != nil {
		// A 503 comes from reading the item, before its signal: nothing was sent.
		var ae *apiError
		return jobs.Applied{Err: err.Error(), Unsent: errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable}
	}
	return jobs.Applied{Attempts: len(l.state.Attempts), Resets: l.state.Resets, QuietWindow: l.state.Policy.QuietWindow}
}

func (j jobItems) Outcome(ctx context.Context, b jobs.Baseline) jobs.Outcome {
	switch j.a.outcome(ctx, baseline{id: b.ID, attempts: b.Attempts, resets: b.Resets}) {
	case delivered:
		return jobs.Delivered
	case failedAgain:
		return jobs.FailedAgain
	}
	return jobs.Pending
}

// jobID is a new job's workflow ID: job/<kind>/<key>, the key from the request's
// Idempotency-Key header when it is a UUID (a retried request then finds the job it
// started), else a new one.
func jobID(r *http.Request, kind string) (id string, keyed bool) {
	key := uuid.NewString()
	if k, err := uuid.Parse(strings.TrimSpace(r.Header.Get("Idempotency-Key"))); err == nil {
		key, keyed = k.String(), true
	}
	return jobs.IDPrefix + kind + "/" + key, keyed
}

// existingJob answers a request whose Idempotency-Key names a job that exists, running or
// ended, with that job as it is: the same request sent again never runs the action twice.
func (a *API) existingJob(ctx context.Context, w http.ResponseWriter, p Principal, id string) bool {
	job, err := a.readJob(ctx, p, id)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return false
	}
	if err != nil {
		fail(w, err)
		return true
	}
	w.Header().Set("Location", "/api/jobs/"+id)
	writeJSON(w, http.StatusAccepted, JobResponse{Job: job})
	return true
}

// startJob starts in as a job for p and answers 202 with it and its Location; auditKV are
// the audit line's extra fields.
func (a *API) startJob(w http.ResponseWriter, r *http.Request, p Principal, in jobs.Input, ids []string, auditKV ...any) {
	id, keyed := jobID(r, in.Kind)
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if keyed && a.existingJob(ctx, w, p, id) {
		return
	}
	now := a.cfg.Now().UTC()
	opts := client.StartWorkflowOptions{
		ID: id, TaskQueue: a.cfg.TaskQueue,
		// A key reused after its job ended finds that job (existingJob), never a new run; two
		// requests with one key at once start one job.
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		Memo: map[string]any{memoKind: in.Kind, memoActor: in.Target.Actor, memoTenant: in.Target.Tenant,
			memoReason: in.Target.Reason, memoAction: in.Target.Action, memoStartedAt: now},
	}
	if _, err := a.cfg.Client.ExecuteWorkflow(ctx, opts, jobs.WorkflowName, in); err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if keyed && errors.As(err, &started) && a.existingJob(ctx, w, p, id) {
			return
		}
		a.audit(p, in.Kind, ids, in.Target.Reason, "refused", append([]any{"job", id, "error", err.Error()}, auditKV...)...)
		fail(w, fmt.Errorf("start job %s: %w", id, err))
		return
	}
	a.audit(p, in.Kind, ids, in.Target.Reason, "started", append([]any{"job", id}, auditKV...)...)
	job := jobs.Progress{ID: id, Kind: in.Kind, Action: in.Target.Action, State: jobs.StateRunning, Actor: in.Target.Actor,
		Tenant: in.Target.Tenant, Reason: in.Target.Reason, Filter: in.Filter, Rate: in.Rate, Total: -1, Remaining: -1, StartedAt: now}
	if in.Query == "" {
		job.Total, job.Remaining = int64(len(in.IDs)), int64(len(in.IDs))
	}
	if in.Canary != nil {
		job.Canary = &jobs.CanaryStatus{N: in.Canary.N, MaxFailureRatio: in.Canary.MaxRatio, Verdict: jobs.VerdictPending}
	}
	w.Header().Set("Location", "/api/jobs/"+id)
	writeJSON(w, http.StatusAccepted, JobResponse{Job: job})
}

// target is what a job started by p does to each item.
func target(p Principal, act action, reason string, from []workflows.Status) jobs.Target {
	only := make([]string, len(from))
	for i, s := range from {
		only[i] = string(s)
	}
	return jobs.Target{Action: act.Name, Actor: p.Name, Tenant: p.Tenant, Reason: reason, Only: only}
}

// jobsQuery lists this deployment's jobs, without the runs that continued as new.
func (a *API) jobsQuery() string {
	return fmt.Sprintf("WorkflowType = %s AND TaskQueue = %s AND ExecutionStatus != 'ContinuedAsNew'",
		visibility.Literal(jobs.WorkflowName), visibility.Literal(a.cfg.TaskQueue))
}

// memoOf reads a job's memo into a Progress: what is known without the workflow.
func memoOf(id string, m *commonpb.Memo) jobs.Progress {
	dc := converter.GetDefaultDataConverter()
	str := func(k string) string { return payloadString(m.GetFields(), k) }
	p := jobs.Progress{ID: id, Kind: str(memoKind), Actor: str(memoActor), Tenant: str(memoTenant), Reason: str(memoReason),
		Action: str(memoAction), Total: -1, Remaining: -1}
	if pl, ok := m.GetFields()[memoStartedAt]; ok {
		_ = dc.FromPayload(pl, &p.StartedAt)
	}
	return p
}

// readJob reads job id for p: 404 when there is none of this deployment's, 403 another
// tenant's. A running job answers its progress query; an ended one its result.
func (a *API) readJob(ctx context.Context, p Principal, id string) (jobs.Progress, error) {
	if !strings.HasPrefix(id, jobs.IDPrefix) {
		return jobs.Progress{}, errorf(http.StatusNotFound, "no job with id %q (job ids start with %s)", id, jobs.IDPrefix)
	}
	d, err := a.cfg.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return jobs.Progress{}, errorf(http.StatusNotFound, "no job with id %q", id)
	case err != nil:
		return jobs.Progress{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != jobs.WorkflowName || info.GetTaskQueue() != a.cfg.TaskQueue {
		return jobs.Progress{}, errorf(http.StatusNotFound, "no job with id %q", id)
	}
	base := memoOf(id, info.GetMemo())
	if !p.Allows(base.Tenant) {
		return jobs.Progress{}, errorf(http.StatusForbidden, "job %q belongs to another tenant than %s's (%q)", id, p.Name, p.Tenant)
	}
	return a.jobProgress(ctx, base, info.GetStatus()), nil
}

// jobProgress completes base, a job's memo, from its workflow in the given status.
func (a *API) jobProgress(ctx context.Context, base jobs.Progress, status enumspb.WorkflowExecutionStatus) jobs.Progress {
	var out jobs.Progress
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		v, err := a.cfg.Client.QueryWorkflow(ctx, base.ID, "", jobs.QueryProgress)
		if err == nil && v.Get(&out) == nil {
			a.progress.remember(base.ID, out, a.cfg.Now())
			return out
		}
		// Busy past the read's timeout: its last answer here, with its time.
		if last, at, ok := a.progress.last(base.ID); ok {
			at = at.UTC()
			last.ProgressAsOf = &at
			return last
		}
		// Not started by a worker yet, or no worker polls: what the memo says.
		base.State = jobs.StateRunning
		base.ProgressUnknown = progressUnknown
		return base
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		if err := a.cfg.Client.GetWorkflow(ctx, base.ID, "").Get(ctx, &out); err == nil {
			return out
		}
		base.State = jobs.StateCompleted
		base.ProgressUnknown = progressUnknown
		return base
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		base.State = jobs.StateCancelled
	default:
		base.State = jobs.StateFailed
		base.Stopped = "the job's workflow is " + statusName(status)
	}
	// A failed, terminated or timed out run: its last counts, if a worker can replay it.
	if v, err := a.cfg.Client.QueryWorkflow(ctx, base.ID, "", jobs.QueryProgress); err == nil && v.Get(&out) == nil {
		out.State, out.Stopped = base.State, base.Stopped
		return out
	}
	base.ProgressUnknown = progressUnknown
	return base
}

// progressUnknown is what a job read from its memo alone says of its counts.
const progressUnknown = "the job's workflow did not answer (no worker polls its task queue, or none has started it yet): " +
	"its counts are not known, done and failed read 0 and total and remaining -1"

// getJob answers GET /api/jobs/{id}; a bulk retry's with the outcomes of its retries so far.
func (a *API) getJob(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	job, err := a.readJob(ctx, principalOf(r.Context()), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	if job.Kind == jobs.KindBulkRetry {
		c, err := a.jobOutcomes(ctx, job)
		if err != nil {
			a.log.Warn("job outcomes unreadable", "job", job.ID, "error", err)
		} else {
			job.Outcomes = &c
		}
	}
	writeJSON(w, http.StatusOK, JobResponse{Job: job})
}

// listJobs answers GET /api/jobs: the newest maxListedJobs jobs the caller may see.
func (a *API) listJobs(w http.ResponseWriter, r *http.Request) {
	if err := knownParams(r.URL.Query()); err != nil {
		fail(w, err)
		return
	}
	p := principalOf(r.Context())
	ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
	defer cancel()
	type row struct {
		base   jobs.Progress
		status enumspb.WorkflowExecutionStatus
	}
	var rows []row
	var token []byte
	for {
		resp, err := a.cfg.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: a.cfg.Namespace, PageSize: scanPageSize, NextPageToken: token, Query: a.jobsQuery(),
		})
		if err != nil {
			fail(w, fmt.Errorf("list jobs: %w", err))
			return
		}
		for _, e := range resp.GetExecutions() {
			base := memoOf(e.GetExecution().GetWorkflowId(), e.GetMemo())
			if p.Allows(base.Tenant) {
				rows = append(rows, row{base: base, status: e.GetStatus()})
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 || len(rows) >= a.cfg.MaxScan {
			break
		}
	}
	slices.SortFunc(rows, func(x, y row) int {
		if c := y.base.StartedAt.Compare(x.base.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(x.base.ID, y.base.ID)
	})
	rows = rows[:min(len(rows), maxListedJobs)]
	out := JobListResponse{Jobs: make([]jobs.Progress, len(rows))}
	readEach(ctx, len(rows), jobQueryTimeout, func(qctx context.Context, i int) {
		out.Jobs[i] = a.jobProgress(qctx, rows[i].base, rows[i].status)
	})
	writeJSON(w, http.StatusOK, out)
}

// postJobAction answers POST /api/jobs/{id}/cancel: the job stops after the batch in flight;
// 409 when it has already ended.
func (a *API) postJobAction(w http.ResponseWriter, r *http.Request) {
	id, name, ok := splitAction(w, r, "POST /api/jobs/{id}/cancel")
	if !ok {
		return
	}
	if name != "cancel" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown job action %q (want cancel)", name))
		return
	}
	p := principalOf(r.Context())
	reason, ok := readReason(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+a.cfg.ActionWait)
	defer cancel()
	job, err := a.readJob(ctx, p, id)
	if err == nil && job.State != jobs.StateRunning {
		err = &apiError{Status: http.StatusConflict, Msg: fmt.Sprintf("job %q is %s: only a running job can be cancelled", id, job.State)}
	}
	if err == nil {
		job, err = a.cancelJob(ctx, p, id, reason)
	}
	if err != nil {
		a.audit(p, "cancel-job", nil, reason, "refused", "job", id, "error", err.Error())
		fail(w, err)
		return
	}
	a.audit(p, "cancel-job", nil, reason, "applied", "job", id, "done", job.Done, "failed", job.Failed)
	writeJSON(w, http.StatusOK, JobResponse{Job: job})
}

// cancelJob sends the cancel update; the workflow refuses it once it is ending (409).
func (a *API) cancelJob(ctx context.Context, p Principal, id, reason string) (jobs.Progress, error) {
	var job jobs.Progress
	h, err := a.cfg.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: jobs.UpdateCancel, Args: []any{jobs.Cancel{Actor: p.Name, Reason: reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &job)
	}
	var appErr *temporal.ApplicationError
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &appErr), errors.As(err, &nf):
		return job, &apiError{Status: http.StatusConflict, Msg: fmt.Sprintf("job %q: %v", id, err)}
	case err != nil:
		return job, fmt.Errorf("cancel job %s: %w", id, err)
	}
	return job, nil
}
