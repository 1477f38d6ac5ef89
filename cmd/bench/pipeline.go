package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/proc"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// load is one rate held for a while, a row of a pipeline phase; role says what the rate is
// relative to the run's knee (roleKnee, roleTwiceKnee; "": a rate of the flags).
type load struct {
	rate     int
	duration time.Duration
	role     string
}

// pipeline is the whole product under load: the service in child processes (one `all`
// process: bridge, worker with eager start, ops; or for the split phase a `bridge` and a
// `worker` process, as the Kubernetes base deploys them), fed RetryMessages on its ingress
// queue, and a consumer on each step's original queue that records every republished message.
type pipeline struct {
	c   options
	env *environment
	srv *server
	// svcs are the service's processes by role: "worker" (the all process, or the worker)
	// and, in the split layout, "bridge".
	svcs map[string]*proc.Process
	// workerHTTP is the worker process's HTTP address (its /metrics).
	workerHTTP string
	bcfg       broker.Config
	pub        *broker.Publisher
	ingress    string
	dlq        string
	// apiToken is the ops API's operator token the service was given (overload phase: its
	// operator probe); "" otherwise.
	apiToken string
	// during, when set, runs beside a load for its duration (the overload's operator probe).
	during func(ctx context.Context, d time.Duration)
}

// payload is the body of each bench message: its sequence number and send time, so a
// delivery can be told apart and timed from its body alone.
type payload struct {
	Seq    int       `json:"seq"`
	SentAt time.Time `json:"sent_at"`
}

// runPipeline runs the loads of one phase against a dev server and a service of its own.
func runPipeline(ctx context.Context, c options, env *environment, phase string, loads []load) ([]step, error) {
	p := &pipeline{
		c: c, env: env,
		bcfg:    broker.Config{URL: c.RabbitMQURL, ConnectionName: "bench-" + phase},
		ingress: env.prefix + "." + phase + ".retry",
		dlq:     env.prefix + "." + phase + ".dead",
	}
	defer p.close()
	if err := p.start(ctx, phase); err != nil {
		return nil, err
	}
	var out []step
	var failing failStreak
	for i, l := range loads {
		if ctx.Err() != nil {
			break
		}
		s, err := p.run(ctx, phase, i, l)
		if err != nil {
			return out, err
		}
		env.progress(s)
		out = append(out, s)
		if phase == phaseLadder && failing.see(s.Pass) && c.StopOnFail {
			break
		}
	}
	return out, nil
}

func (p *pipeline) start(ctx context.Context, phase string) error {
	// Queues first, so that close deletes them whatever happens next.
	if err := broker.DeclareQueues(p.bcfg, p.env.quiet, p.ingress, p.dlq); err != nil {
		return fmt.Errorf("%s: %w", phase, err)
	}
	var err error
	if p.srv, err = p.env.startServer(ctx); err != nil {
		return err
	}
	common := []string{
		"-rabbitmq-url", p.c.RabbitMQURL,
		"-temporal-address", p.srv.Address,
		"-namespace", p.srv.Namespace,
		"-task-queue", p.env.prefix + "-" + phase,
		"-retry-queue", p.ingress,
		"-manual-review-queue", p.dlq,
		"-log-level", p.c.ServiceLogLevel,
	}
	if p.c.Policy == policyFixed {
		policyFile := filepath.Join(p.env.dir, phase+"-policies.yaml")
		if err := os.WriteFile(policyFile, []byte(benchPolicy(p.env.prefix, p.c)), 0o600); err != nil {
			return fmt.Errorf("%s: policy file: %w", phase, err)
		}
		common = append(common, "-policy-file", policyFile)
	}
	roles := map[string]string{"worker": config.ModeAll}
	if phase == phaseSplit {
		roles = map[string]string{"worker": config.ModeWorker, "bridge": config.ModeBridge}
	}
	p.svcs = map[string]*proc.Process{}
	for role, mode := range roles {
		port, err := freeport.Get()
		if err != nil {
			return err
		}
		httpAddr := "127.0.0.1:" + strconv.Itoa(port)
		args := append([]string{mode, "-http-addr", httpAddr}, common...)
		logFile := filepath.Join(p.env.dir, phase+"-"+role+".log")
		env := p.c.ServiceEnv
		if phase == phaseOverload && role == "worker" {
			// The operator probe's token: the `all` process serves the ops API, as deployed.
			p.apiToken = newAPIToken()
			env = append(slices.Clone(env), apiTokensEnv(p.apiToken))
		}
		svc, err := startService(ctx, args, env, httpAddr, logFile)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", phase, mode, err)
		}
		p.svcs[role] = svc
		if role == "worker" {
			p.workerHTTP = httpAddr
		}
	}
	p.pub = broker.NewPublisher(p.bcfg, p.env.quiet)
	return nil
}

