package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/checkout"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// queue names of one run, under its id.
type names struct {
	id, ingress, dlq, taskQueue, svcName string
	originals                            []string
}

func newNames(id string) names {
	return names{
		id: id, ingress: id + ".retry", dlq: id + ".dead", taskQueue: id, svcName: id + "-svc",
		originals: []string{id + ".orders", id + ".payments", id + ".emails"},
	}
}

func (n names) all() []string { return append([]string{n.ingress, n.dlq}, n.originals...) }

// run is the whole soak; the exit code is 1 when something was lost or unexpected.
func run(ctx context.Context, o options) (code int, err error) {
	started := time.Now()
	// The commit the service is built from below, read now: the tree may move during a run.
	commit, dirty := checkout.Describe()
	logf := func(format string, args ...any) {
		fmt.Printf("[%7s] %s\n", time.Since(started).Round(time.Second), fmt.Sprintf(format, args...))
	}
	log := newLogger(o.verbose)
	faultKinds, _ := o.faultKinds()
	rabbit, err := startRabbit(o, logf)
	if err != nil {
		return 2, err
	}
	// Whatever happens from here on, the machine's broker is left running for everyone else.
	defer rabbit.close()

	n := newNames(newRunID())
	dir, err := os.MkdirTemp("", "retry-scheduler-"+n.id+"-")
	if err != nil {
		return 2, err
	}
	passed := false
	defer func() {
		if passed && !o.keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Printf("run directory kept: %s (service logs, Temporal server DB or log)\n", dir)
		}
	}()
	logf("soak %s: %d messages at %.0f/s, %d process kills, faults %s, seed %d; run directory %s",
		n.id, o.n, o.rate, o.kills, faultNames(faultKinds), o.seed, dir)

	// Build the service once.
	bin := filepath.Join(dir, "retry-scheduler")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/retry-scheduler/retry-scheduler/cmd/retry-scheduler").CombinedOutput(); err != nil {
		return 2, fmt.Errorf("build the service: %w\n%s", err, out)
	}

	temporal, err := startTemporal(ctx, o, dir, n.id, logf)
	if err != nil {
		return 2, err
	}
	defer func() { temporal.stop(passed && !o.keep) }()

	// Proxies: every connection of the service goes through one we control, one per node
	// or host it can reach.
	w := &world{rabbit: rabbit, temporal: temporal, ingress: n.ingress, svcConnPrefix: n.svcName + "-", opts: o, logf: logf}
	defer func() {
		for _, g := range w.proxies() {
			if g != nil {
				g.Close()
			}
		}
	}()
	if w.workerAMQP, err = startGroup("worker-amqp", rabbit.nodes, true, log); err != nil {
		return 2, err
	}
	if w.bridgeAMQP, err = startGroup("bridge-amqp", rabbit.nodes, true, log); err != nil {
		return 2, err
	}
	if w.workerTemporal, err = startGroup("worker-temporal", temporal.addrs(), false, log); err != nil {
		return 2, err
	}
	if w.bridgeTemporal, err = startGroup("bridge-temporal", temporal.addrs(), false, log); err != nil {
		return 2, err
	}

	// Queues and the policy file.
	clientPrefix := n.id + "-client-"
	if err := broker.DeclareQueues(broker.Config{URL: rabbit.url, ConnectionName: clientPrefix + "setup", QueueType: rabbit.queueType()}, log, n.all()...); err != nil {
		return 2, err
	}
	defer deleteQueues(rabbit.url, clientPrefix+"teardown", n.all()...)
	policyFile := filepath.Join(dir, "policies.yaml")
	// The service's defaults otherwise, circuit breakers on, with two of their settings
	// moved (-breaker-failure-ratio, -breaker-cooldown-max): the consumer fails 59 % of the
	// retries on purpose (the plan), and the tail of a run is messages that fail every
	// retry until they are dead-lettered. At the default ratio (0.5) the breakers hold most
	// retries during the traffic, and in the tail they hold the last ones for cooldowns that
	// grow to 5 minutes, three probes per round: what a breaker is for, and a run that does
	// not end. The breakers still count on every process, gate every republish and open in
	// the tail and when faults make failures spike; a held run is in flight for the drain
	// and the count.
	policy := fmt.Sprintf(`default_policy: soak
policies:
  soak:
    backoff: {type: schedule, delays: [%s]}
    max_retries: %d
    quiet_window: %s
    breaker: {failure_ratio: %g, cooldown_max: %s}
routes:
  - queue: "%s.*"
    policy: soak
`, o.delay, o.maxRetries, o.quietWindow, o.breakerRatio, o.breakerCooldownMax, n.id)
	if err := os.WriteFile(policyFile, []byte(policy), 0o644); err != nil {
		return 2, err
	}

	// The service: workers and bridges, each its own process.
	svcArgs := func(mode string, amqpProxy, temporalProxy *proxyGroup) ([]string, string, error) {
		port, err := freeport.Get()
		if err != nil {
			return nil, "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		return []string{mode,
			"-rabbitmq-url", amqpProxy.rabbitURLs(rabbit.nodeURL),
			"-temporal-address", temporalProxy.temporalAddress(),
			"-namespace", temporal.namespace(),
			"-queue-type", rabbit.queueType(),
			"-task-queue", n.taskQueue,
			"-retry-queue", n.ingress,
			"-manual-review-queue", n.dlq,
			"-policy-file", policyFile,
			"-service-name", n.svcName,
			"-http-addr", addr,
		}, addr, nil
	}
	var all []*service
	defer func() {
		var wg sync.WaitGroup
		for _, s := range all {
			wg.Add(1)
			go func() { defer wg.Done(); s.stop(45 * time.Second) }()
		}
		wg.Wait()
	}()
	for i := range o.workers {
		args, addr, err := svcArgs(config.ModeWorker, w.workerAMQP, w.workerTemporal)
		if err != nil {
			return 2, err
		}
		s := newService(fmt.Sprintf("worker-%d", i+1), bin, dir, addr, args)
		all = append(all, s)
		w.workers = append(w.workers, s)
	}
	for i := range o.bridges {
		args, addr, err := svcArgs(config.ModeBridge, w.bridgeAMQP, w.bridgeTemporal)
		if err != nil {
			return 2, err
		}
		name := "bridge"
		if o.bridges > 1 {
			name = fmt.Sprintf("bridge-%d", i+1)
		}
		s := newService(name, bin, dir, addr, args)
		all = append(all, s)
		w.bridges = append(w.bridges, s)
	}
	for _, s := range all {
		if err := s.start(); err != nil {
			return 2, err
		}
	}
	for _, s := range all {
		if err := s.waitReady(ctx, 90*time.Second); err != nil {
			return 2, err
		}
	}
	logf("service up: %d workers and %d bridges on %s and %s (logs in %s)", o.workers, o.bridges, rabbit.describe(), temporal.describe(), dir)

	// Traffic.
	plans := make([]plan, o.n)
	for i := range plans {
		plans[i] = makePlan(o.seed, i, n.originals, o.maxRetries)
	}
	bad := makeHostile(int(float64(o.n)*o.hostile+0.5), n.ingress, n.dlq, n.originals)
	l := newLedger(plans, bad)
	w.ledger = l
	tr := newTraffic(rabbit.url, clientPrefix, n.ingress, n.dlq, l, log)
	defer tr.close()
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	stopConsumers := tr.runConsumers(trafficCtx, n.originals)
	defer stopConsumers()

	deadline := started.Add(o.duration)
	runCtx, cancelRun := context.WithDeadline(ctx, deadline)
	defer cancelRun()

	// The faults are spread over the publishing, so that each meets a busy pipeline: the
	// rate comes down when the schedule needs longer than -n at -rate would take.
	faultList := schedule(faultKinds, o.kills, o.seed)
	window := time.Duration(len(faultList)+1) * o.minGap
	for _, k := range faultList {
		window += o.estimate(k)
	}
	rate := o.rate
	if r := float64(o.n) / window.Seconds(); len(faultList) > 0 && r < rate {
		rate = r
		logf("publishing at %.1f/s instead of %.0f/s so that the %d faults (about %s) meet traffic", rate, o.rate, len(faultList), window.Round(time.Second))
	}
	produced := make(chan error, 1)
	go func() { produced <- tr.produce(runCtx, plans, bad, rate) }()
	faultsDone := make(chan []faultRecord, 1)
	go func() { faultsDone <- w.runFaults(runCtx, faultList, o.n) }()

	// Progress until everything is published, the faults are over and the pipeline drained.
	var faults []faultRecord
	var produceErr error
	producing, faulting := true, true
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	progress := func() {
		depth := "?"
		if d, err := queueDepth(rabbit.url, clientPrefix+"monitor", n.ingress); err == nil {
			depth = fmt.Sprint(d[n.ingress])
		}
		logf("published %d/%d · deliveries %d (dup %d) · taken %d · reports %d · dead letters %d · settled %d/%d · ingress %s",
			l.published.Load(), o.n, l.deliveries.Load(), l.duplicates.Load(), l.accepted.Load(), l.reports.Load(),
			l.envelopes.Load(), l.settled.Load(), o.n, depth)
	}
