// Package service assembles the service's processes from their parts: the worker (many
// replicas), the bridge (many replicas) with the ops HTTP server beside it, or all three in
// one process, the local default.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/admission"
	"github.com/retry-scheduler/retry-scheduler/internal/breaker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/metrics"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/internal/tracing"
	"github.com/retry-scheduler/retry-scheduler/worker"
)

// After a fatal worker error (see worker.Fatal) the process is no longer alive: /healthz and
// /readyz answer 503 at once, the ops server keeps answering for fatalLinger, and the worker,
// the bridge and the server stop; stopping the worker is waited for at most fatalStopWait
// from the error.
const (
	fatalLinger   = 3 * time.Second
	fatalStopWait = 20 * time.Second
)

// The ops HTTP server's bounds: a client gets readHeaderTimeout to send its request headers
// and readTimeout for the whole request (API bodies are small JSON), so slow clients cannot
// hold connections open; an idle keep-alive connection is closed after idleTimeout. A
// response must be written within writeTimeout, above the longest bounded API call
// (ops.BoundedCallTimeout, a bulk action acting within the call; the long actions answer at
// once and run as jobs on the workers). A stopping server lets
// requests in flight finish for up to shutdownTimeout.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = ops.BoundedCallTimeout + 30*time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 5 * time.Second
)

// newHTTPServer is the ops HTTP server on addr with its bounds.
func newHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
	}
}

// Run runs the configured mode until ctx is done, then shuts down gracefully. A fatal worker
// error shuts it down too, and Run then returns that error. The deferred steps run in the
// reverse order of their set-up: the worker stops first, then the breaker counts are flushed,
// the publisher and the Temporal client close, and the spans are flushed last.
func Run(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	p := &process{cfg: cfg, logger: logger, fatal: worker.NewFatal(), live: map[string]ops.Check{}}
	var auth *ops.Auth
	if p.runsOps() {
		var err error
		if auth, err = opsAuth(cfg, logger.With("component", "ops")); err != nil {
			return err
		}
	}
	flushTracing, err := p.setupTracing(ctx)
	if err != nil {
		return err
	}
	defer flushTracing()
	p.reg = metrics.NewRegistry()
	// One ceiling of queue label values for every component registering on reg.
	labels.Queues(p.reg).SetMax(cfg.MetricsMaxQueues)
	handler, closer := metrics.TemporalHandler(p.reg, func(err error) { logger.Warn("register sdk metric", "error", err) })
	defer closer.Close()
	if err := p.dialTemporal(handler); err != nil {
		return err
	}
	defer p.tc.Close()
	if err := p.declareTopology(); err != nil {
		return err
	}
	p.pub = broker.NewPublisher(p.bcfg, logger.With("component", "publisher"))
	defer p.pub.Close()
	return p.run(ctx, auth)
}

// run starts the parts of the process's mode on its connections (the Temporal client, the
// publisher) and waits for them: until ctx is done or one of them fails. Its deferred steps
// run before Run's: the worker stops, then the breaker counts are flushed.
func (p *process) run(ctx context.Context, auth *ops.Auth) error {
	p.checks = map[string]ops.Check{"temporal": p.temporalReady}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.g, p.ctx = errgroup.WithContext(ctx)
	if p.cfg.BreakersEnabled() {
		p.startBreakerCounter()
		// Deferred before the worker's stop, so it runs after it: what the worker republished
		// while stopping, after the loop's last flush, is reported too.
		defer p.counter.Flush(context.Background())
	}
	if p.runsWorker() {
		w, err := p.startWorker()
		if err != nil {
			return p.stopStarted(cancel, err)
		}
		defer stopWorker(w, p.fatal, fatalStopWait, p.logger)
	}
	if p.runsBridge() {
		p.startBridge()
	}
	if p.cfg.RunsDepthPoller() {
		p.startDepthPoller()
	}
	if err := p.serveHTTP(auth); err != nil {
		return p.stopStarted(cancel, err)
	}
	return p.g.Wait()
}

// stopStarted stops the parts started before one that could not start, and waits for them,
// so that none outlives run (a bridge would go on consuming after the process had failed);
// err is run's result.
func (p *process) stopStarted(cancel context.CancelFunc, err error) error {
	cancel()
	_ = p.g.Wait()
	return err
}

