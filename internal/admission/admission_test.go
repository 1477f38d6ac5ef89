package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// value reads a gauge or counter (prometheus/testutil would add a dependency to go.mod).
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Gauge != nil {
		return d.GetGauge().GetValue()
	}
	return d.GetCounter().GetValue()
}

// fakeDescriber answers DescribeTaskQueue with the stats the test sets for each type, and
// records the requests.
type fakeDescriber struct {
	mu    sync.Mutex
	stats map[enumspb.TaskQueueType]*taskqueuepb.TaskQueueStats
	err   error
	reqs  []*workflowservice.DescribeTaskQueueRequest
	// called receives a value for each call, when set.
	called chan struct{}
}

func (f *fakeDescriber) DescribeTaskQueue(_ context.Context, in *workflowservice.DescribeTaskQueueRequest, _ ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, in)
	if f.called != nil {
		select {
		case f.called <- struct{}{}:
		default:
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return &workflowservice.DescribeTaskQueueResponse{Stats: f.stats[in.GetTaskQueueType()]}, nil
}

// set makes the workflow type's backlog age and count, and the activity type's, what follows.
func (f *fakeDescriber) set(wfAge time.Duration, wfCount int64, actAge time.Duration, actCount int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = nil
	f.stats = map[enumspb.TaskQueueType]*taskqueuepb.TaskQueueStats{
		enumspb.TASK_QUEUE_TYPE_WORKFLOW: {ApproximateBacklogAge: durationpb.New(wfAge), ApproximateBacklogCount: wfCount, TasksDispatchRate: 3},
		enumspb.TASK_QUEUE_TYPE_ACTIVITY: {ApproximateBacklogAge: durationpb.New(actAge), ApproximateBacklogCount: actCount, TasksDispatchRate: 1},
	}
}

func (f *fakeDescriber) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// controllerRun is a Controller on a fake clock and a fake server, with its log and metrics.
type controllerRun struct {
	c     *Controller
	clock *fakeClock
	svc   *fakeDescriber
	log   *bytes.Buffer
	reg   *prometheus.Registry
}

func newTestController(t *testing.T, bound time.Duration) *controllerRun {
	t.Helper()
	r := &controllerRun{clock: newFakeClock(), svc: &fakeDescriber{}, log: &bytes.Buffer{}, reg: prometheus.NewRegistry()}
	r.svc.set(0, 0, 0, 0)
	r.c = New(Config{
		Service: r.svc, Namespace: "ns", TaskQueue: "tq", Bound: bound,
		Logger:     slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: r.reg, Now: r.clock.now,
	})
	return r
}

// step ends a period of the fake clock.
func (r *controllerRun) step() Reading {
	r.clock.advance(DefaultInterval)
	return r.c.Step(context.Background())
}

// clockReporter is a Reporter whose each call takes the time the test gives on the fake clock,
// and fails when told.
type clockReporter struct {
	clock *fakeClock
	took  time.Duration
	err   error
}

func (c *clockReporter) Report(context.Context, message.FailureReport) error {
	c.clock.advance(c.took)
	return c.err
}

func TestControllerReadsBothTaskQueueTypesWithStats(t *testing.T) {
	r := newTestController(t, DefaultBound)

	r.step()

	require.Len(t, r.svc.reqs, 2)
	var types []enumspb.TaskQueueType
	for _, req := range r.svc.reqs {
		assert.Equal(t, "ns", req.GetNamespace())
		assert.Equal(t, "tq", req.GetTaskQueue().GetName())
		assert.Equal(t, enumspb.TASK_QUEUE_KIND_NORMAL, req.GetTaskQueue().GetKind())
		assert.True(t, req.GetReportStats())
		types = append(types, req.GetTaskQueueType())
	}
	assert.ElementsMatch(t, []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY}, types)
}

