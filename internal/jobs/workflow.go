package jobs

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Defaults and bounds of a job.
const (
	// DefaultMaxHistory is the history length at which a job continues as new: a 10,000-item
	// job takes thousands of events.
	DefaultMaxHistory = 2000
	// DefaultSettleEvery is how often a canary replay reads its replayed items' outcomes.
	DefaultSettleEvery = time.Second
	// batchSeconds is how long one batch takes at the job's rate: the items are acted on, then
	// the job waits that long. Progress and a cancel are seen that often.
	batchSeconds = 1
	// maxBatch bounds a batch at high rates.
	maxBatch = 200
	// minCanaryBatch is the smallest cap of a batch after a canary passed: the canary's size,
	// but at least this.
	minCanaryBatch = 10
	// pageSize is the visibility page a job reads at a time.
	pageSize = 500
	// canarySlack is added to the replayed items' longest quiet window for the default canary
	// timeout: the republish, the consumer's failure and its report take some time.
	canarySlack = 30 * time.Second
)

var (
	// Listing and counting retry until Temporal answers: a job waits out an outage.
	listOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	}
	countOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
	}
	// A batch is maxBatch items at ItemTimeout each at worst.
	applyOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	}
	outcomeOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second},
	}
)

// JobWorkflow runs one job: it acts on the selected items in batches at the job's rate,
// counting what it did, until none is left, its canary fails, or it is cancelled; it
// continues as new when its history grows long. Its result is the final Progress.
func JobWorkflow(ctx workflow.Context, in Input) (Progress, error) {
	j, err := newJob(ctx, in)
	if err != nil {
		return Progress{}, err
	}
	return j.run()
}

// job is one run of a job.
type job struct {
	ctx workflow.Context
	in  Input
	c   Carry
	// cancel is set by UpdateCancel.
	cancel *Cancel
	// steps counts this run's local activities.
	steps int
}

// acts names the local activities: methods of a nil *Activities, so that the function has
// the activity's own signature (a method expression would add the receiver, which a worker
// replaying without the activities registered refuses).
var acts *Activities

// eventsPerStep is about how many history events a step adds: a local activity's marker, a
// batch's timer (started, fired) and a workflow task's three events.
const eventsPerStep = 6

// longHistory says whether this run's history is long enough to continue as new: its length,
// or an estimate from its steps where the length is not known (the SDK's test environment).
func (j *job) longHistory() bool {
	n := max(workflow.GetInfo(j.ctx).GetCurrentHistoryLength(), j.steps*eventsPerStep)
	return n >= j.in.MaxHistory
}

// local runs a local activity and counts it.
func (j *job) local(ctx workflow.Context, fn, arg, out any) error {
	j.steps++
	return workflow.ExecuteLocalActivity(ctx, fn, arg).Get(ctx, out)
}

func newJob(ctx workflow.Context, in Input) (*job, error) {
	if in.Rate <= 0 || math.IsInf(in.Rate, 0) || math.IsNaN(in.Rate) {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("job rate %v must be positive", in.Rate), "BadJob", nil)
	}
	if in.MaxHistory <= 0 {
		in.MaxHistory = DefaultMaxHistory
	}
	if in.SettleEvery <= 0 {
		in.SettleEvery = DefaultSettleEvery
	}
	ctx = workflow.WithLocalActivityOptions(ctx, applyOptions)
	j := &job{ctx: ctx, in: in}
	if in.Carry != nil {
		j.c = *in.Carry
	} else {
		j.c.Progress = Progress{
			ID: workflow.GetInfo(ctx).WorkflowExecution.ID, Kind: in.Kind, Action: in.Target.Action, State: StateRunning,
			Actor: in.Target.Actor, Tenant: in.Target.Tenant, Reason: in.Target.Reason, Filter: in.Filter, Rate: in.Rate,
			Total: -1, StartedAt: workflow.Now(ctx).UTC(),
		}
		if in.Canary != nil && in.Canary.N > 0 {
			j.c.Progress.Canary = &CanaryStatus{N: in.Canary.N, MaxFailureRatio: in.Canary.MaxRatio, Verdict: VerdictPending}
		}
	}
	j.c.Progress.Runs++
	j.cancel, j.c.Cancel = j.c.Cancel, nil
	j.in.Carry = nil
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return j.progress(), nil }); err != nil {
		return nil, err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel, func(ctx workflow.Context, c Cancel) (Progress, error) {
		j.cancel = &c
		return j.progress(), nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, c Cancel) error {
		if c.Actor == "" {
			return errors.New("a cancel names its actor")
		}
		if j.c.Progress.State != StateRunning || j.cancel != nil {
			return temporal.NewApplicationError("the job is already ending", "JobEnded")
		}
		return nil
	}})
	return j, err
}