// benchMaxRetries is the bench policy's max_retries: the mixed phase's exhausting messages
// are republished this many times, and dead-lettered at their next failure.
const benchMaxRetries = 3

// benchPolicy is the service's policy file for -policy fixed: the bench's queues routed to
// one delay without jitter for every attempt (a schedule's last delay repeats). With -policy
// default the service has no policy file: its queues get the default policy.
func benchPolicy(prefix string, c options) string {
	return fmt.Sprintf(`policies:
  bench:
    backoff: {type: schedule, delays: [%s]}
    jitter: {mode: none}
    max_retries: %d
    quiet_window: %s
routes:
  - queue: %q
    policy: bench
`, c.Delay, benchMaxRetries, c.QuietWindow, prefix+".*.orig-*")
}

func (p *pipeline) close() {
	if p.pub != nil {
		_ = p.pub.Close()
	}
	for role, svc := range p.svcs {
		if err := svc.Stop(serviceStopGrace); err != nil {
			p.env.log.Warn("stop service", "role", role, "error", err)
		}
	}
	if p.srv != nil {
		p.env.stopServer(p.srv)
	}
	deleteQueues(p.bcfg, p.ingress, p.dlq)
}

// run offers one load and measures it: publish at the rate, wait for the last arrivals (at
// most the drain timeout), then for the quiet window so that the workflows' last task is in
// the CPU figures.
func (p *pipeline) run(ctx context.Context, phase string, i int, l load) (step, error) {
	name := phase + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(l.rate)
	original := p.env.prefix + "." + phase + ".orig-" + strconv.Itoa(i)
	if err := broker.DeclareQueues(p.bcfg, p.env.quiet, original); err != nil {
		return step{}, fmt.Errorf("%s: %w", name, err)
	}
	defer deleteQueues(p.bcfg, original)
	if phase == phaseMixed {
		return p.runMixed(ctx, phase, name, original, l)
	}

	// The overload's operator probe reports its own messages for this queue (the default
	// policy's: no route of -policy fixed names it).
	probeQueue := p.env.prefix + "." + phase + ".probe-" + strconv.Itoa(i)
	if phase == phaseOverload {
		if err := broker.DeclareQueues(p.bcfg, p.env.quiet, probeQueue); err != nil {
			return step{}, fmt.Errorf("%s: %w", name, err)
		}
		defer deleteQueues(p.bcfg, probeQueue)
	}

	t := newTracker(p.c.Delays.nominal(), func(seq int) time.Duration {
		return p.c.Delays.of(message.WorkflowID(original, name+"-"+strconv.Itoa(seq)), 1)
	})
	cctx, stopConsumer := context.WithCancel(ctx)
	var wg sync.WaitGroup
	consuming := make(chan struct{})
	wg.Go(func() {
		p.consume(cctx, original, consuming, func(d amqp.Delivery, at time.Time) {
			var pl payload
			if err := json.Unmarshal(d.Body, &pl); err == nil {
				key, _ := d.Headers[message.HeaderRetryKey].(string)
				t.arrived(pl.Seq, at, key)
			}
		})
	})
	backlog := &peak{}
	wg.Go(func() { p.sampleBacklog(cctx, backlog) })
	defer func() { stopConsumer(); wg.Wait() }()
	// Arrival times are only right with the consumer attached before the first retry is due.
	if err := awaitConsumer(ctx, name, original, consuming); err != nil {
		return step{}, err
	}
	var probe *opsProbe
	if phase == phaseOverload {
		probe = p.startOpsProbe(ctx, cctx, &wg, probeQueue, int(l.duration/time.Second)+opsProbeSpare)
		if st := probe.stats(); st.SetupError != "" {
			p.env.log.Warn("ops probe could not start: the overload runs without it", "error", st.SetupError)
		} else {
			p.during = probe.run
			defer func() { p.during = nil }()
		}
	}

	s, start, end, engine := p.offer(ctx, phase, name, original, l, t, backlog)
	t.fill(&s, start, end)
	s.Engine = engine.work(s.Completed)
	s.Engine.addHistory(ctx, p.srv, t.sample(func(seq int) string {
		return message.WorkflowID(original, name+"-"+strconv.Itoa(seq))
	}))
	s.DeadLettered = purge(p.bcfg, p.dlq)
	if s.Lost > 0 {
		s.Missing = p.explain(ctx, original, name, t.missing(5))
		p.env.keepDir = true
	}
	s.Slowest = p.trace(ctx, original, name, t.latest(slowestTraced))
	perRetry(&s)
	judge(&s, p.c)
	switch phase {
	case phaseBurst:
		s.MustShow = burstMustShows(s, p.env.knee)
	case phaseOverload:
		// Past the knee by design: judged by what it must show, not by lateness or keeping up.
		s.Overload = newOverloadStats(s, t.firstArrivals(), start, end, p.env.knee)
		s.Overload.Probe = probe.stats()
		s.MustShow = overloadMustShows(s.Overload)
		judgeOverload(&s)
	}
	if s.DeadLettered > 0 {
		s.Pass = false
		s.Why = joinWhy(s.Why, "dead-lettered")
	}
	return s, nil
}

