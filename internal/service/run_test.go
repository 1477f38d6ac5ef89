package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	sdkworker "go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/metrics"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/worker"
)

// noBroker is a broker URL with no host: a bridge's dial and a declare fail on it at once,
// before any connection is tried, so these tests reach no RabbitMQ.
const noBroker = "amqp://"

// unitConfig is the configuration of a process of mode under test: its own task queue, an
// HTTP port of the system's choosing, and the periodic loops (breakers, depth) off unless a
// test turns them on.
func unitConfig(mode string) config.Config {
	cfg := config.Default()
	cfg.Mode = mode
	cfg.TaskQueue = "unit-tq"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Breakers = config.BreakersOff
	cfg.DepthPoller = config.Off
	cfg.IntakeLagInterval = time.Hour
	cfg.WorkerStopTimeout = time.Second
	return cfg
}

// connectedProcess is what Run has assembled by the time it calls run: a process of cfg on
// the Temporal client tc, with a publisher to noBroker.
func connectedProcess(t *testing.T, cfg config.Config, tc client.Client) *process {
	t.Helper()
	bcfg := broker.Config{URL: noBroker}
	pub := broker.NewPublisher(bcfg, discard)
	t.Cleanup(func() { _ = pub.Close() })
	return &process{cfg: cfg, logger: discard, fatal: worker.NewFatal(), live: map[string]ops.Check{},
		reg: metrics.NewRegistry(), tc: tc, bcfg: bcfg, pub: pub}
}

// runInBackground runs p until the returned cancel; the result comes on the channel.
func runInBackground(t *testing.T, p *process, auth *ops.Auth) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- p.run(ctx, auth) }()
	return cancel, done
}

// result is run's result, failing the test if it does not come.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return")
		return nil
	}
}

// A worker process starts its worker on the task queue, has it polled, counts it in
// liveness, and stops it (telling the frontend) when its context ends, without an error.
func TestRunWorkerModePollsTheTaskQueueAndStopsWithItsContext(t *testing.T) {
	front := startTemporalFake(t, nil)
	p := connectedProcess(t, unitConfig(config.ModeWorker), front.client(t))

	cancel, done := runInBackground(t, p, nil)
	front.waitPolled(t, "unit-tq")
	cancel()

	require.NoError(t, result(t, done))
	assert.Positive(t, front.called("ShutdownWorker"), "the worker was stopped")
	require.Contains(t, p.live, "worker")
	assert.NoError(t, p.live["worker"](context.Background()))
	assert.Contains(t, p.checks, "temporal")
	assert.NotContains(t, p.checks, "bridge", "no bridge in a worker process")
}

// A worker that cannot start ends the process at once with the reason.
func TestRunFailsWhenTheWorkerCannotStart(t *testing.T) {
	front := startTemporalFake(t, map[string]error{"DescribeNamespace": status.Error(codes.PermissionDenied, "not this namespace")})
	p := connectedProcess(t, unitConfig(config.ModeWorker), front.client(t))

	_, done := runInBackground(t, p, nil)

	err := result(t, done)
	require.ErrorContains(t, err, "start worker")
	assert.ErrorContains(t, err, "not this namespace")
	assert.NotContains(t, p.live, "worker")
}

// All in one process with breakers and the depth poller on: the worker polls, the breaker
// gate and the depth gauges read visibility, the bridge waits for its broker, and every part
// stops with the context.
func TestRunAllModeStartsEveryPart(t *testing.T) {
	front := startTemporalFake(t, nil)
	cfg := unitConfig(config.ModeAll)
	cfg.Breakers, cfg.DepthPoller = config.BreakersOn, config.On
	cfg.BreakerRefresh, cfg.BreakerFlush, cfg.MetricsInterval = time.Hour, time.Hour, time.Hour
	p := connectedProcess(t, cfg, front.client(t))

	cancel, done := runInBackground(t, p, ops.Disabled())
	front.waitPolled(t, "unit-tq")
	require.Eventually(t, func() bool {
		return front.called("ListWorkflowExecutions") > 0 && front.called("CountWorkflowExecutions") > 0
	}, 30*time.Second, 10*time.Millisecond, "the gate and the depth poller read visibility")
	cancel()

	require.NoError(t, result(t, done))
	assert.Contains(t, p.live, "worker")
	require.Contains(t, p.checks, "bridge")
	assert.EqualError(t, p.checks["bridge"](context.Background()), "not consuming", "no broker: the bridge is not ready")
	assert.NotNil(t, p.counter, "breakers on: the counts are kept")
}

// A bridge process without a broker runs, not ready, until its context ends.
func TestRunBridgeModeIsNotReadyWithoutItsBroker(t *testing.T) {
	p := connectedProcess(t, unitConfig(config.ModeBridge), mocks.NewClient(t))

	cancel, done := runInBackground(t, p, ops.Disabled())
	cancel()

	require.NoError(t, result(t, done))
	assert.Empty(t, p.live, "no worker in a bridge process")
	require.Contains(t, p.checks, "bridge")
	assert.EqualError(t, p.checks["bridge"](context.Background()), "not consuming")
}