func TestControllerLagIsTheLargerOfBacklogAgeAndReportLatency(t *testing.T) {
	r := newTestController(t, DefaultBound)
	rep := &clockReporter{clock: r.clock}
	timed := r.c.TimeReports(rep)
	report := func(took time.Duration) {
		rep.took = took
		_ = timed.Report(context.Background(), message.FailureReport{})
	}

	// The backlog's oldest task: the older of the two types; counts and rates add up.
	r.svc.set(3*time.Second, 10, time.Second, 2)
	for i := 1; i <= 10; i++ {
		report(time.Duration(i) * 100 * time.Millisecond)
	}
	got := r.step()
	require.NoError(t, got.StatsErr)
	assert.Equal(t, 3*time.Second, got.BacklogAge)
	assert.Equal(t, int64(12), got.BacklogCount)
	assert.Equal(t, 4.0, got.DispatchRate)
	assert.Equal(t, 900*time.Millisecond, got.ReportLatency, "p90 of 100 ms … 1 s")
	assert.Equal(t, 10, got.Reports)
	assert.Equal(t, 3*time.Second, got.Lag)
	assert.InDelta(t, 3.0, value(r.c.m.lag), 1e-9)

	// Slow reports and no backlog: the report latency is the lag. Each reading starts a new
	// window, and a failed report is not a latency.
	r.svc.set(0, 0, 0, 0)
	report(7 * time.Second)
	rep.err = errors.New("unavailable")
	report(time.Minute)
	got = r.step()
	assert.Equal(t, 7*time.Second, got.ReportLatency)
	assert.Equal(t, 1, got.Reports)
	assert.Equal(t, 7*time.Second, got.Lag)

	// No report at all: 0.
	got = r.step()
	assert.Zero(t, got.ReportLatency)
	assert.Zero(t, got.Lag)
}

// A report call that hangs counts before it ends: the age of the oldest one running.
func TestControllerCountsAReportStillRunning(t *testing.T) {
	r := newTestController(t, DefaultBound)
	entered, release := make(chan struct{}), make(chan struct{})
	timed := r.c.TimeReports(blockingReporter{entered: entered, release: release})
	done := make(chan error, 1)
	go func() { done <- timed.Report(context.Background(), message.FailureReport{}) }()
	<-entered

	r.clock.advance(6 * time.Second)
	got := r.c.Step(context.Background())

	assert.Equal(t, 6*time.Second, got.ReportLatency)
	assert.Equal(t, 6*time.Second, got.Lag)
	assert.Equal(t, stepEngaged, stepOf(r), "6 s is past the 5 s bound")
	close(release)
	require.NoError(t, <-done)
}

type blockingReporter struct{ entered, release chan struct{} }

func (b blockingReporter) Report(context.Context, message.FailureReport) error {
	close(b.entered)
	<-b.release
	return nil
}

// stepOf is whether the controller's limit holds, as a step: engaged or none.
func stepOf(r *controllerRun) step {
	if limited, _ := r.c.lim.state(); limited {
		return stepEngaged
	}
	return stepNone
}

func TestControllerKeepsMeasuringWhenTheStatsFail(t *testing.T) {
	r := newTestController(t, DefaultBound)
	rep := &clockReporter{clock: r.clock, took: 200 * time.Millisecond}
	_ = r.c.TimeReports(rep).Report(context.Background(), message.FailureReport{})
	r.svc.fail(errors.New("frontend unavailable"))

	got := r.step()
	r.step()

	require.ErrorContains(t, got.StatsErr, `describe the workflow tasks of task queue "tq": frontend unavailable`)
	assert.Equal(t, 200*time.Millisecond, got.Lag, "the report latency alone")
	assert.Equal(t, 2.0, value(r.c.m.errors))
	assert.Equal(t, 1, strings.Count(r.log.String(), "task-queue stats unreadable"), "one line a failing streak")
	assert.Contains(t, r.c.Status().StatsError, "frontend unavailable")

	r.svc.set(time.Second, 1, 0, 0)
	got = r.step()
	require.NoError(t, got.StatsErr)
	assert.Equal(t, time.Second, got.Lag)
	assert.Contains(t, r.log.String(), "task-queue stats readable again")
}

// A server that answers without stats (one too old for report_stats) fails the reading rather
// than reading as no backlog.
func TestControllerRefusesAnAnswerWithoutStats(t *testing.T) {
	r := newTestController(t, DefaultBound)
	r.svc.mu.Lock()
	r.svc.stats = nil
	r.svc.mu.Unlock()

	got := r.step()

	require.ErrorContains(t, got.StatsErr, "the server reported no stats")
}

