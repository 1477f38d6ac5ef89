//go:build integration

package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// The operator paths of RetryWorkflow and BreakerWorkflow on a real server, one recorded
// history each (with RECORD_HISTORIES set) for the replay tests: skip by signal and by Update,
// retry-now and discard by Update, a breaker's pause and resume by signal and by Update, and
// a breaker that continues as new.

// pathsQueue is the original queue of the messages of these tests.
const pathsQueue = "orders"

// op is the operator of these tests' actions.
var op = workflows.OperatorAction{Actor: "op", Reason: "path test"}

// scheduledPolicy retries an hour after a failure, so that the run waits scheduled for the
// operator; a retry that goes out is delivered after a quiet second.
func scheduledPolicy() policy.Policy {
	return policy.Policy{
		Name:        "scheduled",
		Backoff:     policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{time.Hour}},
		Jitter:      policy.Jitter{Mode: policy.NoJitter},
		MaxRetries:  3,
		QuietWindow: time.Second,
	}
}

// scheduledRun is one message's run, scheduled an hour ahead on a worker of its own task queue
// whose publisher keeps what it is given.
type scheduledRun struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	id  string
	pub *queuePublisher
}

// startScheduledRun reports a failure of a new message (its id made from prefix) and waits for
// its run to be scheduled; the test has two minutes.
func startScheduledRun(t *testing.T, prefix string) *scheduledRun {
	t.Helper()
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	taskQueue := devserver.UniqueName(prefix)
	r := &scheduledRun{t: t, ctx: ctx, c: c, id: message.WorkflowID(pathsQueue, taskQueue), pub: &queuePublisher{}}
	t.Cleanup(startWorker(t, c, taskQueue, &activities.Activities{Publisher: r.pub, Logger: discardLogger()}))
	reports := &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: time.Hour}
	require.NoError(t, reports.Report(ctx, message.FailureReport{
		Message:         message.Message{MessageID: taskQueue, Payload: []byte("x"), OriginalQueue: pathsQueue},
		Failure:         policy.Failure{Category: "transient", Reason: "503"},
		Policy:          scheduledPolicy(),
		DeadLetterQueue: "dead",
	}))
	waitForStatus(t, ctx, c, r.id, workflows.StatusScheduled)
	return r
}

// update sends operator Update name with op and answers the state after it.
func (r *scheduledRun) update(name string) workflows.State {
	r.t.Helper()
	var st workflows.State
	require.NoError(r.t, updateWorkflow(r.ctx, r.c, r.id, name, op, &st), "update %s", name)
	return st
}

// signal sends operator signal name with op.
func (r *scheduledRun) signal(name string) {
	r.t.Helper()
	require.NoError(r.t, r.c.SignalWorkflow(r.ctx, r.id, "", name, op), "signal %s", name)
}

// result waits for the run's end.
func (r *scheduledRun) result() workflows.Result {
	r.t.Helper()
	var res workflows.Result
	require.NoError(r.t, r.c.GetWorkflow(r.ctx, r.id, "").Get(r.ctx, &res))
	return res
}

// deadLetter is the one dead-letter envelope published, which the run's skip sent.
func (r *scheduledRun) deadLetter() message.Envelope {
	r.t.Helper()
	dead := r.pub.to("dead")
	require.Len(r.t, dead, 1, "one dead-letter envelope")
	var env message.Envelope
	require.NoError(r.t, json.Unmarshal(dead[0], &env))
	return env
}

// record writes the run's history as name.
func (r *scheduledRun) record(name string) {
	r.t.Helper()
	_, err := historytest.Record(r.ctx, r.c, r.id, name)
	require.NoError(r.t, err)
}

// updateWorkflow sends Update name with arg to workflow id, waits for its result and decodes it
// into out.
func updateWorkflow(ctx context.Context, c client.Client, id, name string, arg, out any) error {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, out)
}

// requireRefused says err is an operator action refused as illegal.
func requireRefused(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr, msgAndArgs...)
	require.Equal(t, workflows.ErrTypeIllegalAction, appErr.Type(), msgAndArgs...)
}

