package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/worker"
)

// probeWorkflowName is the bare-engine workflow: start → sleep → one local activity → done.
const probeWorkflowName = "BenchProbeWorkflow"

// probeInput names the probe's step and sequence number, which its activity reports.
type probeInput struct {
	Step  string        `json:"step"`
	Seq   int           `json:"seq"`
	Delay time.Duration `json:"delay"`
}

// probe is the bare engine: the least a retry can be on Temporal (one durable timer and one
// local activity), without the product's search attributes, quiet window and AMQP hops. Its
// activity records when it ran in the step's tracker.
type probe struct {
	mu    sync.Mutex
	steps map[string]*tracker
}

// Workflow sleeps, then runs the local activity once.
func (p *probe) Workflow(ctx workflow.Context, in probeInput) error {
	if in.Delay > 0 {
		if err := workflow.Sleep(ctx, in.Delay); err != nil {
			return err
		}
	}
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteLocalActivity(ctx, p.Touch, in.Step, in.Seq).Get(ctx, nil)
}

// Touch is the local activity: it records the time it started, and does nothing else.
func (p *probe) Touch(_ context.Context, step string, seq int) error {
	at := time.Now()
	p.mu.Lock()
	t := p.steps[step]
	p.mu.Unlock()
	if t != nil {
		t.arrived(seq, at, "")
	}
	return nil
}

// runCeiling finds the bare engine's ceiling: the probe started with eager start at each rate
// of c.Steps, against a dev server of its own, with a worker in this process on the service's
// worker settings (worker.SDKOptions).
func runCeiling(ctx context.Context, c options, env *environment) ([]step, error) {
	srv, err := env.startServer(ctx)
	if err != nil {
		return nil, err
	}
	defer env.stopServer(srv)

	tc, err := client.DialContext(ctx, client.Options{HostPort: srv.Address, Namespace: srv.Namespace, Logger: quietSDKLogger()})
	if err != nil {
		return nil, fmt.Errorf("ceiling: connect to temporal at %s: %w", srv.Address, err)
	}
	defer tc.Close()
	taskQueue := env.prefix + "-probe"
	p := &probe{steps: map[string]*tracker{}}
	w := sdkworker.New(tc, taskQueue, worker.SDKOptions(worker.Options{TaskQueue: taskQueue}))
	w.RegisterWorkflowWithOptions(p.Workflow, workflow.RegisterOptions{Name: probeWorkflowName})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("ceiling: start worker: %w", err)
	}
	defer w.Stop()

	var out []step
	var failing failStreak
	for _, rate := range c.Steps {
		if ctx.Err() != nil {
			break
		}
		name := "ceiling-" + strconv.Itoa(rate)
		t := newTracker(c.Delays.nominal(), func(seq int) time.Duration {
			return c.Delays.of(probeWorkflowID(name, seq, env.prefix), 1)
		})
		p.mu.Lock()
		p.steps[name] = t
		p.mu.Unlock()
		cpu := newCPUMeter(map[string]int{"server": srv.Pid(), "worker": os.Getpid()}, srv.cpuGroups())
		engine := newEngineMeter(ctx, srv.metricsURL)

		start, end := pace(ctx, rate, c.StepDuration, c.Publishers, func(ctx context.Context, seq int) {
			opts := client.StartWorkflowOptions{
				ID:               probeWorkflowID(name, seq, env.prefix),
				TaskQueue:        taskQueue,
				EnableEagerStart: true,
			}
			// The same delay as the service would wait for a message of this workflow ID.
			delay := c.Delays.of(opts.ID, 1)
			in := probeInput{Step: name, Seq: seq, Delay: delay}
			if c.ProbeStartDelay {
				// The delay as the start's backoff: one workflow task instead of two, no eager start.
				opts.EnableEagerStart, opts.StartDelay, in.Delay = false, delay, 0
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			at := time.Now()
			if _, err := tc.ExecuteWorkflow(sctx, opts, probeWorkflowName, in); err != nil {
				t.markError()
				env.log.Debug("start probe", "error", err)
				return
			}
			t.markSent(seq, at)
		})
		t.waitAll(ctx, c.DrainTimeout, c.Delays.nominal()+c.DrainLimit)
		// Let the last workflows complete (their task after the activity) before reading the CPU.
		sleep(ctx, 500*time.Millisecond)

		s := step{Phase: phaseCeiling, Rate: rate}
		cpu.record(&s)
		engine.stop(ctx)
		t.fill(&s, start, end)
		s.Engine = engine.work(s.Completed)
		s.Engine.addHistory(ctx, srv, t.sample(func(seq int) string { return probeWorkflowID(name, seq, env.prefix) }))
		perRetry(&s)
		judge(&s, c)
		env.progress(s)
		out = append(out, s)
		if failing.see(s.Pass) && c.StopOnFail {
			break
		}
		// Settle so that one step's tail does not load the next.
		sleep(ctx, time.Second)
	}
	return out, nil
}

// probeWorkflowID is the ID of the probe workflow seq of a ceiling step.
func probeWorkflowID(step string, seq int, prefix string) string {
	return step + "-" + strconv.Itoa(seq) + "-" + prefix
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