// progress is the job's Progress now.
func (j *job) progress() Progress {
	p := j.c.Progress
	if p.Canary != nil {
		cs := *p.Canary
		cs.Pending = len(j.c.Pending)
		cs.Timeout = j.canaryTimeout().String()
		p.Canary = &cs
	}
	if p.State == StateRunning {
		switch {
		case j.in.Query == "" && p.Total < 0:
		case j.in.Query == "":
			p.Remaining = int64(len(j.in.IDs) - j.c.Next)
		case p.Total >= 0:
			p.Remaining = max(0, p.Total-int64(p.Done+p.Failed))
		default:
			p.Remaining = -1
		}
	}
	return p
}

func (j *job) run() (Progress, error) {
	p := &j.c.Progress
	if p.Runs == 1 {
		j.count()
	}
	for {
		if j.stopping() {
			return j.end()
		}
		if j.longHistory() {
			return j.continueAsNew()
		}
		ids, err := j.nextBatch()
		if err != nil {
			return j.fail(err)
		}
		if len(ids) == 0 {
			break
		}
		if err := j.apply(ids); err != nil {
			return j.fail(err)
		}
		if err := j.judge(); err != nil {
			return j.fail(err)
		}
	}
	if j.canary() {
		if err := j.settleAll(true); err != nil {
			return j.fail(err)
		}
		if p.Stopped == "" && j.tooMany() {
			p.Canary.Verdict = VerdictFailed
			p.Stopped = "the failure ratio reached the threshold after every match was replayed: " + j.ratio()
		}
	}
	return j.end()
}

// count reads the job's total: the ids listed, or a visibility count (unknown when it fails).
func (j *job) count() {
	p := &j.c.Progress
	if j.in.Query == "" {
		p.Total = int64(len(j.in.IDs))
		return
	}
	var n int64
	if err := j.local(workflow.WithLocalActivityOptions(j.ctx, countOptions), acts.JobCount, j.in.Query, &n); err != nil {
		workflow.GetLogger(j.ctx).Warn("job: count failed; its total stays unknown", "error", err)
		return
	}
	p.Total = n
}

// stopping says whether the job stops now: cancelled, or stopped by its canary.
func (j *job) stopping() bool {
	p := &j.c.Progress
	if j.cancel != nil && p.Stopped == "" {
		p.Stopped = "cancelled by " + j.cancel.Actor
		if j.cancel.Reason != "" {
			p.Stopped += ": " + j.cancel.Reason
		}
		p.CancelledBy = j.cancel.Actor
	}
	return p.Stopped != ""
}

// batchSize is how many items one batch acts on: about batchSeconds at the job's rate, and
// during a canary no more than the canary still needs.
func (j *job) batchSize() int {
	n := int(math.Min(maxBatch, math.Max(1, math.Ceil(j.in.Rate*batchSeconds))))
	switch {
	case j.canary() && !j.c.CanaryDone:
		n = min(n, max(1, j.in.Canary.N-j.replayed()))
	case j.canary():
		// The failure ratio is judged between batches: small ones stop a replay going bad soon.
		n = min(n, max(j.in.Canary.N, minCanaryBatch))
	}
	return n
}