func TestControllerEngagesAndReleasesWithLogsAndMetrics(t *testing.T) {
	r := newTestController(t, DefaultBound)
	admit := func(n int) {
		for range n {
			ok, _ := r.c.Ready()
			if ok {
				r.c.Take()
			}
		}
	}
	assert.Zero(t, value(r.c.m.limited))
	assert.False(t, r.c.Limited())

	// 40 deliveries in a period (20/s), and the backlog 8 s old: engaged at 16/s.
	admit(40)
	r.svc.set(8*time.Second, 500, 0, 0)
	r.step()

	assert.Equal(t, 1.0, value(r.c.m.limited))
	assert.Equal(t, 1.0, value(r.c.m.engagements))
	assert.InDelta(t, 16.0, value(r.c.m.rate), 1e-9)
	assert.Contains(t, r.log.String(), "intake limited")
	assert.Contains(t, r.log.String(), "lag_ms=8000 bound_ms=5000 rate_per_s=16")
	assert.True(t, r.c.Limited())
	st := r.c.Status()
	assert.True(t, st.IntakeLimited)
	assert.InDelta(t, 16.0, st.IntakeRateLimit, 1e-9)
	assert.Equal(t, 8.0, st.EngineLagSeconds)
	ok, wait := r.c.Ready()
	assert.False(t, ok)
	assert.Positive(t, wait)

	// Still lagging: down by a fifth.
	r.step()
	assert.InDelta(t, 12.8, value(r.c.m.rate), 1e-9)
	assert.Contains(t, r.log.String(), "intake limit adjusted")

	// The engine caught up and nothing more comes: released after three calm periods.
	r.svc.set(0, 0, 0, 0)
	for range releasePeriods {
		r.step()
	}
	assert.Zero(t, value(r.c.m.limited))
	assert.Zero(t, value(r.c.m.rate))
	assert.Equal(t, 1.0, value(r.c.m.engagements))
	assert.Contains(t, r.log.String(), "intake unlimited again")
	assert.Contains(t, r.log.String(), "engaged_for=8s")
	assert.False(t, r.c.Limited())
	ok, _ = r.c.Ready()
	assert.True(t, ok)
}

func TestControllerWithBoundZeroMeasuresButNeverLimits(t *testing.T) {
	r := newTestController(t, 0)
	r.svc.set(time.Hour, 1, 0, 0)

	r.step()

	assert.Equal(t, 3600.0, value(r.c.m.lag), "the lag is still exported")
	assert.Zero(t, value(r.c.m.limited))
	ok, _ := r.c.Ready()
	assert.True(t, ok)
	assert.False(t, r.c.Status().LimitingConfigured)
}

func TestControllerServesItsStatus(t *testing.T) {
	r := newTestController(t, DefaultBound)
	r.svc.set(2*time.Second, 7, 0, 0)
	r.step()
	rec := httptest.NewRecorder()

	r.c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/intake", nil))

	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, 2.0, body["engine_lag_seconds"])
	assert.Equal(t, false, body["intake_limited"])
	assert.Equal(t, 0.0, body["intake_rate_limit"])
	assert.Equal(t, 7.0, body["backlog_count"])
	assert.Equal(t, 5.0, body["bound_seconds"])
	assert.Equal(t, "tq", body["task_queue"])
	assert.Equal(t, "2026-11-28T12:00:02Z", body["measured_at"])
	assert.NotContains(t, body, "stats_error")
}