// A scheduled message skipped by the skip signal goes to dead at once, and the discard Update
// closes it: the Update's answer and the run's result are discarded. Its history is
// scheduled-skipped-by-signal-discarded-by-update.
func TestSkipBySignalAndDiscardByUpdateOnADevServer(t *testing.T) {
	r := startScheduledRun(t, "skipsig")
	r.signal(workflows.SignalSkip)
	waitForStatus(t, r.ctx, r.c, r.id, workflows.StatusDead)
	env := r.deadLetter()
	require.Equal(t, workflows.CauseSkipped, env.DeadReason)
	require.Empty(t, r.pub.to(pathsQueue), "a skipped message is not republished")

	st := r.update(workflows.UpdateDiscard)
	require.Equal(t, workflows.StatusDiscarded, st.Status)
	res := r.result()
	require.Equal(t, workflows.StatusDiscarded, res.Status)
	require.Zero(t, res.RetryCount)
	r.record("scheduled-skipped-by-signal-discarded-by-update")
}

// A scheduled message skipped by the skip Update is dead in the Update's answer; the retry-now
// Update takes it back (the count reset) and republishes it at once, and it is delivered after
// the quiet window. Its history is scheduled-skipped-by-update-retried-by-update-delivered.
func TestSkipAndRetryNowByUpdateOnADevServer(t *testing.T) {
	r := startScheduledRun(t, "skipupd")
	st := r.update(workflows.UpdateSkip)
	require.Equal(t, workflows.StatusDead, st.Status)
	require.Equal(t, workflows.CauseSkipped, st.DeadReason)
	require.Equal(t, workflows.CauseSkipped, r.deadLetter().DeadReason)
	var again workflows.State
	requireRefused(t, updateWorkflow(r.ctx, r.c, r.id, workflows.UpdateSkip, op, &again), "a dead message cannot be skipped")

	st = r.update(workflows.UpdateRetryNow)
	require.Equal(t, 1, st.Resets, "the retry from dead resets the count")
	res := r.result()
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, 1, res.RetryCount)
	require.Len(t, r.pub.to(pathsQueue), 1, "one republish, at the retry-now")
	r.record("scheduled-skipped-by-update-retried-by-update-delivered")
}

// A scheduled message is republished at once by the retry-now Update, an hour early, and is
// delivered after the quiet window. Its history is scheduled-retried-now-by-update-delivered.
func TestRetryNowByUpdateWhileScheduledOnADevServer(t *testing.T) {
	r := startScheduledRun(t, "retrynow")
	st := r.update(workflows.UpdateRetryNow)
	require.Contains(t, []workflows.Status{workflows.StatusRepublishing, workflows.StatusAwaitingOutcome}, st.Status)
	res := r.result()
	require.Equal(t, workflows.StatusDelivered, res.Status)
	require.Equal(t, 1, res.RetryCount)
	require.Len(t, r.pub.to(pathsQueue), 1)
	r.record("scheduled-retried-now-by-update-delivered")
}

// A retry held by its destination's breaker is skipped by the skip Update: dead, nothing
// published but the dead letter; the resolve signal closes it. Its history is
// held-skipped-by-update-resolved.
func TestHeldRetrySkippedByUpdateOnADevServer(t *testing.T) {
	h := startHeldRun(t, "heldskip", "")
	h.report(0, "")
	waitForStatus(t, h.ctx, h.c, h.id, workflows.StatusHeld)

	var st workflows.State
	require.NoError(t, updateWorkflow(h.ctx, h.c, h.id, workflows.UpdateSkip, op, &st))
	require.Equal(t, workflows.StatusDead, st.Status)
	require.Equal(t, workflows.CauseSkipped, st.DeadReason)
	require.True(t, st.HeldSince.IsZero(), "the hold ended")
	require.NoError(t, h.c.SignalWorkflow(h.ctx, h.id, "", workflows.SignalResolve, op))
	var res workflows.Result
	require.NoError(t, h.c.GetWorkflow(h.ctx, h.id, "").Get(h.ctx, &res))
	require.Equal(t, workflows.StatusResolved, res.Status)
	require.Empty(t, h.pub.published(), "no retry went out")

	_, err := historytest.Record(h.ctx, h.c, h.id, "held-skipped-by-update-resolved")
	require.NoError(t, err)
}

// pathsBreaker ends two seconds after it was last closed or reported to, so that a test sees
// its whole run.
func pathsBreaker() policy.Breaker {
	return policy.Breaker{IdleEnd: 2 * time.Second}.WithDefaults()
}

// breakerRig drives one destination's breaker on a worker of its own task queue.
type breakerRig struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	id       string
	queue    string
	tq       string
	settings policy.Breaker
}

