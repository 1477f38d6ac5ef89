// Command bench measures retry-scheduler on this machine (`make bench`): the bare engine's
// ceiling, then the whole pipeline (RabbitMQ → bridge → RetryWorkflow → republish → RabbitMQ)
// at rising rates, sustained, in a burst, with consumers that fail again (mixed), and at twice
// its knee with an operator at the ops API (overload), with the Temporal server's work per
// retry, on the dev server or (-engine postgres) the Temporal server on PostgreSQL. It prints
// a table and writes JSON under cmd/bench/results. See cmd/bench/README.md for the method and
// how to read the numbers.
//
//	go run ./cmd/bench                                        # every phase, default lengths (~30-50 min)
//	go run ./cmd/bench -phases ceiling,sustained,burst -duration 15s -burst-duration 5s
//	go run ./cmd/bench -engine postgres -phases mixed -duration 20s
//	go run ./cmd/bench -phases overload -overload-rate 60    # twice a knee of 30/s, 120 s
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	sdklog "go.temporal.io/sdk/log"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == serveArg {
		os.Exit(serve(os.Args[2:]))
	}
	c, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	os.Exit(run(ctx, c, os.Stdout, os.Stderr))
}

// environment is what the phases share: a name prefix unique to this run (queues, task
// queues, workflow IDs), a temporary directory, and the progress log.
type environment struct {
	c      options
	prefix string
	// dir holds the policy files and the service logs; kept when a step lost messages.
	dir     string
	keepDir bool
	log     *slog.Logger
	quiet   *slog.Logger
	// knee is the run's knee so far (kneeOf): the ladder's, once it has run.
	knee knee
}

