// Command soak pushes N failed messages through the whole retry-scheduler pipeline (two
// workers and a bridge as processes, a Temporal dev server on a file store or with
// -engine postgres the Temporal server on PostgreSQL, the local RabbitMQ) while a fault
// schedule kills processes, restarts the broker and the Temporal server,
// and cuts, partitions and slows the service's connections through loopback proxies. At the
// end it counts, per message, what was lost (neither delivered, dead-lettered nor parked) and
// what was unexpected (a wrong outcome, a duplicate with another key, attempts beyond the
// maximum, a changed payload), prints the figures and writes them as JSON. See cmd/soak/README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// options are the soak's flags.
type options struct {
	n             int
	rate          float64
	duration      time.Duration
	verifyTimeout time.Duration
	kills         int
	faults        string
	seed          uint64
	workers       int
	bridges       int
	rabbitNodes   int // 1: the machine's node; more: a private cluster, quorum queues
	temporalHosts int // more than 1: Temporal server hosts on one PostgreSQL
	delay         time.Duration
	quietWindow   time.Duration
	maxRetries    int
	// The soak policy's breaker settings that differ from the defaults (see run).
	breakerRatio       float64
	breakerCooldownMax time.Duration
	hostile            float64
	latency            time.Duration
	faultPeriod        time.Duration
	minGap             time.Duration
	restartDelay       time.Duration
	resultsDir         string
	keep               bool
	rabbitURL          string
	verbose            bool
	engine             devserver.Engine
	postgres           devserver.PostgresOptions // with -engine postgres
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 10000, "failed messages to send")
	fs.Float64Var(&o.rate, "rate", 20, "first failures published per second")
	fs.DurationVar(&o.duration, "duration", 90*time.Minute, "bound on traffic, faults and drain; whatever is not settled then counts as lost")
	fs.DurationVar(&o.verifyTimeout, "verify-timeout", 10*time.Minute, "bound on the final count against Temporal (after -duration)")
	fs.IntVar(&o.kills, "kills", 24, "process kills (SIGKILL of a worker, the bridge or the Temporal dev server)")
	fs.StringVar(&o.faults, "faults", "all", "fault kinds, comma-separated, or all / none: "+strings.Join(allFaults, ","))
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the per-message plan and the fault order")
	fs.IntVar(&o.workers, "workers", 2, "worker processes")
	fs.IntVar(&o.bridges, "bridges", 1, "bridge processes")
	fs.IntVar(&o.rabbitNodes, "rabbit-nodes", 1, "1: the machine's RabbitMQ; 3 or more: a private cluster of that many nodes with quorum queues")
	fs.IntVar(&o.temporalHosts, "temporal-hosts", 1, "Temporal server hosts (more than 1 needs -engine postgres): one cluster, one membership ring")
	cluster := fs.Bool("cluster", false, "the cluster shape: -engine postgres -temporal-hosts 2 -rabbit-nodes 3 -bridges 2 -workers 2, unless given")
	fs.DurationVar(&o.delay, "delay", 500*time.Millisecond, "the soak policy's retry delay")
	// 30s, the built-in policies' quiet window: longer than the longest stall the schedule
	// makes (a 10 s partition and its recovery). With a quiet window shorter than the stalls,
	// late reports split message histories across runs (cmd/soak/README.md, "Findings").
	fs.DurationVar(&o.quietWindow, "quiet-window", 30*time.Second, "the soak policy's quiet window")
	fs.IntVar(&o.maxRetries, "max-retries", 3, "the soak policy's max retries")
	fs.Float64Var(&o.breakerRatio, "breaker-failure-ratio", 0.8, "the soak policy's breaker failure_ratio (the plan fails 59% of retries; the default 0.5 holds most of them)")
	fs.DurationVar(&o.breakerCooldownMax, "breaker-cooldown-max", 20*time.Second, "the soak policy's breaker cooldown_max (the default 5m leaves the run's tail held for minutes a probe round)")
	fs.Float64Var(&o.hostile, "hostile", 0.1, "bad reports (aimed at the scheduler's own queues or amq.*, over AMQP's limits, not JSON) mixed in, as a share of -n")
	fs.DurationVar(&o.latency, "latency", 150*time.Millisecond, "latency added each way during a latency fault")
	fs.DurationVar(&o.faultPeriod, "fault-period", 10*time.Second, "how long a latency fault, a bridge↔Temporal partition or an armed confirm cut lasts")
	fs.DurationVar(&o.minGap, "min-gap", 5*time.Second, "least time between the end of a fault and the start of the next")
	fs.DurationVar(&o.restartDelay, "restart-delay", time.Second, "pause between a SIGKILL and the restart")
	fs.StringVar(&o.resultsDir, "results", "cmd/soak/results", "where the JSON result goes")
	fs.BoolVar(&o.keep, "keep", false, "keep the run directory (logs, dev server DB) even when the soak passes")
	fs.BoolVar(&o.verbose, "v", false, "log the soak's own clients (reconnects, retries)")
	engine := fs.String("engine", string(devserver.EngineDev), "Temporal engine: dev (the CLI's dev server on SQLite) or postgres (the Temporal server "+devserver.ServerVersion+
		" on PostgreSQL: "+devserver.EnvPostgresHost+", _PORT, _USER, _PASSWORD; default 127.0.0.1:5432 as postgres)")
	o.rabbitURL = brokertest.URL()
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *cluster {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for name, value := range map[string]string{"engine": string(devserver.EnginePostgres), "temporal-hosts": "2", "rabbit-nodes": "3", "bridges": "2", "workers": "2"} {
			if !given[name] {
				_ = fs.Set(name, value)
			}
		}
	}
	var err error
	if o.engine, err = devserver.ParseEngine(*engine); err != nil {
		return o, err
	}
	if o.engine == devserver.EnginePostgres {
		if o.postgres, err = devserver.PostgresFromEnv(os.Getenv); err != nil {
			return o, err
		}
	}
	switch {
	case o.n <= 0:
		return o, errors.New("-n must be positive")
	case o.rate <= 0:
		return o, errors.New("-rate must be positive")
	case o.workers < 1:
		return o, errors.New("-workers must be at least 1")
	case o.bridges < 1:
		return o, errors.New("-bridges must be at least 1")
	case o.rabbitNodes == 2 || o.rabbitNodes < 1:
		return o, errors.New("-rabbit-nodes must be 1 or at least 3 (a quorum queue on two nodes stops when one is lost)")
	case o.temporalHosts < 1:
		return o, errors.New("-temporal-hosts must be at least 1")
	case o.temporalHosts > 1 && o.engine != devserver.EnginePostgres:
		return o, errors.New("-temporal-hosts above 1 needs -engine postgres (the dev server's SQLite file is one process's)")
	case o.maxRetries < 1:
		return o, errors.New("-max-retries must be at least 1")
	case o.breakerRatio <= 0 || o.breakerRatio > 1:
		return o, errors.New("-breaker-failure-ratio must be in (0, 1]")
	case o.breakerCooldownMax < 10*time.Second:
		return o, errors.New("-breaker-cooldown-max must be at least the breaker's cooldown, 10s")
	case o.hostile < 0:
		return o, errors.New("-hostile must not be negative")
	case o.kills < 0:
		return o, errors.New("-kills must not be negative")
	}
	if _, err := o.faultKinds(); err != nil {
		return o, err
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		if code == 0 {
			code = 2
		}
	}
	stop()
	os.Exit(code)
}

// rabbitAddr is the host:port of an amqp:// URL.
func rabbitAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("RABBITMQ_URL: %v", err)
	}
	if u.Scheme != "amqp" {
		return "", fmt.Errorf("RABBITMQ_URL: the soak proxies plain amqp:// only (got %s)", u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5672"
	}
	switch host {
	case "127.0.0.1", "localhost", "::1":
	default:
		return "", fmt.Errorf("RABBITMQ_URL: the soak restarts the broker with rabbitmqctl, so it runs on a local broker only (got %s)", host)
	}
	return net.JoinHostPort(host, port), nil
}

// viaProxy is raw with its host:port replaced by addr.
func viaProxy(raw, addr string) string {
	u, _ := url.Parse(raw)
	u.Host = addr
	return u.String()
}

func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "soak-" + hex.EncodeToString(b)
}

func newLogger(verbose bool) *slog.Logger {
	if !verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