// startBreaker starts a worker for a new destination's breaker on the server c talks to; the
// test has two minutes. The breaker starts with the first outcomes.
func startBreaker(t *testing.T, c client.Client, prefix string) *breakerRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	tq := devserver.UniqueName(prefix)
	b := &breakerRig{t: t, ctx: ctx, c: c, queue: tq + ".orders", tq: tq, settings: pathsBreaker()}
	b.id = message.BreakerWorkflowID(b.queue)
	t.Cleanup(startWorker(t, c, tq, &activities.Activities{Logger: discardLogger()}))
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), b.id, "", "test over") })
	return b
}

// outcomes reports republished and failed republishes, starting the breaker if need be.
func (b *breakerRig) outcomes(republished, failed int) {
	b.t.Helper()
	_, err := b.c.SignalWithStartWorkflow(b.ctx, b.id, workflows.SignalBreakerOutcomes,
		workflows.BreakerOutcomes{Republished: republished, Failed: failed, Settings: b.settings},
		client.StartWorkflowOptions{ID: b.id, TaskQueue: b.tq}, workflows.BreakerWorkflowName,
		workflows.BreakerInput{Queue: b.queue, Settings: b.settings})
	require.NoError(b.t, err)
}

// state queries the breaker's latest run.
func (b *breakerRig) state() workflows.BreakerState {
	b.t.Helper()
	return queryAs[workflows.BreakerState](b.t, b.ctx, b.c, b.id, workflows.QueryBreakerState)
}

// awaitMode waits until the breaker is in mode m, and answers its state then.
func (b *breakerRig) awaitMode(m workflows.BreakerMode) workflows.BreakerState {
	b.t.Helper()
	var st workflows.BreakerState
	require.Eventually(b.t, func() bool { st = b.state(); return st.Mode == m }, time.Minute, 20*time.Millisecond, "breaker %s", m)
	return st
}

// update sends breaker Update name with op.
func (b *breakerRig) update(name string) (workflows.BreakerState, error) {
	var st workflows.BreakerState
	err := updateWorkflow(b.ctx, b.c, b.id, name, op, &st)
	return st, err
}

// awaitEnd waits until the breaker's latest run ends by itself.
func (b *breakerRig) awaitEnd() {
	b.t.Helper()
	require.NoError(b.t, b.c.GetWorkflow(b.ctx, b.id, "").Get(b.ctx, nil), "the idle breaker ends")
}

// lastEvents are the actors and modes of the breaker state's last n events.
func lastEvents(st workflows.BreakerState, n int) []workflows.BreakerEvent {
	var out []workflows.BreakerEvent
	for _, e := range st.Events[max(0, len(st.Events)-n):] {
		out = append(out, workflows.BreakerEvent{To: e.To, Actor: e.Actor, Detail: e.Detail})
	}
	return out
}

// An operator's pause signal holds a closed breaker's destination, and the resume signal
// closes it again; idle, it then ends. Its history is breaker-paused-resumed-by-signal-idle-ended.
func TestBreakerPausedAndResumedBySignalOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	b := startBreaker(t, srv.DialForTest(t), "pausesig")
	b.outcomes(1, 0)
	require.NoError(t, b.c.SignalWorkflow(b.ctx, b.id, "", workflows.SignalBreakerPause, op))
	st := b.awaitMode(workflows.BreakerPaused)
	require.Equal(t, &op, st.PausedBy)
	require.True(t, st.Mode.Holds())

	require.NoError(t, b.c.SignalWorkflow(b.ctx, b.id, "", workflows.SignalBreakerResume, op))
	st = b.awaitMode(workflows.BreakerClosed)
	require.Nil(t, st.PausedBy)
	require.Equal(t, []workflows.BreakerEvent{
		{To: workflows.BreakerPaused, Actor: op.Actor, Detail: op.Reason},
		{To: workflows.BreakerClosed, Actor: op.Actor, Detail: op.Reason},
	}, lastEvents(st, 2))
	b.awaitEnd()

	_, err := historytest.Record(b.ctx, b.c, b.id, "breaker-paused-resumed-by-signal-idle-ended")
	require.NoError(t, err)
}

