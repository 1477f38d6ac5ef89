package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/broker/brokertest"
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
	faultCutTemporal     = "cut-temporal"     // partition bridge↔Temporal for a period
)

var allFaults = []string{faultWorkerKill, faultBridgeKill, faultTemporalRestart, faultCloseConns,
	faultRabbitRestart, faultLatency, faultCutConfirms, faultCutAMQP, faultCutTemporal}

// parseFaults reads a comma-separated list ("all" for every kind).
func parseFaults(s string) ([]string, error) {
	if s == "" || s == "all" {
		return allFaults, nil
	}
	if s == "none" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allFaults, f) {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(allFaults, ", "))
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
	temporal, bridge := 0, 0
	if on(faultTemporalRestart) && kills > 0 {
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
	add(faultTemporalRestart, temporal)
	add(faultBridgeKill, bridge)
	add(faultWorkerKill, workers)
	// The other kinds: one each on a short run, more on a long one.
	more := 1
	if kills >= 12 {
		more = 2
	}
	add(faultCloseConns, more)
	add(faultRabbitRestart, 1)
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
	workers  []*service
	bridge   *service
	temporal *devserver.Server
	// amqpProxies carry the service's AMQP connections (workers first, then bridge);
	// temporalProxies its Temporal connections (workers, bridge).
	workerAMQP, bridgeAMQP         *proxy
	workerTemporal, bridgeTemporal *proxy
	rabbitAddr                     string
	svcConnPrefix                  string
	ledger                         *ledger
	opts                           options
	logf                           func(format string, args ...any)
}

func (w *world) proxies() []*proxy {
	return []*proxy{w.workerAMQP, w.bridgeAMQP, w.workerTemporal, w.bridgeTemporal}
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

// inject runs one fault to its end.
func (w *world) inject(ctx context.Context, kind string, n int) faultRecord {
	rec := faultRecord{Kind: kind, Start: time.Now()}
	var detail string
	var err error
	switch kind {
	case faultWorkerKill:
		detail, err = w.restart(ctx, w.workers[n%len(w.workers)])
	case faultBridgeKill:
		detail, err = w.restart(ctx, w.bridge)
	case faultTemporalRestart:
		if err = w.temporal.Kill(); err == nil {
			sleep(ctx, w.opts.restartDelay)
			t0 := time.Now()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			err = w.temporal.Restart(rctx)
			cancel()
			detail = fmt.Sprintf("%s SIGKILLed; answering again %s after restart", w.temporal.Engine.ServerName(), time.Since(t0).Round(time.Millisecond))
		}
	case faultCloseConns:
		var closed int
		closed, err = brokertest.CloseConnections(ctx, w.svcConnPrefix, "soak: forced close")
		detail = fmt.Sprintf("%d connections named %s* closed by the broker", closed, w.svcConnPrefix)
	case faultRabbitRestart:
		var away time.Duration
		away, err = restartRabbit(ctx, w.rabbitAddr)
		detail = fmt.Sprintf("stop_app/start_app took %s", away.Round(time.Millisecond))
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
		before := w.workerAMQP.confirmsDropped.Load()
		left := w.workerAMQP.armConfirmCuts(2, w.opts.faultPeriod, ctx.Done())
		detail = fmt.Sprintf("%d worker connections cut as a publisher confirm came back (confirm dropped); %d cuts unused",
			w.workerAMQP.confirmsDropped.Load()-before, left)
	case faultCutAMQP:
		n := w.workerAMQP.cutAll() + w.bridgeAMQP.cutAll()
		detail = fmt.Sprintf("%d AMQP connections reset", n)
	case faultCutTemporal:
		n := w.bridgeTemporal.partition()
		sleep(ctx, w.opts.faultPeriod)
		w.bridgeTemporal.heal()
		detail = fmt.Sprintf("bridge↔Temporal partitioned for %s (%d connections reset, new ones refused)", w.opts.faultPeriod, n)
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
	case faultTemporalRestart:
		return o.restartDelay + 3*time.Second
	case faultRabbitRestart:
		return 6 * time.Second
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