// temporalReady is the readiness check of the Temporal connection: the frontend's health.
func (p *process) temporalReady(ctx context.Context) error {
	_, err := p.tc.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}

// process is one service process being assembled by Run: what its parts share.
type process struct {
	cfg    config.Config
	logger *slog.Logger
	reg    *prometheus.Registry
	// interceptors are the Temporal client's own: tracing's, when on.
	interceptors []interceptor.ClientInterceptor
	topts        client.Options
	tc           client.Client
	bcfg         broker.Config
	// catalog is the policy catalogue, read once by policyCatalog: the bridge and the ops API
	// route by it.
	catalog *policy.Catalog
	pub     *broker.Publisher
	// g runs the process's loops; ctx ends when one of them fails or Run's context is done.
	g   *errgroup.Group
	ctx context.Context
	// counter counts for the destinations' circuit breakers; nil when breakers are off.
	counter *breaker.Counter
	// intake is the bridge's admission control, where a bridge runs; served at GET /intake.
	intake *admission.Controller
	fatal  *worker.Fatal
	// live checks fail only where a restart is the cure; checks are the readiness checks.
	live, checks map[string]ops.Check
}

func (p *process) runsOps() bool {
	return p.cfg.Mode == config.ModeAll || p.cfg.Mode == config.ModeBridge
}

func (p *process) runsWorker() bool {
	return p.cfg.Mode == config.ModeAll || p.cfg.Mode == config.ModeWorker
}

func (p *process) runsBridge() bool {
	return p.cfg.Mode == config.ModeAll || p.cfg.Mode == config.ModeBridge
}

// setupTracing starts tracing, off unless the standard OTEL_* variables ask for it, and
// returns its flush, which Run defers first so that it runs last: the spans of the worker's
// and the bridge's last work are flushed too.
func (p *process) setupTracing(ctx context.Context) (func(), error) {
	tp, stop, err := tracing.Setup(ctx, os.LookupEnv, tracing.Options{
		ServiceName: p.cfg.ServiceName, ServiceVersion: p.cfg.ServiceVersion, Logger: p.logger.With("component", "tracing"),
	})
	if err != nil {
		return nil, err
	}
	// With tracing on, starts and signals carry the span context in Temporal headers, and the
	// workers built from this client make workflow and activity spans.
	ti, err := tracing.TemporalInterceptor(tp)
	if err != nil {
		return nil, err
	}
	if ti != nil {
		p.interceptors = append(p.interceptors, ti)
	}
	return func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := stop(flushCtx); err != nil {
			p.logger.Warn("tracing not flushed", "component", "tracing", "error", err)
		}
	}, nil
}

// dialTemporal connects the process's Temporal client: address, namespace, TLS/mTLS, API key
// and payload codec (security.go), the SDK's metrics and the tracing interceptor.
func (p *process) dialTemporal(handler client.MetricsHandler) error {
	topts, err := TemporalOptions(p.cfg)
	if err != nil {
		return err
	}
	topts.Logger = log.NewStructuredLogger(p.logger.With("component", "temporal"))
	topts.MetricsHandler = handler
	topts.Interceptors = append(topts.Interceptors, p.interceptors...)
	p.topts = topts
	if p.tc, err = client.Dial(topts); err != nil {
		return fmt.Errorf("connect to temporal at %s: %w", p.cfg.TemporalAddress, err)
	}
	return nil
}

// declareTopology declares the queues the process uses. The bridge routes messages by the
// policy catalogue, so its process declares every dead-letter queue the catalogue names; a
// worker-only process declares the main one.
func (p *process) declareTopology() error {
	rabbitTLS, err := p.cfg.RabbitMQTLS()
	if err != nil {
		return err
	}
	p.bcfg = broker.Config{
		URL:            p.cfg.BrokerURLs(),
		TLS:            rabbitTLS,
		ConnectionName: p.cfg.ServiceName + "-" + p.cfg.Mode,
		PublishTimeout: p.cfg.PublishTimeout,
		QueueType:      p.cfg.QueueType,
	}
	var catalog *policy.Catalog
	if p.runsBridge() {
		if catalog, err = p.policyCatalog(); err != nil {
			return err
		}
	}
	queues := broker.Topology(p.bcfg, p.cfg.RetryQueue, p.cfg.ManualReviewQueue, declaredDeadLetterQueues(p.cfg, catalog)...)
	if err := broker.Declare(p.bcfg, p.logger.With("component", "declare"), queues...); err != nil {
		return fmt.Errorf("declare topology: %w", err)
	}
	return nil
}