// The pause and resume Updates answer the breaker's state after each; a second pause is
// refused before it enters the history. Idle after the resume, the breaker ends. Its history
// is breaker-paused-resumed-by-update-idle-ended.
func TestBreakerPausedAndResumedByUpdateOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	b := startBreaker(t, srv.DialForTest(t), "pauseupd")
	b.outcomes(1, 0)
	st, err := b.update(workflows.UpdateBreakerPause)
	require.NoError(t, err)
	require.Equal(t, workflows.BreakerPaused, st.Mode)
	require.Equal(t, &op, st.PausedBy)
	_, err = b.update(workflows.UpdateBreakerPause)
	requireRefused(t, err, "paused already")

	st, err = b.update(workflows.UpdateBreakerResume)
	require.NoError(t, err)
	require.Equal(t, workflows.BreakerClosed, st.Mode)
	require.Nil(t, st.PausedBy)
	require.True(t, st.Releasing, "a resume releases the held retries")
	b.awaitEnd()

	_, err = historytest.Record(b.ctx, b.c, b.id, "breaker-paused-resumed-by-update-idle-ended")
	require.NoError(t, err)
}

// suggestContinueAsNewAt is the history length at which the server of
// TestBreakerContinuesAsNewOnADevServer suggests continuing as new: a breaker's own threshold
// (breakerMaxHistory, 5,000 events) takes minutes of signals to reach, the server's
// suggestion (GetContinueAsNewSuggested, 4K events by default) is set in its dynamic config.
// A run that starts paused and is resumed until it ends stays below it.
const suggestContinueAsNewAt = 40

// startServerSuggestingContinueAsNew starts a private server, on the engine of
// devserver.StartOwnedForTest, that suggests continuing as new at suggestContinueAsNewAt
// events; it is stopped when the test ends.
func startServerSuggestingContinueAsNew(t *testing.T) *devserver.Server {
	t.Helper()
	o, err := devserver.OptionsFromEnv(os.Getenv)
	require.NoError(t, err)
	o.ExtraArgs = append(o.ExtraArgs, "--dynamic-config-value",
		"limit.historyCount.suggestContinueAsNew="+strconv.Itoa(suggestContinueAsNewAt))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := devserver.Start(ctx, o)
	if errors.Is(err, devserver.ErrEngineUnavailable) {
		testenv.Missing(t, "%s unavailable here: %v", o.Engine.ServerName(), err)
	}
	require.NoError(t, err, "start the %s", o.Engine.ServerName())
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the %s: %v", srv.Engine.ServerName(), err)
		}
	})
	return srv
}

// A paused breaker continues as new when its server suggests it (here after
// suggestContinueAsNewAt events of outcomes), carrying its state: the new run is paused by the
// same operator, takes the resume signal, and ends idle. The run that continued is recorded as
// breaker-paused-continued-as-new, the one it started as breaker-resumed-after-continue-as-new.
func TestBreakerContinuesAsNewOnADevServer(t *testing.T) {
	srv := startServerSuggestingContinueAsNew(t)
	c := srv.DialForTest(t)
	b := startBreaker(t, c, "breakercan")
	b.outcomes(1, 0)
	st, err := b.update(workflows.UpdateBreakerPause)
	require.NoError(t, err)
	require.Equal(t, workflows.BreakerPaused, st.Mode)
	first := latestRun(t, b)

	for i := 0; latestRun(t, b) == first; i++ {
		require.Less(t, i, 4*suggestContinueAsNewAt, "the breaker never continued as new")
		b.outcomes(1, 0)
		time.Sleep(50 * time.Millisecond)
	}
	st = b.awaitMode(workflows.BreakerPaused)
	require.Equal(t, &op, st.PausedBy, "the new run is paused by the same operator")
	require.Equal(t, b.queue, st.Queue)

	require.NoError(t, c.SignalWorkflow(b.ctx, b.id, "", workflows.SignalBreakerResume, op))
	b.awaitEnd()
	second := latestRun(t, b)
	desc, err := c.DescribeWorkflow(b.ctx, b.id, first)
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, desc.RawResponse.GetWorkflowExecutionInfo().GetStatus())

	_, err = historytest.RecordRun(b.ctx, c, b.id, first, "breaker-paused-continued-as-new")
	require.NoError(t, err)
	_, err = historytest.RecordRun(b.ctx, c, b.id, second, "breaker-resumed-after-continue-as-new")
	require.NoError(t, err)
}

// latestRun is the run ID of the breaker's latest run.
func latestRun(t *testing.T, b *breakerRig) string {
	t.Helper()
	desc, err := b.c.DescribeWorkflow(b.ctx, b.id, "")
	require.NoError(t, err)
	return desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}
