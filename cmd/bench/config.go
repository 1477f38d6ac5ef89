package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// Phases, in the order they run.
const (
	phaseCeiling   = "ceiling"
	phaseLadder    = "ladder"
	phaseSustained = "sustained"
	// phaseSplit is the sustained load on the layout the Kubernetes base deploys: bridge and
	// worker in processes of their own (no eager start: the bridge has no worker beside it).
	phaseSplit = "split"
	phaseBurst = "burst"
	phaseMixed = "mixed"
	// phaseOverload offers twice the knee the ladder found (or -overload-rate) for
	// -overload-duration, with an operator probing the ops API every second meanwhile.
	phaseOverload = "overload"
)

var allPhases = []string{phaseCeiling, phaseLadder, phaseSustained, phaseSplit, phaseBurst, phaseMixed, phaseOverload}

// defaultDynamicConfig is passed to the dev server on top of the flags `make run` uses
// (devserver.Server.Args, which include devserver.DynamicConfig): none, so that the bench
// measures the server `make run` starts; -dynamic-config overrides for experiments.
var defaultDynamicConfig []string

// options is the benchmark's whole configuration, from flags (and RABBITMQ_URL).
type options struct {
	// Phases to run, a subset of allPhases, run in allPhases order.
	Phases []string
	// Steps are the rates (per second) of the ceiling and ladder phases, rising.
	Steps []int
	// StepDuration is how long each ceiling/ladder step offers load.
	StepDuration time.Duration
	// Rate and Duration shape the sustained and the mixed phase.
	Rate     int
	Duration time.Duration
	// BurstRate and BurstDuration shape the burst phase.
	BurstRate     int
	BurstDuration time.Duration
	// MixedKneeDuration is how long the mixed phase's two further loads, at the run's knee
	// and at twice it, offer load (0: not run).
	MixedKneeDuration time.Duration
	// OverloadRate, when set, is the overload phase's offered rate (else twice the ladder's
	// knee), and without a ladder its half stands for the knee. OverloadDuration is how long
	// the overload offers it.
	OverloadRate     int
	OverloadDuration time.Duration
	// Policy names the policy the bench's queues get (policyDefault or policyFixed); Delays
	// is that policy's wait before each retry, which the ceiling's probe sleeps too.
	Policy string
	Delays retryDelays
	// Delay is the fixed policy's retry delay.
	Delay time.Duration
	// QuietWindow is the bench policy's quiet window (the default policy's own with
	// -policy default).
	QuietWindow time.Duration
	// P99Target and KeepUp decide whether a step passes: p99 lateness at most P99Target and
	// throughput at least KeepUp × the offered rate (and, for the pipeline, nothing lost).
	P99Target time.Duration
	KeepUp    float64
	// MixedP99Target is the mixed phase's bound on the p99 lateness of each kind of retry.
	MixedP99Target time.Duration
	// StopOnFail ends a ceiling or ladder run at its second failing step in a row: one step
	// spoiled by a stall of the machine (a few late messages in one second) does not end the
	// curve, two in a row do.
	StopOnFail bool
	// DrainTimeout ends the wait for the last arrivals after a step's load once nothing new
	// has arrived for that long; DrainLimit ends it in any case. What has not arrived by then
	// counts as lost.
	DrainTimeout time.Duration
	DrainLimit   time.Duration
	// Publishers is how many goroutines publish (ingress) or start workflows (ceiling).
	Publishers int
	// RabbitMQURL is the broker.
	RabbitMQURL string
	// Engine is the Temporal server every phase runs against: the CLI's dev server (SQLite), or
	// the Temporal server on PostgreSQL (temporary databases on $TEMPORAL_POSTGRES_*, the
	// server binary from $TEMPORAL_SERVER_DIR).
	Engine devserver.Engine
	// HistoryShards is, on the postgres engine, the history shard count of the server's new
	// databases: the per-shard figure's axis.
	HistoryShards int
	// TemporalCLI is the binary the dev server runs.
	TemporalCLI string
	// TemporalAddress, when set, is a Temporal cluster every phase runs against instead of a
	// server of its own (its CPU is not measured; ServerMetrics, when set, is its /metrics),
	// in Namespace, whose search attributes must be registered.
	TemporalAddress, Namespace, ServerMetrics string
	// DynamicConfig are KEY=VALUE pairs for the dev server's --dynamic-config-value.
	DynamicConfig []string
	// SQLitePragmas are PRAGMA=VALUE pairs for the dev server's --sqlite-pragma, on top of the
	// ones devserver always sets.
	SQLitePragmas []string
	// ServiceLogLevel is the service's LOG_LEVEL (its log goes to a file).
	ServiceLogLevel string
	// ServiceEnv are extra KEY=VALUE settings for the service process (BRIDGE_WORKERS=32, ...).
	ServiceEnv []string
	// ResultsDir receives <UTC timestamp>.json; "" writes no file.
	ResultsDir string
	// ProbeStartDelay makes the ceiling probe wait its delay as a start delay instead of a timer.
	ProbeStartDelay bool
	// Note is free text stored in the JSON (what was changed for an A/B run).
	Note string
	// Flags are the flags given, as -name=value: what this run changed from the defaults.
	Flags []string
	// ABEnv, when set, runs each pipeline phase twice in this run: as configured (A), then
	// with these extra service settings (B), so that a change is compared on one machine
	// state. B's steps are named <phase>/B and stay out of the summary.
	ABEnv []string
}