func TestControllerRunStepsEveryIntervalUntilCancelled(t *testing.T) {
	svc := &fakeDescriber{called: make(chan struct{}, 1)}
	svc.set(0, 0, 0, 0)
	c := New(Config{Service: svc, TaskQueue: "tq", Bound: DefaultBound, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Two readings, each of two calls.
	for range 4 {
		select {
		case <-svc.called:
		case <-time.After(10 * time.Second):
			t.Fatal("no reading within 10 s")
		}
	}
	cancel()

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	assert.NotEmpty(t, c.Status().MeasuredAt)
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Bound: -time.Second}.withDefaults()
	assert.Equal(t, DefaultInterval, c.Interval)
	assert.Equal(t, DefaultInterval, c.Timeout)
	assert.Zero(t, c.Bound, "a negative bound disables, as 0 does")
	assert.Equal(t, DefaultMinRate, c.MinRate)
	assert.NotNil(t, c.Logger)
	assert.NotNil(t, c.Now)
	assert.Equal(t, time.Second, Config{Interval: 10 * time.Millisecond}.withDefaults().Timeout, "at least a second to answer")

	// Without a client the lag is the report latency alone.
	ctl := New(Config{Bound: DefaultBound})
	got := ctl.Step(context.Background())
	assert.ErrorContains(t, got.StatsErr, "no Temporal client")
	// Two controllers on one registry share the collectors.
	reg := prometheus.NewRegistry()
	a, b := New(Config{Registerer: reg}), New(Config{Registerer: reg})
	assert.Same(t, a.m.lag, b.m.lag)
}

// A reading cut short by the end of its context (the process stopping) changes nothing.
func TestControllerIgnoresAReadingCutByItsContext(t *testing.T) {
	r := newTestController(t, DefaultBound)
	r.svc.set(time.Second, 1, 0, 0)
	r.step()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.svc.fail(context.Canceled)
	r.clock.advance(DefaultInterval)

	got := r.c.Step(ctx)

	assert.Error(t, got.StatsErr)
	assert.Empty(t, r.c.Status().StatsError, "the last reading stands")
	assert.Equal(t, 1.0, r.c.Status().EngineLagSeconds)
	assert.Zero(t, value(r.c.m.errors))
}

// fakeClient is a client.Client as far as ServiceOf needs: its workflow service.
type fakeClient struct {
	svc workflowservice.WorkflowServiceClient
}

func (c fakeClient) WorkflowService() workflowservice.WorkflowServiceClient { return c.svc }

// fakeService is a workflow service whose DescribeTaskQueue is a fakeDescriber's.
type fakeService struct {
	workflowservice.WorkflowServiceClient
	*fakeDescriber
}

func (s fakeService) DescribeTaskQueue(ctx context.Context, in *workflowservice.DescribeTaskQueueRequest, opts ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error) {
	return s.fakeDescriber.DescribeTaskQueue(ctx, in, opts...)
}

func TestServiceOfReadsThroughTheClient(t *testing.T) {
	d := &fakeDescriber{}
	d.set(4*time.Second, 2, 0, 0)
	c := New(Config{Service: ServiceOf(fakeClient{fakeService{fakeDescriber: d}}), TaskQueue: "tq", Bound: DefaultBound})

	got := c.Step(context.Background())

	require.NoError(t, got.StatsErr)
	assert.Equal(t, 4*time.Second, got.BacklogAge)
	assert.Len(t, d.reqs, 2)
}

// The latencies kept for one reading are bounded; past the bound the latest overwrite the
// oldest, and every report still counts.
func TestReportLatencyKeepsABoundedSample(t *testing.T) {
	r := newTestController(t, DefaultBound)
	rep := &clockReporter{clock: r.clock, took: 10 * time.Millisecond}
	timed := r.c.TimeReports(rep)
	for range maxSamples {
		_ = timed.Report(context.Background(), message.FailureReport{})
	}
	rep.took = time.Second
	for range maxSamples / 5 {
		_ = timed.Report(context.Background(), message.FailureReport{})
	}

	got := r.step()

	assert.Equal(t, maxSamples+maxSamples/5, got.Reports)
	assert.Equal(t, time.Second, got.ReportLatency, "a fifth of the kept samples are the slow ones")
	r.c.lag.mu.Lock()
	defer r.c.lag.mu.Unlock()
	assert.Empty(t, r.c.lag.samples, "each reading starts a new window")
}

func TestGiveReturnsAnAdmission(t *testing.T) {
	r := newTestController(t, DefaultBound)
	r.svc.set(time.Minute, 1, 0, 0)
	r.step() // engaged at the floor, no token yet
	r.clock.advance(time.Second)
	ok, _ := r.c.Ready()
	require.True(t, ok)
	r.c.Take()
	ok, _ = r.c.Ready()
	require.False(t, ok)

	r.c.Give()

	ok, _ = r.c.Ready()
	assert.True(t, ok)
}

func TestTypeNameNamesEveryType(t *testing.T) {
	assert.Equal(t, "workflow", typeName(enumspb.TASK_QUEUE_TYPE_WORKFLOW))
	assert.Equal(t, "activity", typeName(enumspb.TASK_QUEUE_TYPE_ACTIVITY))
	assert.Equal(t, enumspb.TASK_QUEUE_TYPE_NEXUS.String(), typeName(enumspb.TASK_QUEUE_TYPE_NEXUS))
}
