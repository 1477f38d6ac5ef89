package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// Fault kinds, as -faults names them.
const (
	faultWorkerKill      = "worker-kill"      // SIGKILL one worker, start it again
	faultBridgeKill      = "bridge-kill"      // SIGKILL the bridge, start it again
	faultTemporalRestart = "temporal-restart" // SIGKILL the Temporal server, restart it on its file store or databases
	faultCloseConns      = "close-conns"      // rabbitmqctl close_connection on every service connection
	faultRabbitRestart   = "rabbit-restart"   // rabbitmqctl stop_app; start_app
	faultLatency         = "latency"          // added latency on every service link for a period
	faultCutConfirms     = "cut-confirms"     // cut worker AMQP connections as the broker sends a publisher confirm
	faultCutAMQP         = "cut-amqp"         // reset every service AMQP connection at once
	faultCutTemporal     = "cut-temporal"     // partition bridges↔Temporal for a period

	// On a cluster (-rabbit-nodes 3, -temporal-hosts 2), in place of the broker's and the
	// server's restarts:
	faultRabbitNodeKill   = "rabbit-node-kill"   // SIGKILL the node leading the ingress queue, start it again
	faultTemporalHostKill = "temporal-host-kill" // SIGKILL one Temporal host, start it again
)

var allFaults = []string{faultWorkerKill, faultBridgeKill, faultTemporalRestart, faultCloseConns,
	faultRabbitRestart, faultLatency, faultCutConfirms, faultCutAMQP, faultCutTemporal,
	faultRabbitNodeKill, faultTemporalHostKill}