// nextBatch takes the next ids to act on: from the listed ids, or from the current
// visibility page, reading the next page when it is used up.
func (j *job) nextBatch() ([]string, error) {
	size := j.batchSize()
	if j.in.Query == "" {
		end := min(len(j.in.IDs), j.c.Next+size)
		ids := j.in.IDs[j.c.Next:end]
		j.c.Next = end
		return ids, nil
	}
	if len(j.c.Buffer) == 0 && !j.c.Listed {
		var page PageResult
		req := PageRequest{Query: j.in.Query, Token: j.c.Token, Size: pageSize}
		if err := j.local(workflow.WithLocalActivityOptions(j.ctx, listOptions), acts.JobPage, req, &page); err != nil {
			return nil, fmt.Errorf("list the job's items: %w", err)
		}
		j.c.Buffer, j.c.Token, j.c.Listed = page.IDs, page.Next, len(page.Next) == 0
	}
	n := min(size, len(j.c.Buffer))
	ids := j.c.Buffer[:n:n]
	j.c.Buffer = j.c.Buffer[n:]
	return ids, nil
}

// apply acts on ids and counts the results.
func (j *job) apply(ids []string) error {
	var res []Applied
	req := ApplyRequest{Target: j.in.Target, IDs: ids}
	if err := j.local(j.ctx, acts.JobApply, req, &res); err != nil {
		return fmt.Errorf("act on %d items: %w", len(ids), err)
	}
	// The rate: a batch of n items takes at least n/rate; the job waits idle (answering its
	// progress query at once) and a cancel ends the wait.
	pace := time.Duration(float64(len(ids)) / j.in.Rate * float64(time.Second))
	if _, err := workflow.AwaitWithTimeout(j.ctx, pace, func() bool { return j.cancel != nil }); err != nil {
		return err
	}
	p := &j.c.Progress
	now := workflow.Now(j.ctx)
	for _, r := range res {
		if r.Err != "" {
			p.Failed++
			if p.Errors == nil {
				p.Errors = map[string]string{}
			}
			if len(p.Errors) < MaxErrors {
				p.Errors[r.ID] = r.Err
			}
			continue
		}
		p.Done++
		if j.canary() {
			j.c.Quiet = max(j.c.Quiet, r.QuietWindow)
			j.c.Pending = append(j.c.Pending, Baseline{ID: r.ID, Attempts: r.Attempts, Resets: r.Resets, At: now})
		}
	}
	return nil
}

// judge is the canary's step after a batch: once the canary is replayed, wait for its
// outcomes and stop if too many failed again; after it, settle what is pending and stop when
// the failure ratio crosses the threshold.
func (j *job) judge() error {
	if !j.canary() {
		return nil
	}
	p := &j.c.Progress
	if !j.c.CanaryDone {
		if j.replayed() < j.in.Canary.N && !j.exhausted() {
			return nil
		}
		if j.replayed() == 0 {
			if !j.exhausted() {
				p.Stopped = "no dead letter of the canary could be replayed"
				p.Canary.Verdict = VerdictFailed
			}
			return nil
		}
		if err := j.settleAll(false); err != nil || j.cancel != nil {
			return err
		}
		if j.tooMany() {
			p.Canary.Verdict = VerdictFailed
			p.Stopped = "the canary failed: " + j.ratio()
			return nil
		}
		j.c.CanaryDone = true
		p.Canary.Verdict = VerdictPassed
		return nil
	}
	if err := j.settle(); err != nil {
		return err
	}
	if j.tooMany() {
		p.Canary.Verdict = VerdictFailed
		p.Stopped = "the failure ratio crossed the threshold: " + j.ratio()
	}
	return nil
}

// exhausted says whether no item is left to act on.
func (j *job) exhausted() bool {
	if j.in.Query == "" {
		return j.c.Next >= len(j.in.IDs)
	}
	return j.c.Listed && len(j.c.Buffer) == 0
}

func (j *job) canary() bool { return j.in.Canary != nil && j.in.Canary.N > 0 }

// replayed counts the items the canary replay sent a retry to.
func (j *job) replayed() int { return j.c.Progress.Done }

func (j *job) judged() int {
	cs := j.c.Progress.Canary
	return cs.Delivered + cs.Failed + cs.Unknown
}

func (j *job) failures() int { return j.c.Progress.Canary.Failed + j.c.Progress.Canary.Unknown }

// tooMany says whether the failures of what was judged reach the threshold, once at least the
// canary's size (or everything replayed, when fewer) has been judged.
func (j *job) tooMany() bool {
	need := min(j.in.Canary.N, j.replayed())
	return need > 0 && j.judged() >= need && float64(j.failures()) >= j.in.Canary.MaxRatio*float64(j.judged())
}