// startBreakerCounter starts the counts the process flushes to the destinations' breakers:
// republishes on a worker, failed retries on a bridge (BREAKERS=on).
func (p *process) startBreakerCounter() {
	p.counter = breaker.NewCounter(breaker.CounterConfig{Client: p.tc, TaskQueue: p.cfg.TaskQueue, Interval: p.cfg.BreakerFlush,
		Logger: p.logger.With("component", "breaker")})
	p.g.Go(func() error { return p.counter.Run(p.ctx) })
}

// startWorker starts the Temporal worker with its activities and the operators' jobs; its
// fatal error ends the process.
func (p *process) startWorker() (sdkworker.Worker, error) {
	cfg, logger := p.cfg, p.logger
	acts := &activities.Activities{Publisher: p.pub, History: history{client: p.tc, namespace: cfg.Namespace},
		Logger: logger.With("component", "activities"), Metrics: activities.NewMetrics(p.reg),
		DeadLetterTTL: cfg.Retention, DeadLetterMaxBytes: cfg.DeadLetterMaxBytes, ServiceName: cfg.ServiceName,
		ExpiredArchiveQueue: cfg.ExpiredArchiveQueue}
	if p.counter != nil {
		acts.Gate, acts.Counter, acts.Held = startGate(p.ctx, p.g, cfg, p.tc, logger), p.counter, breaker.HeldLister{Client: p.tc, TaskQueue: cfg.TaskQueue}
	}
	// The operators' jobs act on items with the ops API's own code, from the worker.
	items, err := ops.NewJobItems(ops.APIConfig{Client: p.tc, DataConverter: p.topts.DataConverter, Namespace: cfg.Namespace, TaskQueue: cfg.TaskQueue})
	if err != nil {
		return nil, err
	}
	w := worker.New(p.tc, worker.Options{TaskQueue: cfg.TaskQueue, StopTimeout: cfg.WorkerStopTimeout, WorkflowPollers: cfg.WorkflowPollers,
		StickyTimeout: cfg.StickyTimeout,
		Jobs:          &jobs.Activities{Items: items},
		OnFatalError: func(err error) {
			p.fatal.Report(err)
			logger.Error("worker stopped on a fatal error; shutting down", "component", "worker", "task_queue", cfg.TaskQueue, "error", err)
		}}, acts)
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	logger.Info("worker started", "task_queue", cfg.TaskQueue)
	p.live["worker"] = p.fatal.Check
	p.endOnFatal()
	return w, nil
}

// endOnFatal ends the process with the worker's fatal error, when one comes before the
// process ends otherwise.
func (p *process) endOnFatal() {
	p.g.Go(func() error {
		select {
		case <-p.ctx.Done():
			return nil
		case <-p.fatal.Done():
			return fmt.Errorf("worker on task queue %q stopped on a fatal error: %w", p.cfg.TaskQueue, p.fatal.Err())
		}
	})
}