// faultKinds is the kinds -faults names ("all": every kind the run's shape has).
func (o options) faultKinds() ([]string, error) {
	// What each kind needs: the machine's single node (restarted in place), a cluster (a
	// node can be lost), one Temporal server (restarted), several (one can be lost).
	fits := func(kind string) error {
		switch {
		case kind == faultRabbitRestart && o.rabbitNodes > 1:
			return errors.New("needs the machine's RabbitMQ (-rabbit-nodes 1); a cluster has rabbit-node-kill")
		case kind == faultRabbitNodeKill && o.rabbitNodes < 3:
			return errors.New("needs a RabbitMQ cluster (-rabbit-nodes 3)")
		case kind == faultTemporalRestart && o.temporalHosts > 1:
			return errors.New("needs one Temporal server (-temporal-hosts 1); several have temporal-host-kill")
		case kind == faultTemporalHostKill && o.temporalHosts < 2:
			return errors.New("needs several Temporal hosts (-temporal-hosts 2)")
		}
		return nil
	}
	switch o.faults {
	case "", "all":
		return slices.DeleteFunc(slices.Clone(allFaults), func(k string) bool { return fits(k) != nil }), nil
	case "none":
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(o.faults, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allFaults, f) {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(allFaults, ", "))
		}
		if err := fits(f); err != nil {
			return nil, fmt.Errorf("fault %s %w", f, err)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// schedule is the ordered list of faults: kills process kills (worker, bridge and dev
// server), plus the other enabled kinds, shuffled by the seed.
func schedule(enabled []string, kills int, seed uint64) []string {
	on := func(k string) bool { return slices.Contains(enabled, k) }
	var list []string
	add := func(kind string, n int) {
		if on(kind) {
			for range n {
				list = append(list, kind)
			}
		}
	}
	temporalKind := faultTemporalRestart
	if on(faultTemporalHostKill) {
		temporalKind = faultTemporalHostKill
	}
	temporal, bridge := 0, 0
	if on(temporalKind) && kills > 0 {
		temporal = 1
		if kills >= 12 {
			temporal = 2
		}
	}
	if on(faultBridgeKill) && kills-temporal > 0 {
		bridge = max(1, kills/6)
	}
	workers := kills - temporal - bridge
	if !on(faultWorkerKill) {
		workers = 0
	}
	add(temporalKind, temporal)
	add(faultBridgeKill, bridge)
	add(faultWorkerKill, workers)
	// The other kinds: one each on a short run, more on a long one.
	more := 1
	if kills >= 12 {
		more = 2
	}
	add(faultCloseConns, more)
	add(faultRabbitRestart, 1)
	add(faultRabbitNodeKill, more)
	add(faultLatency, more)
	add(faultCutConfirms, more+1)
	add(faultCutAMQP, 1)
	add(faultCutTemporal, more)

	r := rand.New(rand.NewPCG(seed, 0x50a4))
	r.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	return list
}

// faultRecord is what happened in one fault, and how the pipeline came back.
type faultRecord struct {
	Kind   string    `json:"kind"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Detail string    `json:"detail,omitempty"`
	Error  string    `json:"error,omitempty"`
	// RateBefore, RateDuring and RateAfter are arrivals (deliveries on the original queues
	// and dead letters) per second in the 10 s before the fault, while it lasted, and in the
	// 10 s after it.
	RateBefore float64 `json:"rate_before"`
	RateDuring float64 `json:"rate_during"`
	RateAfter  float64 `json:"rate_after"`
	// RecoveredAfter is how long after the fault's end the rate was back at half of
	// RateBefore (to the second).
	RecoveredAfter string `json:"recovered_after,omitempty"`
}

// world is what the faults act on.
type world struct {
	workers, bridges []*service
	temporal         *temporalEnv
	rabbit           *rabbitEnv
	// The proxies of the service's connections: the workers' and the bridges' AMQP, the
	// workers' and the bridges' Temporal gRPC.
	workerAMQP, bridgeAMQP         *proxyGroup
	workerTemporal, bridgeTemporal *proxyGroup
	ingress                        string // the ingress queue, whose leader rabbit-node-kill kills
	svcConnPrefix                  string
	ledger                         *ledger
	opts                           options
	logf                           func(format string, args ...any)
}

func (w *world) proxies() []*proxyGroup {
	return []*proxyGroup{w.workerAMQP, w.bridgeAMQP, w.workerTemporal, w.bridgeTemporal}
}

// restart kills s with SIGKILL, waits a moment and starts it again, then waits until it is
// ready (bounded; a slow start is recorded, not fatal).
func (w *world) restart(ctx context.Context, s *service) (string, error) {
	if err := s.kill(); err != nil {
		return "", err
	}
	sleep(ctx, w.opts.restartDelay)
	if err := s.start(); err != nil {
		return "", err
	}
	t0 := time.Now()
	if err := s.waitReady(ctx, 90*time.Second); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s killed, ready again %s after restart", s.name, time.Since(t0).Round(time.Millisecond)), nil
}

// restartTemporal kills a Temporal server (one host of several, or the only one) with
// SIGKILL and starts it again on its store; on several hosts, the others take its shards
// meanwhile.
func (w *world) restartTemporal(ctx context.Context, h *devserver.Server) (string, error) {
	if err := h.Kill(); err != nil {
		return "", err
	}
	sleep(ctx, w.opts.restartDelay)
	t0 := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := h.Restart(rctx); err != nil {
		return "", err
	}
	what := h.Engine.ServerName()
	if len(w.temporal.hosts) > 1 {
		what = fmt.Sprintf("%s host at %s", what, h.Address)
	}
	return fmt.Sprintf("%s SIGKILLed; answering again %s after restart", what, time.Since(t0).Round(time.Millisecond)), nil
}

// killIngressLeader kills the RabbitMQ node that leads the ingress queue (a crash: the
// bridges consuming through it lose their connection, the queue elects another leader),
// waits until another node leads it, and starts the node again.
func (w *world) killIngressLeader(ctx context.Context) (string, error) {
	c := w.rabbit.cluster
	leader, err := c.QueueLeader(w.ingress)
	if err != nil {
		return "", err
	}
	if err := leader.Kill(); err != nil {
		return "", err
	}
	killed := time.Now()
	moved := "no new leader seen within 60s"
	for time.Since(killed) < time.Minute && ctx.Err() == nil {
		if l, err := c.QueueLeader(w.ingress); err == nil && l != leader {
			moved = fmt.Sprintf("%s leads it %s after the kill", l.Name, time.Since(killed).Round(100*time.Millisecond))
			break
		}
		sleep(ctx, 500*time.Millisecond) // each rabbitmqctl call boots an Erlang VM: poll slowly
	}
	sleep(ctx, w.opts.restartDelay)
	t0 := time.Now()
	if err := leader.Restart(); err != nil {
		return "", fmt.Errorf("%s: %w", moved, err)
	}
	return fmt.Sprintf("%s (leader of the ingress queue) SIGKILLed; %s; back in the cluster %s after restart",
		leader.Name, moved, time.Since(t0).Round(100*time.Millisecond)), nil
}

// inject runs one fault to its end.
func (w *world) inject(ctx context.Context, kind string, n int) faultRecord {
	rec := faultRecord{Kind: kind, Start: time.Now()}
	var detail string
	var err error
	switch kind {
	case faultWorkerKill:
		detail, err = w.restart(ctx, w.workers[n%len(w.workers)])
	case faultBridgeKill:
		detail, err = w.restart(ctx, w.bridges[n%len(w.bridges)])
	case faultTemporalRestart, faultTemporalHostKill:
		detail, err = w.restartTemporal(ctx, w.temporal.hosts[n%len(w.temporal.hosts)])
	case faultCloseConns:
		var closed int
		closed, err = w.rabbit.closeConnections(ctx, w.svcConnPrefix, "soak: forced close")
		detail = fmt.Sprintf("%d connections named %s* closed by the broker", closed, w.svcConnPrefix)
	case faultRabbitRestart:
		var away time.Duration
		away, err = restartRabbit(ctx, w.rabbit.local)
		detail = fmt.Sprintf("stop_app/start_app took %s", away.Round(time.Millisecond))
	case faultRabbitNodeKill:
		detail, err = w.killIngressLeader(ctx)
	case faultLatency:
		for _, p := range w.proxies() {
			p.setLatency(w.opts.latency)
		}
		sleep(ctx, w.opts.faultPeriod)
		for _, p := range w.proxies() {
			p.setLatency(0)
		}
		detail = fmt.Sprintf("+%s each way on every service link for %s", w.opts.latency, w.opts.faultPeriod)
	case faultCutConfirms:
		before := w.workerAMQP.confirmsDropped()
		left := w.workerAMQP.armConfirmCuts(2, w.opts.faultPeriod, ctx.Done())
		detail = fmt.Sprintf("%d worker connections cut as a publisher confirm came back (confirm dropped); %d cuts unused",
			w.workerAMQP.confirmsDropped()-before, left)
	case faultCutAMQP:
		n := w.workerAMQP.cutAll() + w.bridgeAMQP.cutAll()
		detail = fmt.Sprintf("%d AMQP connections reset", n)
	case faultCutTemporal:
		n := w.bridgeTemporal.partition()
		sleep(ctx, w.opts.faultPeriod)
		w.bridgeTemporal.heal()
		detail = fmt.Sprintf("bridges↔Temporal partitioned for %s (%d connections reset, new ones refused)", w.opts.faultPeriod, n)
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	rec.End = time.Now()
	rec.Detail = detail
	if err != nil {
		rec.Error = err.Error()
	}
	return rec
}

// runFaults injects the schedule, fault k once k/(len+1) of the messages are published and
// at least minGap after the previous fault ended, so that faults meet a busy pipeline.
func (w *world) runFaults(ctx context.Context, list []string, total int) []faultRecord {
	var recs []faultRecord
	kinds := map[string]int{}
	lastEnd := time.Now()
	for k, kind := range list {
		threshold := int64(float64(total) * float64(k+1) / float64(len(list)+1))
		for w.ledger.published.Load() < threshold || time.Since(lastEnd) < w.opts.minGap {
			if !sleep(ctx, 100*time.Millisecond) {
				return recs
			}
		}
		w.logf("fault %d/%d: %s", k+1, len(list), kind)
		rec := w.inject(ctx, kind, kinds[kind])
		kinds[kind]++
		if rec.Error != "" {
			w.logf("  %s: error: %s", kind, rec.Error)
		} else {
			w.logf("  %s: %s", kind, rec.Detail)
		}
		recs = append(recs, rec)
		lastEnd = time.Now()
		if ctx.Err() != nil {
			break
		}
	}
	return recs
}

// measure fills in the pipeline's pulse around each fault: arrivals per second in the 10 s
// before it, while it lasted and in the 10 s after, and how long after its end the pulse
// was back at half its earlier rate.
func measure(l *ledger, recs []faultRecord) {
	for i := range recs {
		r := &recs[i]
		r.RateBefore = round1(l.rate(r.Start.Add(-10*time.Second), r.Start))
		r.RateDuring = round1(l.rate(r.Start, r.End))
		r.RateAfter = round1(l.rate(r.End, r.End.Add(10*time.Second)))
		if r.RateBefore > 0 {
			if d := l.recovery(r.End, r.RateBefore, time.Minute); d >= 0 {
				r.RecoveredAfter = d.String()
			} else {
				r.RecoveredAfter = "> 1m"
			}
		}
	}
}

func round1(f float64) float64 { return float64(int(f*10+0.5)) / 10 }

// estimate is roughly how long a fault takes, to spread the schedule over the traffic.
func (o options) estimate(kind string) time.Duration {
	switch kind {
	case faultWorkerKill, faultBridgeKill:
		return o.restartDelay + time.Second
	case faultTemporalRestart, faultTemporalHostKill:
		return o.restartDelay + 3*time.Second
	case faultRabbitRestart:
		return 6 * time.Second
	case faultRabbitNodeKill:
		return o.restartDelay + 15*time.Second
	case faultLatency, faultCutTemporal, faultCutConfirms:
		return o.faultPeriod
	default:
		return time.Second
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