// listFlag is a repeatable string flag.
type listFlag struct {
	vals []string
	set  bool
}

func (l *listFlag) String() string { return strings.Join(l.vals, " ") }

func (l *listFlag) Set(v string) error {
	if !l.set {
		l.vals, l.set = nil, true // the first use replaces the default
	}
	l.vals = append(l.vals, v)
	return nil
}

func parseConfig(args []string, stderr io.Writer) (options, error) {
	c := options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run, comma-separated: "+strings.Join(allPhases, ","))
	steps := fs.String("steps", "10,20,25,30,35,40,50,60,75,100,125,150,200", "rates (/s) of the ceiling and ladder steps, rising")
	fs.DurationVar(&c.StepDuration, "step-duration", 20*time.Second, "load time of each ceiling/ladder step (when not given: the smaller of 20s and -duration)")
	fs.IntVar(&c.Rate, "rate", 50, "sustained and mixed: failed messages per second")
	fs.DurationVar(&c.Duration, "duration", 120*time.Second, "sustained and mixed: how long to publish")
	fs.IntVar(&c.BurstRate, "burst-rate", 200, "burst: failed messages per second")
	fs.DurationVar(&c.BurstDuration, "burst-duration", 30*time.Second, "burst: how long to publish")
	fs.DurationVar(&c.MixedKneeDuration, "mixed-knee-duration", 60*time.Second, "mixed: how long each of its two further loads, at the run's knee and at twice it, publishes (0: neither runs)")
	fs.IntVar(&c.OverloadRate, "overload-rate", 0, "overload: failed messages per second (default: twice the knee the ladder found in this run; needed when the ladder does not run, and then its half is the knee the overload is judged against)")
	fs.DurationVar(&c.OverloadDuration, "overload-duration", 120*time.Second, "overload: how long to publish")
	fs.StringVar(&c.Policy, "policy", policyDefault, "the bench's traffic: default (the service's default policy: its delays, jitter and quiet window, what a queue without a route gets) or fixed (-delay, no jitter, -quiet-window); the ceiling's probe sleeps the same delays")
	fs.DurationVar(&c.Delay, "delay", time.Second, "-policy fixed: the retry delay")
	fs.DurationVar(&c.QuietWindow, "quiet-window", 2*time.Second, "-policy fixed: the quiet window (0: none, the run ends at the republish)")
	fs.DurationVar(&c.P99Target, "p99-target", 250*time.Millisecond, "a step passes with p99 lateness at most this")
	fs.DurationVar(&c.MixedP99Target, "mixed-p99-target", time.Second, "mixed: passes with the p99 lateness of every kind of retry at most this")
	fs.Float64Var(&c.KeepUp, "keep-up", 0.95, "a step passes with throughput at least this × its rate")
	fs.BoolVar(&c.StopOnFail, "stop-on-fail", true, "end a ceiling/ladder run at its second failing step in a row")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 60*time.Second, "after the load, stop waiting for the last arrivals once none has come for this long (then: lost)")
	fs.DurationVar(&c.DrainLimit, "drain-limit", 10*time.Minute, "after the load, stop waiting for the last arrivals after this long in any case")
	fs.IntVar(&c.Publishers, "publishers", 16, "concurrent publishers (ingress) / workflow starters (ceiling)")
	fs.StringVar(&c.RabbitMQURL, "rabbitmq-url", brokertest.URL(), "RabbitMQ (env RABBITMQ_URL)")
	engine := fs.String("engine", string(devserver.EngineDev), "Temporal server: dev (the CLI's dev server, SQLite) or postgres (the Temporal server on PostgreSQL: env TEMPORAL_POSTGRES_*, TEMPORAL_SERVER_DIR)")
	fs.IntVar(&c.HistoryShards, "history-shards", devserver.PostgresHistoryShards, "-engine postgres: the history shards of the server's new databases")
	fs.StringVar(&c.TemporalCLI, "temporal-cli", devserver.DefaultBinary(), "Temporal CLI for the dev server (env TEMPORAL_CLI)")
	fs.StringVar(&c.TemporalAddress, "temporal-address", os.Getenv("TEMPORAL_ADDRESS"), "a Temporal cluster's frontend host:port to run every phase against instead of a server of the bench's own (env TEMPORAL_ADDRESS; plaintext, no API key)")
	fs.StringVar(&c.Namespace, "namespace", "default", "with -temporal-address: the namespace (its search attributes registered, as for the service)")
	fs.StringVar(&c.ServerMetrics, "server-metrics", "", "with -temporal-address: a URL of the cluster's Prometheus metrics (one history host's, say) for the engine-work columns")
	dyn := &listFlag{vals: slices.Clone(defaultDynamicConfig)}
	fs.Var(dyn, "dynamic-config", "dev server --dynamic-config-value KEY=VALUE (e.g. matching.numTaskqueueReadPartitions=1), repeatable")
	pragmas := &listFlag{}
	fs.Var(pragmas, "sqlite-pragma", "extra dev server --sqlite-pragma PRAGMA=VALUE (e.g. cache_size=-65536), repeatable")
	fs.StringVar(&c.ServiceLogLevel, "service-log-level", "info", "LOG_LEVEL of the service process")
	env := &listFlag{}
	fs.Var(env, "service-env", "extra KEY=VALUE setting of the service process (e.g. BRIDGE_WORKERS=32), repeatable")
	fs.StringVar(&c.ResultsDir, "results-dir", "cmd/bench/results", "directory for the JSON result (\"\" = none)")
	fs.BoolVar(&c.ProbeStartDelay, "probe-start-delay", false, "ceiling: the probe waits its delay as a workflow start delay (one workflow task) instead of a timer")
	abEnv := &listFlag{}
	fs.Var(abEnv, "ab-env", "run each pipeline phase again (B) with this extra KEY=VALUE service setting (e.g. BREAKERS=off), repeatable")
	fs.StringVar(&c.Note, "note", "", "free text stored in the JSON result (what this run changed)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		c.Flags = append(c.Flags, "-"+f.Name+"="+f.Value.String())
	})
	var errs []error
	switch c.Policy {
	case policyDefault:
		if set["delay"] || set["quiet-window"] {
			errs = append(errs, errors.New("-delay and -quiet-window shape -policy fixed only"))
		}
	case policyFixed:
	default:
		errs = append(errs, fmt.Errorf("-policy: %q is neither %s nor %s", c.Policy, policyDefault, policyFixed))
	}
	pol := benchPolicyOf(c.Policy, c.Delay, c.QuietWindow)
	c.Delays, c.QuietWindow = retryDelays{pol: pol}, pol.QuietWindow
	if !set["step-duration"] && c.Duration < c.StepDuration {
		c.StepDuration = c.Duration
	}

	for _, p := range strings.Split(*phases, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPhases, p) {
			errs = append(errs, fmt.Errorf("-phases: unknown phase %q", p))
			continue
		}
		if !slices.Contains(c.Phases, p) {
			c.Phases = append(c.Phases, p)
		}
	}
	slices.SortFunc(c.Phases, func(a, b string) int { return slices.Index(allPhases, a) - slices.Index(allPhases, b) })
	for _, s := range strings.Split(*steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("-steps: %q is not a positive rate", s))
			continue
		}
		c.Steps = append(c.Steps, n)
	}
	if !slices.IsSorted(c.Steps) {
		errs = append(errs, errors.New("-steps must rise"))
	}
	c.DynamicConfig = dyn.vals
	for _, kv := range c.DynamicConfig {
		if !strings.Contains(kv, "=") {
			errs = append(errs, fmt.Errorf("-dynamic-config %q: want KEY=VALUE", kv))
		}
	}
	c.SQLitePragmas = pragmas.vals
	for _, kv := range c.SQLitePragmas {
		if !strings.Contains(kv, "=") {
			errs = append(errs, fmt.Errorf("-sqlite-pragma %q: want PRAGMA=VALUE", kv))
		}
	}
	if e, err := devserver.ParseEngine(*engine); err != nil {
		errs = append(errs, fmt.Errorf("-engine: %w", err))
	} else {
		c.Engine = e
	}
	if c.Engine != devserver.EnginePostgres && set["history-shards"] {
		errs = append(errs, errors.New("-history-shards needs -engine postgres (the dev server has one shard)"))
	}
	if c.Engine == devserver.EnginePostgres && len(c.SQLitePragmas) > 0 {
		errs = append(errs, errors.New("-sqlite-pragma applies to the dev engine only"))
	}
	c.ServiceEnv = env.vals
	c.ABEnv = abEnv.vals
	for _, kv := range c.ServiceEnv {
		if !strings.Contains(kv, "=") {
			errs = append(errs, fmt.Errorf("-service-env %q: want KEY=VALUE", kv))
		}
	}
	positive := map[string]time.Duration{
		"-step-duration": c.StepDuration, "-duration": c.Duration, "-burst-duration": c.BurstDuration, "-overload-duration": c.OverloadDuration,
		"-delay": c.Delay, "-p99-target": c.P99Target, "-mixed-p99-target": c.MixedP99Target, "-drain-timeout": c.DrainTimeout, "-drain-limit": c.DrainLimit,
	}
	for name, d := range positive {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if c.QuietWindow < 0 {
		errs = append(errs, errors.New("-quiet-window must not be negative"))
	}
	if c.MixedKneeDuration < 0 {
		errs = append(errs, errors.New("-mixed-knee-duration must not be negative"))
	}
	if c.OverloadRate < 0 || c.OverloadRate == 1 {
		errs = append(errs, errors.New("-overload-rate must be 0 (twice the ladder's knee) or at least 2"))
	}
	if slices.Contains(c.Phases, phaseOverload) && !slices.Contains(c.Phases, phaseLadder) && c.OverloadRate == 0 {
		errs = append(errs, errors.New("-phases overload without ladder needs -overload-rate: the overload offers twice the knee the ladder finds in the same run"))
	}
	if c.Rate <= 0 || c.BurstRate <= 0 || c.Publishers <= 0 {
		errs = append(errs, errors.New("-rate, -burst-rate and -publishers must be positive"))
	}
	if c.KeepUp <= 0 || c.KeepUp > 1 {
		errs = append(errs, errors.New("-keep-up must be in (0, 1]"))
	}
	return c, errors.Join(errs...)
}