// startBridge starts the bridge on the ingress queue, reporting through Temporal, with its
// admission control; its readiness is whether it consumes.
func (p *process) startBridge() {
	cfg := p.cfg
	var failures bridge.BreakerCounter // nil, not a nil *breaker.Counter, when breakers are off
	if p.counter != nil {
		failures = p.counter
	}
	rep := &reporter.Reporter{Client: p.tc, TaskQueue: cfg.TaskQueue, Retention: cfg.Retention, Eager: p.runsWorker(), StartDelayMax: cfg.StartDelayMax, DeferMax: cfg.BridgeDeferMax}
	// Every bridge reads the lag of the one task queue, so the bridges of a deployment slow
	// down together, whether beside a worker (all) or alone.
	p.intake = admission.New(admission.Config{
		Service: admission.ServiceOf(p.tc), Namespace: cfg.Namespace, TaskQueue: cfg.TaskQueue,
		Interval: cfg.IntakeLagInterval, Bound: cfg.IntakeLagBound, MinRate: cfg.IntakeMinRate,
		Logger: p.logger.With("component", "admission"), Registerer: p.reg,
	})
	p.g.Go(func() error { return p.intake.Run(p.ctx) })
	b := bridge.New(bridge.Config{
		Queue:              cfg.RetryQueue,
		DeadLetterQueue:    cfg.ManualReviewQueue,
		Prefetch:           cfg.Prefetch,
		MemoryBudget:       int64(cfg.BridgeMemoryBudget),
		DeadLetterMaxBytes: cfg.DeadLetterMaxBytes,
		Workers:            cfg.BridgeWorkers,
		Probe:              reporter.Probe(p.tc),
		IngressArgs:        broker.IngressArgs(p.bcfg, cfg.ManualReviewQueue),
		DeadLetterArgs:     broker.QueueArgs(p.bcfg),
		ServiceName:        cfg.ServiceName,
		ServiceVersion:     cfg.ServiceVersion,
		Breakers:           failures,
		Defer:              rep.DeferFor,
		Intake:             p.intake,
		Decode: bridge.DecodeOptions{
			MaxMessageBytes:        cfg.MaxMessageBytes,
			Resolver:               p.catalog,
			DefaultDeadLetterQueue: cfg.ManualReviewQueue,
			// The guard the ops API's edits pass too: every queue of the scheduler's own.
			Guard: p.catalog.Guard(cfg.RetryQueue, cfg.ManualReviewQueue, ownQueues(cfg)...),
		},
	}, func() (*amqp.Connection, error) { return broker.Dial(p.bcfg) }, p.intake.TimeReports(rep), p.pub,
		p.logger.With("component", "bridge"), bridge.NewMetrics(p.reg))
	p.checks["bridge"] = func(context.Context) error {
		if !b.Ready() {
			return errors.New("not consuming")
		}
		return nil
	}
	p.g.Go(func() error { return b.Run(p.ctx) })
}

// startDepthPoller starts the depth gauges, which come from visibility counts: one poller per
// deployment (DEPTH_POLLER).
func (p *process) startDepthPoller() {
	depth := metrics.NewDepthPoller(metrics.DepthConfig{
		Client: p.tc, TaskQueue: p.cfg.TaskQueue, Interval: p.cfg.MetricsInterval,
		Logger: p.logger.With("component", "depth"),
	}, p.reg)
	p.g.Go(func() error { return depth.Run(p.ctx) })
}

// serveHTTP serves httpHandler on HTTP_ADDR; it shuts the server down when the process ends.
func (p *process) serveHTTP(auth *ops.Auth) error {
	mux, err := p.httpHandler(auth)
	if err != nil {
		return err
	}
	srv := newHTTPServer(p.cfg.HTTPAddr, mux)
	p.g.Go(func() error {
		p.logger.Info("http listening", "addr", srv.Addr, "mode", p.cfg.Mode, "service", p.cfg.ServiceName, "service_version", p.cfg.ServiceVersion)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http on %s: %w", srv.Addr, err)
		}
		return nil
	})
	p.g.Go(func() error {
		<-p.ctx.Done()
		lingerAfterFatal(p.fatal, fatalLinger)
		return shutdownHTTP(srv, shutdownTimeout, p.logger)
	})
	return nil
}

// httpHandler is the ops HTTP server's handler: health, readiness and metrics, the ops API and
// page where the process runs them, and the payload codec endpoint when PAYLOAD_KEYS and
// CODEC_TOKEN are set.
func (p *process) httpHandler(auth *ops.Auth) (*http.ServeMux, error) {
	mux := ops.Handler(p.reg, p.live, p.checks)
	if p.intake != nil {
		// Beside /readyz, not in it: its body is each check's "ok" or error, read as such.
		mux.Handle("GET /intake", p.intake)
	}
	if p.runsOps() {
		catalog, err := p.policyCatalog()
		if err != nil {
			return nil, err
		}
		// Where a bridge runs, its admission control tells the API when Temporal lags.
		var lagging func() bool
		if p.intake != nil {
			lagging = p.intake.Limited
		}
		if err := mountOpsAPI(mux, p.cfg, catalog, p.tc, p.topts.DataConverter, auth, lagging, p.logger.With("component", "ops")); err != nil {
			return nil, err
		}
	}
	if h, err := codecHandler(p.cfg); err != nil {
		return nil, err
	} else if h != nil {
		mux.Handle(CodecPath, h)
	}
	return mux, nil
}

// lingerAfterFatal returns once linger has passed since the fatal error, if one was reported,
// so that probes see the 503 before the port closes; at once otherwise.
func lingerAfterFatal(fatal *worker.Fatal, linger time.Duration) {
	if at := fatal.At(); !at.IsZero() {
		t := time.NewTimer(time.Until(at.Add(linger)))
		<-t.C
	}
}