// loadTracker is what offer needs of a phase's tracker.
type loadTracker interface {
	sendRecorder
	waitAll(ctx context.Context, idle, limit time.Duration)
}

// offer publishes load l to original at its rate, waits for the messages to end (at most the
// drain wait, counted from the end of the load), then for the quiet window so that the
// workflows' last task is in the CPU figures. It returns the step with its CPU, backlog and
// breaker figures, when the load started and ended, and the stopped engine meter.
func (p *pipeline) offer(ctx context.Context, phase, name, original string, l load, t loadTracker, backlog *peak) (s step, start, end time.Time, engine *engineMeter) {
	cpu := p.cpuMeter()
	defer cpu.close()
	engine = newEngineMeter(ctx, p.srv.metricsURL)
	opens := breakerOpens(ctx, p.workerHTTP)
	var beside sync.WaitGroup
	if during := p.during; during != nil {
		beside.Go(func() { during(ctx, l.duration) })
	}
	start, end = pace(ctx, l.rate, l.duration, p.c.Publishers, func(ctx context.Context, seq int) {
		p.send(ctx, original, name, seq, t)
	})
	t.waitAll(ctx, p.c.DrainTimeout, p.c.Delays.nominal()+p.c.DrainLimit)
	beside.Wait()
	sleep(ctx, p.c.QuietWindow+time.Second)

	s = step{Phase: phase, Rate: l.rate, LoadRole: l.role, PeakIngressBacklog: backlog.get(), BreakerOpens: p.opensSince(ctx, opens)}
	cpu.record(&s)
	engine.stop(ctx)
	return s, start, end, engine
}

// opensSince is how many times the breakers opened since a count of before (-1: unknown).
func (p *pipeline) opensSince(ctx context.Context, before int) int {
	after := breakerOpens(ctx, p.workerHTTP)
	if before < 0 || after < 0 {
		return -1
	}
	return after - before
}

// cpuMeter measures the step's CPU: the Temporal server, the service, the bench, and on the
// postgres engine the database backends.
func (p *pipeline) cpuMeter() *cpuMeter {
	pids := map[string]int{"server": p.srv.Pid(), "bench": os.Getpid()}
	for role, svc := range p.svcs {
		pids[role] = svc.Pid()
	}
	return newCPUMeter(pids, p.srv.cpuGroups())
}

// awaitConsumer waits until a consumer is attached (consuming closed), at most 30 s.
func awaitConsumer(ctx context.Context, name, queue string, consuming <-chan struct{}) error {
	select {
	case <-consuming:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: consumer not attached to %s within 30s", name, queue)
	}
}

// explain says, for lost messages, what Temporal knows of their workflows.
func (p *pipeline) explain(ctx context.Context, original, name string, seqs []int) []string {
	return p.ask(ctx, 10*time.Second, func(ctx context.Context, tc client.Client) []string {
		return describeLost(ctx, tc, original, name, seqs)
	})
}

func describeLost(ctx context.Context, tc client.Client, original, name string, seqs []int) []string {
	var out []string
	for _, seq := range seqs {
		id := message.WorkflowID(original, name+"-"+strconv.Itoa(seq))
		desc, err := tc.DescribeWorkflow(ctx, id, "")
		if err != nil {
			out = append(out, fmt.Sprintf("%d: workflow %s: %v", seq, id, err))
			continue
		}
		d := desc.RawResponse
		info := d.GetWorkflowExecutionInfo()
		status := "?"
		if sa := info.GetSearchAttributes().GetIndexedFields()[workflows.SAStatus.GetName()]; sa != nil {
			status = string(sa.GetData())
		}
		out = append(out, fmt.Sprintf("%d: workflow %s %s, RetryStatus %s, %d history events, %d pending activities",
			seq, id, info.GetStatus(), status, info.GetHistoryLength(), len(d.GetPendingActivities())))
	}
	return out
}

