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

	amqp "github.com/rabbitmq/amqp091-go"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/breaker"
	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/broker"
	"github.com/retry-scheduler/retry-scheduler/config"
	"github.com/retry-scheduler/retry-scheduler/jobs"
	"github.com/retry-scheduler/retry-scheduler/metrics"
	"github.com/retry-scheduler/retry-scheduler/metrics/labels"
	"github.com/retry-scheduler/retry-scheduler/ops"
	"github.com/retry-scheduler/retry-scheduler/policy"
	"github.com/retry-scheduler/retry-scheduler/reporter"
	"github.com/retry-scheduler/retry-scheduler/tracing"
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
// error shuts it down too, and Run then returns that error.
func Run(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	runOps := cfg.Mode == config.ModeAll || cfg.Mode == config.ModeBridge
	runWorker := cfg.Mode == config.ModeAll || cfg.Mode == config.ModeWorker
	runBridge := cfg.Mode == config.ModeAll || cfg.Mode == config.ModeBridge
	var auth *ops.Auth
	if runOps {
		var err error
		if auth, err = opsAuth(cfg, logger.With("component", "ops")); err != nil {
			return err
		}
	}
	// Tracing: off unless the standard OTEL_* variables ask for it. Deferred first, so it runs
	// last: the spans of the worker's and the bridge's last work are flushed too.
	tp, stopTracing, err := tracing.Setup(ctx, os.LookupEnv, tracing.Options{
		ServiceName: cfg.ServiceName, ServiceVersion: cfg.ServiceVersion, Logger: logger.With("component", "tracing"),
	})
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			logger.Warn("tracing not flushed", "component", "tracing", "error", err)
		}
	}()
	reg := metrics.NewRegistry()
	// One ceiling of queue label values for every component registering on reg.
	labels.Queues(reg).SetMax(cfg.MetricsMaxQueues)
	handler, closer := metrics.TemporalHandler(reg, func(err error) { logger.Warn("register sdk metric", "error", err) })
	defer closer.Close()

	// Address, namespace, TLS/mTLS, API key and payload codec: security.go.
	topts, err := TemporalOptions(cfg)
	if err != nil {
		return err
	}
	topts.Logger = log.NewStructuredLogger(logger.With("component", "temporal"))
	topts.MetricsHandler = handler
	// With tracing on, starts and signals carry the span context in Temporal headers, and the
	// workers built from this client make workflow and activity spans.
	if ti, err := tracing.TemporalInterceptor(tp); err != nil {
		return err
	} else if ti != nil {
		topts.Interceptors = append(topts.Interceptors, ti)
	}
	tc, err := client.Dial(topts)
	if err != nil {
		return fmt.Errorf("connect to temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer tc.Close()

	rabbitTLS, err := cfg.RabbitMQTLS()
	if err != nil {
		return err
	}
	bcfg := broker.Config{
		URL:            cfg.BrokerURLs(),
		TLS:            rabbitTLS,
		ConnectionName: cfg.ServiceName + "-" + cfg.Mode,
		PublishTimeout: cfg.PublishTimeout,
		QueueType:      cfg.QueueType,
	}
	// The bridge routes messages by the policy catalogue, so its process declares every
	// dead-letter queue the catalogue names; a worker-only process declares the main one.
	var catalog *policy.Catalog
	if runBridge {
		if catalog, err = loadCatalog(cfg); err != nil {
			return err
		}
	}
	if err := broker.Declare(bcfg, logger.With("component", "declare"), broker.Topology(bcfg, cfg.RetryQueue, cfg.ManualReviewQueue, declaredDeadLetterQueues(cfg, catalog)...)...); err != nil {
		return fmt.Errorf("declare topology: %w", err)
	}
	pub := broker.NewPublisher(bcfg, logger.With("component", "publisher"))
	defer pub.Close()

	// live checks fail only where a restart is the cure; checks are the readiness checks.
	live := map[string]ops.Check{}
	checks := map[string]ops.Check{
		"temporal": func(ctx context.Context) error {
			_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		},
	}
	g, ctx := errgroup.WithContext(ctx)

	// Circuit breakers (BREAKERS=on): the process counts what it sees for the destinations'
	// breakers, republishes on a worker and failed retries on a bridge.
	var counter *breaker.Counter
	if cfg.BreakersEnabled() {
		counter = breaker.NewCounter(breaker.CounterConfig{Client: tc, TaskQueue: cfg.TaskQueue, Interval: cfg.BreakerFlush,
			Logger: logger.With("component", "breaker")})
		g.Go(func() error { return counter.Run(ctx) })
		// Deferred before the worker's stop, so it runs after it: what the worker republished
		// while stopping, after the loop's last flush, is reported too.
		defer counter.Flush(context.Background())
	}

	fatal := worker.NewFatal()
	if runWorker {
		acts := &activities.Activities{Publisher: pub, History: history{client: tc, namespace: cfg.Namespace},
			Logger: logger.With("component", "activities"), Metrics: activities.NewMetrics(reg),
			DeadLetterTTL: cfg.Retention, DeadLetterMaxBytes: cfg.DeadLetterMaxBytes, ServiceName: cfg.ServiceName,
			ExpiredArchiveQueue: cfg.ExpiredArchiveQueue}
		if counter != nil {
			acts.Gate, acts.Counter, acts.Held = startGate(ctx, g, cfg, tc, logger), counter, breaker.HeldLister{Client: tc, TaskQueue: cfg.TaskQueue}
		}
		// The operators' jobs act on items with the ops API's own code, from the worker.
		items, err := ops.NewJobItems(ops.APIConfig{Client: tc, DataConverter: topts.DataConverter, Namespace: cfg.Namespace, TaskQueue: cfg.TaskQueue})
		if err != nil {
			return err
		}
		w := worker.New(tc, worker.Options{TaskQueue: cfg.TaskQueue, StopTimeout: cfg.WorkerStopTimeout, WorkflowPollers: cfg.WorkflowPollers,
			Jobs: &jobs.Activities{Items: items},
			OnFatalError: func(err error) {
				fatal.Report(err)
				logger.Error("worker stopped on a fatal error; shutting down", "component", "worker", "task_queue", cfg.TaskQueue, "error", err)
			}}, acts)
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		defer stopWorker(w, fatal, logger)
		logger.Info("worker started", "task_queue", cfg.TaskQueue)
		live["worker"] = fatal.Check
		g.Go(func() error {
			select {
			case <-ctx.Done():
				return nil
			case <-fatal.Done():
				return fmt.Errorf("worker on task queue %q stopped on a fatal error: %w", cfg.TaskQueue, fatal.Err())
			}
		})
	}
	if runBridge {
		var failures bridge.BreakerCounter // nil, not a nil *breaker.Counter, when breakers are off
		if counter != nil {
			failures = counter
		}
		rep := &reporter.Reporter{Client: tc, TaskQueue: cfg.TaskQueue, Retention: cfg.Retention, Eager: runWorker, StartDelayMax: cfg.StartDelayMax, DeferMax: cfg.BridgeDeferMax}
		b := bridge.New(bridge.Config{
			Queue:              cfg.RetryQueue,
			DeadLetterQueue:    cfg.ManualReviewQueue,
			Prefetch:           cfg.Prefetch,
			MemoryBudget:       int64(cfg.BridgeMemoryBudget),
			DeadLetterMaxBytes: cfg.DeadLetterMaxBytes,
			Workers:            cfg.BridgeWorkers,
			Probe:              reporter.Probe(tc),
			IngressArgs:        broker.IngressArgs(bcfg, cfg.ManualReviewQueue),
			DeadLetterArgs:     broker.QueueArgs(bcfg),
			ServiceName:        cfg.ServiceName,
			ServiceVersion:     cfg.ServiceVersion,
			Breakers:           failures,
			Defer:              rep.DeferFor,
			Decode: bridge.DecodeOptions{
				MaxMessageBytes:        cfg.MaxMessageBytes,
				Resolver:               catalog,
				DefaultDeadLetterQueue: cfg.ManualReviewQueue,
			},
		}, func() (*amqp.Connection, error) { return broker.Dial(bcfg) }, rep, pub,
			logger.With("component", "bridge"), bridge.NewMetrics(reg))
		checks["bridge"] = func(context.Context) error {
			if !b.Ready() {
				return errors.New("not consuming")
			}
			return nil
		}
		g.Go(func() error { return b.Run(ctx) })
	}
	if cfg.RunsDepthPoller() {
		// The depth gauges come from visibility counts: one poller per deployment.
		depth := metrics.NewDepthPoller(metrics.DepthConfig{
			Client: tc, TaskQueue: cfg.TaskQueue, Interval: cfg.MetricsInterval,
			Logger: logger.With("component", "depth"),
		}, reg)
		g.Go(func() error { return depth.Run(ctx) })
	}

	mux := ops.Handler(reg, live, checks)
	if runOps {
		if err := mountOpsAPI(mux, cfg, tc, topts.DataConverter, auth, logger.With("component", "ops")); err != nil {
			return err
		}
	}
	// The payload codec endpoint for the Web UI and CLI, when PAYLOAD_KEYS and CODEC_TOKEN are set.
	if h, err := codecHandler(cfg); err != nil {
		return err
	} else if h != nil {
		mux.Handle(CodecPath, h)
	}
	srv := newHTTPServer(cfg.HTTPAddr, mux)
	g.Go(func() error {
		logger.Info("http listening", "addr", srv.Addr, "mode", cfg.Mode, "service", cfg.ServiceName, "service_version", cfg.ServiceVersion)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http on %s: %w", srv.Addr, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		if at := fatal.At(); !at.IsZero() {
			// Probes see the 503 before the port closes.
			t := time.NewTimer(time.Until(at.Add(fatalLinger)))
			<-t.C
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	})
	return g.Wait()
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
// error the SDK is stopping it already: it waits for that until fatalStopWait after the error,
// then leaves it to finish alone, so that the process can exit.
func stopWorker(w sdkworker.Worker, fatal *worker.Fatal, logger *slog.Logger) {
	at := fatal.At()
	if at.IsZero() {
		w.Stop()
		return
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	t := time.NewTimer(time.Until(at.Add(fatalStopWait)))
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		logger.Warn("worker still stopping; not waiting longer", "component", "worker", "waited_ms", fatalStopWait.Milliseconds())
	}
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