func run(ctx context.Context, c options, stdout, stderr io.Writer) int {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	dir, err := os.MkdirTemp("", "retry-scheduler-bench-")
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	env := &environment{
		c:      c,
		prefix: "bench-" + hex.EncodeToString(b),
		dir:    dir,
		log:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		quiet:  slog.New(slog.DiscardHandler),
	}
	defer func() {
		if env.keepDir || os.Getenv("BENCH_KEEP") != "" {
			env.log.Warn("service and dev server logs kept for a look (messages lost, or BENCH_KEEP set)", "dir", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	rep := newReport(c)
	env.log.Info("bench starting", "phases", c.Phases, "prefix", env.prefix, "load_avg", rep.Machine.LoadAvgStart)

	failed := false
	for _, phase := range c.Phases {
		if ctx.Err() != nil {
			break
		}
		env.knee = kneeOf(rep.Steps, c.OverloadRate)
		var steps []step
		var err error
		switch phase {
		case phaseCeiling:
			steps, err = runCeiling(ctx, c, env)
		default:
			var loads []load
			if loads, err = phaseLoads(c, phase, env.knee); err == nil {
				if phase == phaseMixed && len(loads) == 1 && c.MixedKneeDuration > 0 {
					env.log.Warn("mixed: no knee in this run (no passing ladder step, no -overload-rate): it runs at -rate only")
				}
				steps, err = runPipeline(ctx, c, env, phase, loads)
			}
		}
		rep.Steps = append(rep.Steps, steps...)
		if err != nil {
			env.log.Error("phase failed", "phase", phase, "error", err)
			failed = true
		}
		if phase != phaseCeiling && len(c.ABEnv) > 0 && ctx.Err() == nil {
			steps, err := runVariantB(ctx, c, env, phase)
			rep.Steps = append(rep.Steps, steps...)
			if err != nil {
				env.log.Error("phase failed", "phase", phase+"/B", "error", err)
				failed = true
			}
		}
	}
	rep.finish(ctx.Err() != nil)
	rep.printTable(stdout)
	if ctx.Err() != nil {
		env.log.Warn("interrupted: no JSON written")
		return 130
	}
	if c.ResultsDir != "" && len(rep.Steps) > 0 {
		path, err := rep.write(c.ResultsDir)
		if err != nil {
			env.log.Error("write results", "error", err)
			return 1
		}
		fmt.Fprintln(stdout, "results:", path)
	}
	if failed {
		return 1
	}
	return 0
}

// phaseLoads are the loads a pipeline phase offers, k the run's knee so far (the mixed
// phase's further loads and the overload's rate).
func phaseLoads(c options, phase string, k knee) ([]load, error) {
	switch phase {
	case phaseLadder:
		loads := make([]load, len(c.Steps))
		for i, r := range c.Steps {
			loads[i] = load{rate: r, duration: c.StepDuration}
		}
		return loads, nil
	case phaseSustained, phaseSplit:
		return []load{{rate: c.Rate, duration: c.Duration}}, nil
	case phaseMixed:
		return mixedLoads(c, k), nil
	case phaseBurst:
		return []load{{rate: c.BurstRate, duration: c.BurstDuration}}, nil
	case phaseOverload:
		l, err := overloadLoad(c, k)
		if err != nil {
			return nil, err
		}
		return []load{l}, nil
	}
	return nil, nil
}

// runVariantB runs a pipeline phase again with c.ABEnv added to the service's settings; its
// steps are named <phase>/B.
func runVariantB(ctx context.Context, c options, env *environment, phase string) ([]step, error) {
	b := c
	b.ServiceEnv = append(slices.Clone(c.ServiceEnv), c.ABEnv...)
	env.log.Info("phase B", "phase", phase, "extra_service_env", c.ABEnv)
	loads, err := phaseLoads(c, phase, env.knee)
	if err != nil {
		return nil, err
	}
	steps, err := runPipeline(ctx, b, env, phase, loads)
	for i := range steps {
		steps[i].Phase += "/B"
	}
	return steps, err
}

// server is a phase's Temporal server and where its Prometheus metrics are served.
type server struct {
	*devserver.Server
	metricsURL string
}

// startServer starts a server of the phase's own, headless: on the dev engine a fresh SQLite
// file in a temporary directory with the flags of `make run`; on the postgres engine a fresh
// pair of temporary databases. Both get the configured dynamic config and serve their
// metrics on a free port.
func (e *environment) startServer(ctx context.Context) (*server, error) {
	if e.c.TemporalAddress != "" {
		// A cluster of the operator's: nothing to start or stop, no process to measure.
		e.log.Info("Temporal cluster", "address", e.c.TemporalAddress, "namespace", e.c.Namespace, "metrics", e.c.ServerMetrics)
		return &server{Server: &devserver.Server{Address: e.c.TemporalAddress, Namespace: e.c.Namespace}, metricsURL: e.c.ServerMetrics}, nil
	}
	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(port)
	var extra []string
	for _, kv := range e.c.DynamicConfig {
		extra = append(extra, "--dynamic-config-value", kv)
	}
	o := devserver.Options{Engine: e.c.Engine, Binary: e.c.TemporalCLI, UIPort: -1}
	if e.c.Engine == devserver.EnginePostgres {
		if o.Postgres, err = devserver.PostgresFromEnv(os.Getenv); err != nil {
			return nil, err
		}
		o.Postgres.MetricsAddress = metricsAddr
		o.Postgres.HistoryShards = e.c.HistoryShards
	} else {
		for _, kv := range e.c.SQLitePragmas {
			extra = append(extra, "--sqlite-pragma", kv)
		}
		extra = append(extra, "--metrics-port", strconv.Itoa(port))
	}
	o.ExtraArgs = extra
	started := time.Now()
	srv, err := devserver.Start(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("start the %s: %w", e.c.Engine.ServerName(), err)
	}
	e.log.Info("Temporal server up", "engine", e.c.Engine, "address", srv.Address, "pid", srv.Pid(), "metrics", metricsAddr,
		"took", time.Since(started).Round(time.Millisecond))
	return &server{Server: srv, metricsURL: "http://" + metricsAddr + "/metrics"}, nil
}

func (e *environment) stopServer(srv *server) {
	if err := srv.Stop(); err != nil {
		e.log.Warn("stop the Temporal server", "error", err)
	}
}

// cpuGroups are the process groups whose CPU a step measures besides the named processes:
// on the postgres engine, "db", the PostgreSQL backends serving the server's two databases.
func (s *server) cpuGroups() map[string]*procGroup {
	if s.Engine != devserver.EnginePostgres {
		return nil
	}
	return map[string]*procGroup{"db": newProcGroup(postgresBackends(s.Database, s.VisibilityDatabase))}
}

// progress logs a finished step.
func (e *environment) progress(s step) {
	e.log.Info("step", "phase", s.Phase, "rate", s.Rate, "sent", s.Sent, "completed", s.Completed,
		"throughput", s.Throughput, "p50_ms", s.Lateness.P50, "p99_ms", s.Lateness.P99, "max_ms", s.Lateness.Max,
		"lost", s.Lost, "cpu_s", s.CPU, "pass", s.Pass, "why", s.Why)
}

func quietSDKLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}