// The ops API needs its authentication: without it the process does not serve.
func TestRunFailsWhenTheOpsAPICannotBeMounted(t *testing.T) {
	p := connectedProcess(t, unitConfig(config.ModeBridge), mocks.NewClient(t))

	cancel, done := runInBackground(t, p, nil)
	defer cancel()

	assert.ErrorContains(t, result(t, done), "no Auth")
}

// A part that cannot start stops the parts started before it: with the ops API unmountable
// (no Auth), the worker, the breaker counts and the bridge, already started, are stopped and
// waited for before run returns, not left running on a process that has failed.
func TestRunStopsTheStartedPartsWhenALaterOneCannotStart(t *testing.T) {
	front := startTemporalFake(t, nil)
	cfg := unitConfig(config.ModeAll)
	cfg.Breakers = config.BreakersOn
	cfg.BreakerRefresh, cfg.BreakerFlush = time.Hour, time.Hour
	p := connectedProcess(t, cfg, front.client(t))

	_, done := runInBackground(t, p, nil)

	require.ErrorContains(t, result(t, done), "no Auth")
	assert.ErrorIs(t, p.ctx.Err(), context.Canceled, "the started parts were told to stop")
	assert.Positive(t, front.called("ShutdownWorker"), "the worker was stopped")
}

// A port already taken ends the process with an error naming the address.
func TestRunFailsWhenItsHTTPAddressIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cfg := unitConfig(config.ModeBridge)
	cfg.HTTPAddr = taken.Addr().String()
	p := connectedProcess(t, cfg, mocks.NewClient(t))

	_, done := runInBackground(t, p, ops.Disabled())

	assert.ErrorContains(t, result(t, done), "serve http on "+cfg.HTTPAddr)
}

// Readiness of the Temporal connection is the frontend's health.
func TestTemporalReadinessIsTheFrontendsHealth(t *testing.T) {
	tc := mocks.NewClient(t)
	p := &process{tc: tc}
	tc.On("CheckHealth", mock.Anything, mock.Anything).Return(&client.CheckHealthResponse{}, nil).Once()
	assert.NoError(t, p.temporalReady(context.Background()))
	tc.On("CheckHealth", mock.Anything, mock.Anything).Return(nil, errors.New("frontend unavailable")).Once()
	assert.EqualError(t, p.temporalReady(context.Background()), "frontend unavailable")
}

// A fatal worker error ends the process's group with it, naming the task queue; without one
// the group ends quietly with the process.
func TestEndOnFatal(t *testing.T) {
	newP := func(ctx context.Context) *process {
		p := &process{cfg: config.Config{TaskQueue: "unit-tq"}, fatal: worker.NewFatal()}
		p.g, p.ctx = errgroup.WithContext(ctx)
		p.endOnFatal()
		return p
	}

	p := newP(context.Background())
	boom := errors.New("namespace not found")
	p.fatal.Report(boom)
	err := p.g.Wait()
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), `worker on task queue "unit-tq" stopped on a fatal error`)

	ctx, cancel := context.WithCancel(context.Background())
	p = newP(ctx)
	cancel()
	assert.NoError(t, p.g.Wait())
}

// Without a fatal error the server's shutdown does not wait; after one it waits until the
// linger has passed since the error.
func TestLingerAfterFatal(t *testing.T) {
	fatal := worker.NewFatal()
	returned := make(chan struct{})
	go func() { lingerAfterFatal(fatal, time.Hour); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("lingered without a fatal error")
	}

	fatal.Report(errors.New("boom"))
	lingerAfterFatal(fatal, 50*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(fatal.At()), 50*time.Millisecond)
}

// stubWorker is a worker whose Stop runs stop.
type stubWorker struct {
	sdkworker.Worker
	stop func()
}

func (w stubWorker) Stop() { w.stop() }

// A worker stopped without a fatal error is waited for, however long it takes.
func TestStopWorkerWaitsForANormalStop(t *testing.T) {
	stopped := false
	stopWorker(stubWorker{stop: func() { stopped = true }}, worker.NewFatal(), time.Nanosecond, discard)
	assert.True(t, stopped)
}

// After a fatal error the stop is waited for until the wait has passed since the error, then
// left to finish alone, and the log says so.
func TestStopWorkerAfterAFatalErrorWaitsBoundedly(t *testing.T) {
	fatal := worker.NewFatal()
	fatal.Report(errors.New("boom"))

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	stopWorker(stubWorker{stop: func() {}}, fatal, time.Hour, logger)
	assert.Empty(t, logs.String(), "a stop that ends in time is not logged")

	release := make(chan struct{})
	defer close(release)
	stopWorker(stubWorker{stop: func() { <-release }}, fatal, 50*time.Millisecond, logger)
	assert.GreaterOrEqual(t, time.Since(fatal.At()), 50*time.Millisecond)
	assert.Contains(t, logs.String(), "worker still stopping; not waiting longer")
}