// trace lays out the workflow histories of the given messages (see timelines).
func (p *pipeline) trace(ctx context.Context, original, name string, msgs []traced) []string {
	return p.ask(ctx, 20*time.Second, func(ctx context.Context, tc client.Client) []string {
		return timelines(ctx, tc, original, name, msgs)
	})
}

// ask runs f with a client of the step's dev server, within timeout; it says so when the
// server cannot be reached.
func (p *pipeline) ask(ctx context.Context, timeout time.Duration, f func(context.Context, client.Client) []string) []string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc, err := p.srv.Dial(ctx)
	if err != nil {
		return []string{"cannot ask Temporal: " + err.Error()}
	}
	defer tc.Close()
	return f(ctx, tc)
}

// sendRecorder is where send records its outcome: the tracker of a step.
type sendRecorder interface {
	markSent(seq int, at time.Time)
	markError()
}

// send publishes message seq of a step as a RetryMessage, with a confirm.
func (p *pipeline) send(ctx context.Context, original, name string, seq int, t sendRecorder) {
	at := time.Now()
	if err := p.publishReport(ctx, original, name+"-"+strconv.Itoa(seq), mustJSON(payload{Seq: seq, SentAt: at}), 0, ""); err != nil {
		t.markError()
		p.env.log.Debug("publish", "error", err)
		return
	}
	t.markSent(seq, at)
}

// consume hands every delivery on queue to handle, with its arrival time (taken on receipt),
// then acks it, until ctx ends, reconnecting if the broker drops the connection. consuming is
// closed once the first session consumes.
func (p *pipeline) consume(ctx context.Context, queue string, consuming chan struct{}, handle func(d amqp.Delivery, at time.Time)) {
	var once sync.Once
	ready := func() { once.Do(func() { close(consuming) }) }
	for ctx.Err() == nil {
		p.consumeSession(ctx, queue, ready, handle)
		sleep(ctx, 200*time.Millisecond)
	}
}

func (p *pipeline) consumeSession(ctx context.Context, queue string, ready func(), handle func(d amqp.Delivery, at time.Time)) {
	conn, err := broker.Dial(broker.Config{URL: p.c.RabbitMQURL, ConnectionName: "bench-consumer"})
	if err != nil {
		p.env.log.Warn("consumer dial", "error", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		return
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		p.env.log.Warn("consume", "queue", queue, "error", err)
		return
	}
	ready()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			handle(d, time.Now())
			_ = d.Ack(false)
		}
	}
}

// peak keeps the largest value seen.
type peak struct {
	mu sync.Mutex
	v  int
}

func (p *peak) see(v int) {
	p.mu.Lock()
	p.v = max(p.v, v)
	p.mu.Unlock()
}

func (p *peak) get() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.v
}

// sampleBacklog records the deepest the ingress queue got (ready messages: the bridge's
// backlog), sampled twice a second.
func (p *pipeline) sampleBacklog(ctx context.Context, pk *peak) {
	conn, err := broker.Dial(broker.Config{URL: p.c.RabbitMQURL, ConnectionName: "bench-sampler"})
	if err != nil {
		return
	}
	defer conn.Close()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		if q, err := ch.QueueDeclarePassive(p.ingress, true, false, false, false, nil); err == nil {
			pk.see(q.Messages)
		}
		_ = ch.Close()
	}
}

// purge empties a queue and returns how many messages it held (0 if it cannot tell).
func purge(cfg broker.Config, queue string) int {
	conn, err := broker.Dial(cfg)
	if err != nil {
		return 0
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0
	}
	n, err := ch.QueuePurge(queue, false)
	if err != nil {
		return 0
	}
	return n
}

// deleteQueues deletes the bench's queues; errors are ignored (the queue may be gone).
func deleteQueues(cfg broker.Config, names ...string) {
	conn, err := broker.Dial(cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, n := range names {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(n, false, false, false)
		_ = ch.Close()
	}
}

func joinWhy(a, b string) string {
	if a == "" {
		return b
	}
	return a + ", " + b
}
