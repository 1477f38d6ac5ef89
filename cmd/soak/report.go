package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	sdklog "go.temporal.io/sdk/log"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// report is the JSON written under cmd/soak/results/.
type report struct {
	RunID    string    `json:"run_id"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Elapsed  string    `json:"elapsed"`
	Temporal string    `json:"temporal"` // the engine's server, and its hosts when several
	RabbitMQ string    `json:"rabbitmq"` // the machine's node or a cluster
	// Commit is the checkout's commit the soak and the service were built from, Dirty set
	// when it had uncommitted changes: the code the figures belong to.
	Commit       string         `json:"commit"`
	Dirty        bool           `json:"dirty"`
	Passed       bool           `json:"passed"`
	Machine      map[string]any `json:"machine"`
	Options      map[string]any `json:"options"`
	Figures      figures        `json:"figures"`
	Faults       []faultRecord  `json:"faults"`
	ProduceError string         `json:"produce_error,omitempty"`
	RunDirectory string         `json:"run_directory"`
	Problems     []problem      `json:"problems,omitempty"`
}

func printReport(w io.Writer, r report) {
	f := r.Figures
	fmt.Fprintf(w, "\nretry-scheduler soak %s: %d messages, %d process kills, %d faults, %s (%s; %s)\ncode: commit %s (dirty %t)\n\n", r.RunID, f.Messages, f.ProcessKills, f.Faults, r.Elapsed, r.Temporal, r.RabbitMQ, r.Commit, r.Dirty)
	row := func(label string, v any, note string) {
		fmt.Fprintf(w, "  %-36s %9v  %s\n", label, v, note)
	}
	fmt.Fprintln(w, "fault schedule (arrivals per second 10 s before / during / 10 s after; back: to half the rate before):")
	for _, fr := range r.Faults {
		status := fr.Detail
		if fr.Error != "" {
			status = "ERROR " + fr.Error
		}
		rec := fr.RecoveredAfter
		if rec == "" {
			rec = "-"
		}
		fmt.Fprintf(w, "  %s %-16s %6s  %5.1f %5.1f %5.1f /s  back %-5s  %s\n", fr.Start.Format("15:04:05"), fr.Kind,
			fr.End.Sub(fr.Start).Round(100*time.Millisecond), fr.RateBefore, fr.RateDuring, fr.RateAfter, rec, status)
	}
	fmt.Fprintln(w)
	row("messages published", fmt.Sprintf("%d/%d", f.Published, f.Messages), "")
	row("planned delivered / dead", fmt.Sprintf("%d / %d", f.ExpectDelivery, f.ExpectDead), "")
	row("delivered", f.Delivered, fmt.Sprintf("workflow delivered and the consumer took it (after 1/2/3 retries: %d/%d/%d)", f.DeliveredAfterRetry1, f.DeliveredAfterRetry2, f.DeliveredAfterRetry3))
	row("dead-lettered", f.DeadLettered, "envelope on the dead-letter queue")
	row("parked", f.Parked, "workflow dead, waiting for an operator")
	row("LOST", f.Lost, "neither delivered nor dead-lettered, or dead without an envelope")
	row("  in flight at the deadline", f.LostInFlight, "")
	row("  'delivered' but never taken", f.LostDeliveredNotTaken, "a failure report the workflow dropped")
	row("  no workflow", f.LostNoWorkflow, "")
	row("  dead without envelope", f.LostDeadNoEnvelope, "workflow dead, but no envelope on the dead-letter queue")
	row("  other", f.LostOther, "")
	row("UNEXPECTED", f.Unexpected, "sum of the rows below")
	row("  wrong outcome", f.WrongOutcome, "planned delivered but dead, or the reverse")
	row("  delivered more than attempts", f.OverDelivered, "more distinct retries than planned, or taken twice")
	row("  duplicates without the same key", f.KeyMismatch, "x-retry-key missing or not <message_id>:<x-retry-count>")
	row("  dead letters without full history", f.IncompleteDeadLetters, fmt.Sprintf("envelope attempts ≠ failures reported (%d with the history split across runs)", f.SplitHistoryDeadLetters))
	row("  attempts beyond max", f.BeyondMax, "")
	row("  payload changed", f.CorruptPayload, "")
	row("  unknown ids", f.Strangers, "")
	row("  bad reports dead-lettered wrongly", f.Hostile.Wrong, "another reason, or envelopes of more than one dlqId")
	row("bad reports", fmt.Sprintf("%d sent, %d dead-lettered (%d envelopes again, same dlqId), %d missing", f.Hostile.Sent, f.Hostile.DeadLettered, f.Hostile.DuplicateEnvelopes, f.Hostile.Missing), "aimed at the scheduler's queues or amq.*, over AMQP's limits, not JSON; missing ones count as lost")
	row("deliveries", f.Deliveries, "")
	row("duplicate deliveries (same key)", f.DuplicateDeliveries, fmt.Sprintf("on %d messages; allowed, dropped by the consumer", f.MessagesWithDups))
	row("duplicate envelopes (same dlqId)", f.DuplicateEnvelopes, "")
	row("failure reports", f.FailureReports, "confirmed reports of the consumer")
	row("messages with more than one run", f.MultiRunMessages, "a report arrived after a run had ended")
	row("process kills", f.ProcessKills, fmt.Sprintf("worker %d, bridge %d, Temporal %d, RabbitMQ node %d", f.WorkerKills, f.BridgeKills, f.TemporalKills, f.RabbitNodeKills))
	row("faults (errors)", fmt.Sprintf("%d (%d)", f.Faults, f.FaultErrors), "")
	if len(r.Problems) > 0 {
		fmt.Fprintf(w, "\nfirst problems (of %d):\n", len(r.Problems))
		for i, p := range r.Problems {
			if i == 20 {
				break
			}
			fmt.Fprintf(w, "  %s [%s] %s\n", p.MessageID, p.Check, p.Detail)
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s: lost %d, unexpected %d\n", verdict, f.Lost, f.Unexpected)
}

func writeReport(dir string, r report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if len(r.Problems) > 500 {
		r.Problems = r.Problems[:500]
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s-n%d.json", r.Started.Format("20060102-150405"), r.RunID, r.Figures.Messages))
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

func commandLine() string {
	return strings.TrimSpace("soak " + strings.Join(os.Args[1:], " "))
}

func optionsJSON(o options, faults []string, rate float64) map[string]any {
	return map[string]any{
		"n": o.n, "rate": o.rate, "effective_rate": round1(rate), "duration": o.duration.String(), "kills": o.kills, "faults": faults,
		"seed": o.seed, "workers": o.workers, "bridges": o.bridges, "rabbit_nodes": o.rabbitNodes, "temporal_hosts": o.temporalHosts, "delay": o.delay.String(), "quiet_window": o.quietWindow.String(),
		"max_retries": o.maxRetries, "breaker_failure_ratio": o.breakerRatio, "breaker_cooldown_max": o.breakerCooldownMax.String(), "latency": o.latency.String(), "fault_period": o.faultPeriod.String(),
		"min_gap": o.minGap.String(), "restart_delay": o.restartDelay.String(), "engine": string(o.engine),
	}
}

// machineInfo describes where the figures were measured.
func machineInfo(engine devserver.Engine) map[string]any {
	m := map[string]any{"cpus": runtime.NumCPU(), "go": runtime.Version(), "os": runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(b), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m["kernel"] = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("rabbitmqctl", "version").Output(); err == nil {
		m["rabbitmq"] = strings.TrimSpace(string(out))
	}
	if engine == devserver.EnginePostgres {
		m["temporal_server"] = devserver.ServerVersion
	} else if out, err := exec.Command(devserver.DefaultBinary(), "--version").Output(); err == nil {
		m["temporal_cli"] = strings.TrimSpace(string(out))
	}
	return m
}

func quietSDKLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}