// shutdownHTTP stops srv, letting requests in flight finish for up to wait. A
// request still running then (a query waiting on a loaded Temporal) is cut: the process
// stops as asked, which is not its failure, so this is logged and not returned.
func shutdownHTTP(srv *http.Server, wait time.Duration, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("http requests still in flight at shutdown were cut", "component", "http", "waited", wait)
		return srv.Close()
	}
	return err
}

// startGate starts the worker's breaker gate in g after a first refresh, so that a worker
// starting while a destination's breaker holds holds its retries from the first one. A failed
// first refresh is logged: the gate's loop tries again at once.
func startGate(ctx context.Context, g *errgroup.Group, cfg config.Config, tc client.Client, logger *slog.Logger) *breaker.Gate {
	log := logger.With("component", "breaker-gate")
	gate := breaker.NewGate(breaker.GateConfig{Client: tc, TaskQueue: cfg.TaskQueue, Interval: cfg.BreakerRefresh, Logger: log})
	if err := gate.Refresh(ctx); err != nil {
		log.Warn("first breaker gate refresh failed; holding nothing until one succeeds", "error", err)
	}
	g.Go(func() error { return gate.Run(ctx) })
	return gate
}

// stopWorker stops w, waiting up to its stop timeout for in-flight publishes. After a fatal
// error the SDK is stopping it already: it waits for that until wait (fatalStopWait) after the
// error, then leaves it to finish alone, so that the process can exit.
func stopWorker(w sdkworker.Worker, fatal *worker.Fatal, wait time.Duration, logger *slog.Logger) {
	at := fatal.At()
	if at.IsZero() {
		w.Stop()
		return
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	t := time.NewTimer(time.Until(at.Add(wait)))
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		logger.Warn("worker still stopping; not waiting longer", "component", "worker", "waited_ms", wait.Milliseconds())
	}
}

// policyCatalog is the process's policy catalogue, read once: the bridge and the ops API
// route with the same one, even if the policy file changes while the process starts.
func (p *process) policyCatalog() (*policy.Catalog, error) {
	if p.catalog == nil {
		c, err := loadCatalog(p.cfg)
		if err != nil {
			return nil, err
		}
		p.catalog = c
	}
	return p.catalog, nil
}

// loadCatalog is the built-in catalogue and the policy file. DEFAULT_MAX_RETRIES,
// BASE_DELAY_MS and MAX_DELAY_MS shape the built-in "default" policy, used where no route
// matches; a policy file that defines its own "default" keeps it.
func loadCatalog(cfg config.Config) (*policy.Catalog, error) {
	c := policy.NewCatalog()
	if cfg.PolicyFile != "" {
		var err error
		if c, err = policy.LoadFile(cfg.PolicyFile); err != nil {
			return nil, fmt.Errorf("policy file %s: %w", cfg.PolicyFile, err)
		}
	}
	if reflect.DeepEqual(c.Policies[policy.DefaultName], policy.Builtins()[policy.DefaultName]) {
		c.Set(policy.Default(cfg.DefaultMaxRetries, cfg.BaseDelay, cfg.MaxDelay))
	}
	return c, c.Validate()
}

// declaredDeadLetterQueues are the queues declared at start besides the ingress and the
// default dead-letter queue: the catalogue's dead-letter queues and the archive of expired
// envelopes, which takes the same messages, so the same arguments.
func declaredDeadLetterQueues(cfg config.Config, c *policy.Catalog) []string {
	qs := deadLetterQueues(c)
	if q := cfg.ExpiredArchiveQueue; q != "" && q != cfg.ManualReviewQueue && !slices.Contains(qs, q) {
		qs = append(qs, q)
	}
	return qs
}

// deadLetterQueues are the dead-letter queues c names, its policies' and its routes', sorted;
// none for a nil catalogue.
func deadLetterQueues(c *policy.Catalog) []string {
	if c == nil {
		return nil
	}
	set := map[string]bool{}
	for _, p := range c.Policies {
		if p.DeadLetterQueue != "" {
			set[p.DeadLetterQueue] = true
		}
	}
	for _, r := range c.Routes {
		if r.DeadLetterQueue != "" {
			set[r.DeadLetterQueue] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