func (j *job) ratio() string {
	return fmt.Sprintf("%d of %d judged failed again (%.2f ≥ %.2f)", j.failures(), j.judged(),
		float64(j.failures())/float64(max(j.judged(), 1)), j.in.Canary.MaxRatio)
}

// canaryTimeout is how long a replayed item has to settle.
func (j *job) canaryTimeout() time.Duration {
	if j.in.Canary == nil {
		return 0
	}
	if j.in.Canary.Timeout > 0 {
		return j.in.Canary.Timeout
	}
	return j.c.Quiet + canarySlack
}

// settle reads the outcome of every pending item once (after a batch, or every SettleEvery
// while the job waits); an item past its timeout is unknown.
func (j *job) settle() error {
	if len(j.c.Pending) == 0 {
		return nil
	}
	var outs []Outcome
	if err := j.local(workflow.WithLocalActivityOptions(j.ctx, outcomeOptions), acts.JobOutcomes, j.c.Pending, &outs); err != nil {
		return fmt.Errorf("read the replayed items' outcomes: %w", err)
	}
	if len(outs) != len(j.c.Pending) {
		return fmt.Errorf("read %d outcomes of %d replayed items", len(outs), len(j.c.Pending))
	}
	now := workflow.Now(j.ctx)
	cs := j.c.Progress.Canary
	left := j.c.Pending[:0:0]
	for i, b := range j.c.Pending {
		switch {
		case outs[i] == Delivered:
			cs.Delivered++
		case outs[i] == FailedAgain:
			cs.Failed++
		case now.Sub(b.At) >= j.canaryTimeout():
			cs.Unknown++
		default:
			left = append(left, b)
		}
	}
	j.c.Pending = left
	return nil
}

// settleAll settles until nothing is pending, or, when stopEarly, until the failures reach
// the threshold, or the job is cancelled.
func (j *job) settleAll(stopEarly bool) error {
	for {
		if err := j.settle(); err != nil {
			return err
		}
		if len(j.c.Pending) == 0 || (stopEarly && j.tooMany()) || j.cancel != nil {
			return nil
		}
		if _, err := workflow.AwaitWithTimeout(j.ctx, j.in.SettleEvery, func() bool { return j.cancel != nil }); err != nil {
			return err
		}
	}
}

// end finishes the job: completed, or cancelled when a cancel stopped it.
func (j *job) end() (Progress, error) {
	p := &j.c.Progress
	p.State = StateCompleted
	if j.cancel != nil {
		p.State = StateCancelled
	}
	out := j.progress()
	out.Remaining = 0
	if j.in.Query == "" {
		out.Remaining = int64(len(j.in.IDs) - j.c.Next)
	} else if !j.exhausted() && p.Total >= 0 {
		out.Remaining = max(0, p.Total-int64(p.Done+p.Failed))
	}
	t := workflow.Now(j.ctx).UTC()
	out.EndedAt = &t
	j.c.Progress = out
	// The end of an operator's action is part of its audit trail.
	workflow.GetLogger(j.ctx).Info("job ended", "job", out.ID, "kind", out.Kind, "state", out.State, "actor", out.Actor,
		"reason", out.Reason, "total", out.Total, "done", out.Done, "failed", out.Failed, "remaining", out.Remaining,
		"stopped", out.Stopped, "cancelled_by", out.CancelledBy)
	return out, nil
}

// fail ends the job on an error its activities' retries did not cure.
func (j *job) fail(err error) (Progress, error) {
	j.c.Progress.State = StateFailed
	j.c.Progress.Stopped = err.Error()
	t := workflow.Now(j.ctx).UTC()
	j.c.Progress.EndedAt = &t
	return j.c.Progress, err
}

// continueAsNew hands the job's state to a fresh run, after any update in flight.
func (j *job) continueAsNew() (Progress, error) {
	if err := workflow.Await(j.ctx, func() bool { return workflow.AllHandlersFinished(j.ctx) }); err != nil {
		return Progress{}, err
	}
	in := j.in
	c := j.c
	c.Cancel = j.cancel
	in.Carry = &c
	return Progress{}, workflow.NewContinueAsNewError(j.ctx, WorkflowName, in)
}