drain:
	for {
		select {
		case <-ctx.Done():
			return 2, fmt.Errorf("interrupted: %w", ctx.Err())
		case produceErr = <-produced:
			producing = false
			if produceErr != nil {
				logf("producer stopped: %v", produceErr)
			} else {
				logf("all %d first failures published", o.n)
			}
		case faults = <-faultsDone:
			faulting = false
			logf("fault schedule over: %d faults", len(faults))
		case <-tick.C:
			progress()
		case <-poll.C:
			if time.Now().After(deadline) {
				logf("the -duration bound (%s) is reached; counting what there is", o.duration)
				break drain
			}
			if producing || faulting {
				continue
			}
			// Drained: every message settled as the consumer sees it, the ingress queue empty
			// and a pause for stragglers (late reports, duplicates). Or nothing has moved for
			// a long while: what is not settled then never will be, and counts as lost.
			idle := time.Since(time.Unix(0, l.lastArrival.Load()))
			settled := l.settled.Load() == int64(o.n)
			if !settled && idle < max(time.Minute, 10*o.quietWindow) || settled && idle < 2*o.quietWindow+5*time.Second {
				continue
			}
			if d, err := queueDepth(rabbit.url, clientPrefix+"monitor", n.ingress); err == nil && d[n.ingress] == 0 {
				if !settled {
					logf("nothing arrived for %s with %d messages unsettled; counting", idle.Round(time.Second), int64(o.n)-l.settled.Load())
				}
				break drain
			}
		}
	}
	cancelRun()
	if producing {
		produceErr = <-produced
	}
	if faulting {
		faults = <-faultsDone
	}
	progress()

	// Count, asking Temporal directly (not through the proxies) for each message's outcome.
	logf("counting: asking Temporal for %d workflows", o.n)
	vctx, cancelVerify := context.WithTimeout(context.WithoutCancel(ctx), o.verifyTimeout)
	defer cancelVerify()
	tc, err := client.DialContext(vctx, client.Options{HostPort: temporal.hosts[0].Address, Namespace: temporal.namespace(), Logger: quietSDKLogger()})
	if err != nil {
		return 2, fmt.Errorf("connect to Temporal for the count: %w", err)
	}
	defer tc.Close()
	wid := func(r *record) string { return message.WorkflowID(r.queue, r.id) }
	ids := make([]string, 0, o.n)
	for _, r := range l.order {
		ids = append(ids, wid(r))
	}
	outcomes := fetchOutcomes(vctx, tc, ids, time.Now().Add(o.verifyTimeout/2), logf)
	runs, err := runsPerWorkflow(vctx, tc, temporal.namespace())
	if err != nil {
		logf("listing runs: %v (runs per message not counted)", err)
	}
	stopTraffic()
	stopConsumers()

	measure(l, faults)
	f, probs := judge(l, outcomes, runs, wid, o.maxRetries)
	for _, fr := range faults {
		if fr.Error != "" {
			f.FaultErrors++
		}
	}
	f.Faults = len(faults)
	for _, s := range w.workers {
		f.WorkerKills += s.kills
	}
	for _, s := range w.bridges {
		f.BridgeKills += s.kills
	}
	for _, fr := range faults {
		if fr.Error != "" {
			continue
		}
		switch fr.Kind {
		case faultTemporalRestart, faultTemporalHostKill:
			f.TemporalKills++
		case faultRabbitNodeKill:
			f.RabbitNodeKills++
		}
	}
	f.ProcessKills = f.WorkerKills + f.BridgeKills + f.TemporalKills + f.RabbitNodeKills

	rep := report{
		Commit: commit, Dirty: dirty,
		RunID: n.id, Command: commandLine(), Started: started, Elapsed: time.Since(started).Round(time.Second).String(),
		Temporal: temporal.describe(), RabbitMQ: rabbit.describe(), Machine: machineInfo(o.engine), Options: optionsJSON(o, faultKinds, rate), Figures: f, Faults: faults,
		ProduceError: errString(produceErr), RunDirectory: dir,
	}
	rep.Passed = f.Lost == 0 && f.Unexpected == 0 && f.Published == o.n
	rep.Problems = probs
	printReport(os.Stdout, rep)
	path, werr := writeReport(o.resultsDir, rep)
	if werr != nil {
		fmt.Fprintln(os.Stderr, "soak: write results:", werr)
	} else {
		fmt.Printf("results: %s\n", path)
	}
	passed = rep.Passed
	if !rep.Passed {
		return 1, nil
	}
	return 0, nil
}

func faultNames(kinds []string) string {
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, ",")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
