package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/checkout"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// report is the JSON written under cmd/bench/results and the source of the table.
type report struct {
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished"`
	Interrupted bool      `json:"interrupted,omitempty"`
	Note        string    `json:"note,omitempty"`
	Build       build     `json:"build"`
	Machine     machine   `json:"machine"`
	Settings    settings  `json:"settings"`
	Steps       []step    `json:"steps"`
	Summary     summary   `json:"summary"`
}

// build is the code a run measured: the checkout's commit and whether tracked files differed
// from it (a dirty run's figures belong to no commit).
type build struct {
	Commit string `json:"commit"`
	Dirty  bool   `json:"dirty"`
}

type machine struct {
	CPUModel    string `json:"cpu_model"`
	Cores       int    `json:"cores"`
	GoVersion   string `json:"go_version"`
	OS          string `json:"os"`
	TemporalCLI string `json:"temporal_cli"`
	// TemporalServer names the server the phases ran against (the engine's server).
	TemporalServer string `json:"temporal_server"`
	LoadAvgStart   string `json:"load_avg_start"`
	LoadAvgFinish  string `json:"load_avg_finish"`
}

type settings struct {
	// Engine is the Temporal server's engine: dev (the CLI's dev server, SQLite) or postgres.
	Engine string   `json:"engine"`
	Phases []string `json:"phases"`
	// Policy is the bench's traffic: the default policy or a fixed delay (DelayMs).
	Policy string `json:"policy"`
	// Flags are the flags this run was given: every setting that differs from the defaults,
	// with ServiceEnv, ABEnv and DynamicConfig.
	Flags        []string `json:"flags"`
	Steps        []int    `json:"steps_per_s"`
	StepSeconds  float64  `json:"step_seconds"`
	Rate         int      `json:"sustained_rate_per_s"`
	Seconds      float64  `json:"sustained_seconds"`
	BurstRate    int      `json:"burst_rate_per_s"`
	BurstSeconds float64  `json:"burst_seconds"`
	// MixedKneeSeconds is the length of the mixed phase's loads at the knee and twice it.
	MixedKneeSeconds float64 `json:"mixed_knee_seconds"`
	// OverloadRate is -overload-rate (0: twice the ladder's knee).
	OverloadRate    int     `json:"overload_rate_per_s,omitempty"`
	OverloadSeconds float64 `json:"overload_seconds"`
	DelayMs         float64 `json:"delay_ms"`
	QuietWindowMs   float64 `json:"quiet_window_ms"`
	P99TargetMs     float64 `json:"p99_target_ms"`
	MixedP99Ms      float64 `json:"mixed_p99_target_ms"`
	KeepUp          float64 `json:"keep_up"`
	// DynamicConfig is the dev server's: devserver.DynamicConfig, then -dynamic-config.
	DynamicConfig []string `json:"dynamic_config"`
	SQLitePragmas []string `json:"extra_sqlite_pragmas,omitempty"`
	ServiceEnv    []string `json:"service_env,omitempty"`
	ServiceLog    string   `json:"service_log_level"`
}

// summary is the run in a few numbers.
type summary struct {
	// CeilingRate is the highest ceiling step that passed; CeilingCapped says every step
	// passed, so the true ceiling is higher than the steps reach.
	CeilingRate   int  `json:"ceiling_rate_per_s"`
	CeilingCapped bool `json:"ceiling_capped,omitempty"`
	// PipelineRate is the highest ladder step that passed; without a ladder, the sustained
	// rate if it passed (a lower bound). PipelineSource says which.
	PipelineRate   int    `json:"pipeline_rate_per_s"`
	PipelineSource string `json:"pipeline_rate_source,omitempty"`
	// Ratio is PipelineRate / CeilingRate (0 when either is unknown).
	Ratio float64 `json:"ratio_pipeline_to_ceiling"`
	// Sustained and Burst repeat those phases' verdicts.
	SustainedPass *bool    `json:"sustained_pass,omitempty"`
	SplitPass     *bool    `json:"split_pass,omitempty"`
	BurstDrainS   *float64 `json:"burst_drain_seconds,omitempty"`
	BurstLost     *int     `json:"burst_lost,omitempty"`
	// MixedPass is the mixed phase's verdict at -rate (it is not a pipeline rate).
	MixedPass *bool `json:"mixed_pass,omitempty"`
	// Knee is the knee the overload, the burst and the mixed phase's further loads were
	// judged against (the highest passing ladder step, else half of -overload-rate).
	Knee *knee `json:"knee,omitempty"`
	// OverloadPass is the overload phase's verdict: every must-show passed.
	OverloadPass *bool `json:"overload_pass,omitempty"`
	// MustShows counts the steps' must-show lines by verdict (A steps only).
	MustShows *mustShowCount `json:"must_shows,omitempty"`
}

// mustShowCount counts must-show lines by verdict.
type mustShowCount struct {
	Pass int `json:"pass"`
	Fail int `json:"fail"`
	NA   int `json:"na"`
}

func newReport(c options) *report {
	commit, dirty := checkout.Describe()
	return &report{
		Started: time.Now().UTC(),
		Note:    c.Note,
		Build:   build{Commit: commit, Dirty: dirty},
		Machine: machine{
			CPUModel:       cpuModel(),
			Cores:          runtime.NumCPU(),
			GoVersion:      runtime.Version(),
			OS:             runtime.GOOS + "/" + runtime.GOARCH,
			TemporalCLI:    temporalVersion(c.TemporalCLI),
			TemporalServer: c.Engine.ServerName(),
			LoadAvgStart:   loadAvg(),
		},
		Settings: settings{
			Engine: string(c.Engine),
			Phases: c.Phases, Policy: c.Policy, Flags: c.Flags, Steps: c.Steps, StepSeconds: c.StepDuration.Seconds(),
			Rate: c.Rate, Seconds: c.Duration.Seconds(), BurstRate: c.BurstRate, BurstSeconds: c.BurstDuration.Seconds(),
			MixedKneeSeconds: c.MixedKneeDuration.Seconds(), OverloadRate: c.OverloadRate, OverloadSeconds: c.OverloadDuration.Seconds(),
			DelayMs: ms(c.Delays.nominal()), QuietWindowMs: ms(c.QuietWindow), P99TargetMs: ms(c.P99Target), MixedP99Ms: ms(c.MixedP99Target), KeepUp: c.KeepUp,
			DynamicConfig: append(slices.Clone(devserver.DynamicConfig), c.DynamicConfig...), SQLitePragmas: c.SQLitePragmas, ServiceEnv: c.ServiceEnv, ServiceLog: c.ServiceLogLevel,
		},
	}
}

// finish fills the summary.
func (r *report) finish(interrupted bool) {
	r.Finished = time.Now().UTC()
	r.Interrupted = interrupted
	r.Machine.LoadAvgFinish = loadAvg()
	sum := &r.Summary
	var ceilingSteps, ladderSteps int
	allPassed := true
	for _, s := range r.Steps {
		s := s
		switch s.Phase {
		case phaseCeiling:
			ceilingSteps++
			allPassed = allPassed && s.Pass
			if s.Pass && s.Rate > sum.CeilingRate {
				sum.CeilingRate = s.Rate
			}
		case phaseLadder:
			ladderSteps++
			if s.Pass && s.Rate > sum.PipelineRate {
				sum.PipelineRate, sum.PipelineSource = s.Rate, phaseLadder
			}
		case phaseSustained:
			sum.SustainedPass = &s.Pass
			if ladderSteps == 0 && s.Pass {
				sum.PipelineRate, sum.PipelineSource = s.Rate, "sustained (lower bound)"
			}
		case phaseSplit:
			sum.SplitPass = &s.Pass
		case phaseBurst:
			sum.BurstDrainS, sum.BurstLost = &s.DrainSeconds, &s.Lost
		case phaseMixed:
			if s.LoadRole == "" {
				sum.MixedPass = &s.Pass
			}
		case phaseOverload:
			sum.OverloadPass = &s.Pass
		}
		if strings.HasSuffix(s.Phase, "/B") {
			continue
		}
		for _, m := range s.MustShow {
			if sum.MustShows == nil {
				sum.MustShows = &mustShowCount{}
			}
			switch {
			case m.NA:
				sum.MustShows.NA++
			case m.Pass:
				sum.MustShows.Pass++
			default:
				sum.MustShows.Fail++
			}
		}
	}
	if k := kneeOf(r.Steps, r.Settings.OverloadRate); k.Rate > 0 {
		sum.Knee = &k
	}
	sum.CeilingCapped = ceilingSteps > 0 && allPassed && ceilingSteps == len(r.Settings.Steps)
	if sum.CeilingRate > 0 && sum.PipelineRate > 0 {
		sum.Ratio = float64(int(float64(sum.PipelineRate)/float64(sum.CeilingRate)*100+0.5)) / 100
	}
}

// printTable writes the human-readable result.
func (r *report) printTable(w io.Writer) {
	m := r.Machine
	server := m.TemporalServer
	if r.Settings.Engine != "postgres" {
		server += " (CLI " + m.TemporalCLI + ")"
	}
	commit := r.Build.Commit
	if r.Build.Dirty {
		commit += " (dirty: uncommitted changes)"
	}
	fmt.Fprintf(w, "\nretry-scheduler bench %s at %s, engine %s: %s; %s, %d cores, %s; load avg %s → %s\n",
		r.Started.Format(time.RFC3339), commit, r.Settings.Engine, server, m.CPUModel, m.Cores, m.GoVersion, m.LoadAvgStart, m.LoadAvgFinish)
	scheduled := "the default policy's delay for that message and attempt (backoff + its jitter)"
	if r.Settings.Policy == policyFixed {
		scheduled = time.Duration(r.Settings.DelayMs * float64(time.Millisecond)).String()
	}
	fmt.Fprintf(w, "lateness = completion − (send or failure report + %s); pass = p99 ≤ %s ms, throughput ≥ %.0f%% of rate, nothing lost\n\n",
		scheduled, fmtF(r.Settings.P99TargetMs), r.Settings.KeepUp*100)
	db := slices.ContainsFunc(r.Steps, func(s step) bool { _, ok := s.CPU["db"]; return ok })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "phase\trate/s\tload s\tsent\tdone\tthru/s\tp50 ms\tp99 ms\tmax ms\tdrain s\tlost\tdup\tsrv cpu ms/retry\t"
	if db {
		header += "db cpu ms/retry\t"
	}
	fmt.Fprintln(tw, header+"wkr cpu ms/retry\tothers cores\tev/wft/vis /retry\tdb ops/retry\tpass\t")
	for _, s := range r.Steps {
		pass := "yes"
		if !s.Pass {
			pass = "no: " + s.Why
		}
		row := fmt.Sprintf("%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t",
			s.label(), s.Rate, fmtF(s.Seconds), s.Sent, s.Completed, fmtF(s.Throughput),
			fmtF(s.Lateness.P50), fmtF(s.Lateness.P99), fmtF(s.Lateness.Max), fmtF(s.DrainSeconds),
			s.Lost, dupCell(s), cpuCell(s, "server"))
		if db {
			row += cpuCell(s, "db") + "\t"
		}
		row += fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t", serviceCPUCell(s), fmtF(s.OthersBusyCores), engineCell(s), dbOpsCell(s), pass)
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, s := range r.Steps {
		if s.Phase == phaseBurst {
			fmt.Fprintf(w, "burst: lateness during the load p50/p99/max %s/%s/%s ms (%d), after it %s/%s/%s ms (%d); peak ingress backlog %d; served %s/s; drained %s s after the last scheduled time\n",
				fmtF(s.LatenessDuring.P50), fmtF(s.LatenessDuring.P99), fmtF(s.LatenessDuring.Max), s.LatenessDuring.Count,
				fmtF(s.LatenessAfter.P50), fmtF(s.LatenessAfter.P99), fmtF(s.LatenessAfter.Max), s.LatenessAfter.Count,
				s.PeakIngressBacklog, fmtF(s.ServedRate), fmtF(s.DrainSeconds))
		}
		if m := s.Mixed; m != nil && strings.HasPrefix(s.Phase, phaseMixed) {
			fmt.Fprintf(w, "%s %d/s: %s\n", s.label(), s.Rate, mixedLine(s, m))
		}
		if o := s.Overload; o != nil {
			fmt.Fprintln(w, overloadLine(s, o))
			if o.Probe != nil {
				fmt.Fprintln(w, probeLine(s.label(), o.Probe))
			}
		}
		if s.BreakerOpens > 0 {
			fmt.Fprintf(w, "%s %d/s: the circuit breakers opened %d times (retries they held are late on purpose)\n", s.Phase, s.Rate, s.BreakerOpens)
		}
	}
	printMustShows(w, r.Steps)
	sum := r.Summary
	ceiling := fmt.Sprintf("%d/s", sum.CeilingRate)
	if sum.CeilingCapped {
		ceiling = "≥ " + ceiling + " (every step passed)"
	}
	if sum.CeilingRate == 0 {
		ceiling = "no passing step (or not measured)"
	}
	pipeline := "no passing step (or not measured)"
	if sum.PipelineRate > 0 {
		pipeline = fmt.Sprintf("%d/s (%s)", sum.PipelineRate, sum.PipelineSource)
	}
	ratio := "n/a"
	if sum.Ratio > 0 {
		ratio = fmt.Sprintf("%.2f", sum.Ratio)
	}
	fmt.Fprintf(w, "ceiling (bare engine): %s; pipeline: %s; ratio pipeline/ceiling: %s\n", ceiling, pipeline, ratio)
	if k := sum.Knee; k != nil {
		fmt.Fprintf(w, "knee (what the overload doubles and the burst, overload and mixed loads at the knee are judged against): %d/s (%s)\n", k.Rate, k.Source)
	}
	fmt.Fprintln(w, "others cores: CPU used meanwhile by everything else (broker included), in cores; above ~0.3 the run was noisy")
	fmt.Fprintln(w, "wkr cpu: the bench process for ceiling rows (probe worker + starter), the service's processes for the others (split: bridge and worker apart, no eager start)")
	fmt.Fprintln(w, "ev/wft/vis: history events, completed workflow tasks (from a sample of histories) and visibility writes (server metrics) per retry; db ops: the server's persistence requests per retry (idle work included)")
	if slices.ContainsFunc(r.Steps, func(s step) bool { _, ok := s.CPU["db"]; return ok }) {
		fmt.Fprintln(w, "db cpu: the PostgreSQL backends connected to the step's two databases (shared background processes count under others)")
	}
}

// printMustShows writes every step's must-show lines, PASS, FAIL or N/A, after a heading.
func printMustShows(w io.Writer, steps []step) {
	heading := false
	for _, s := range steps {
		for _, m := range s.MustShow {
			if !heading {
				fmt.Fprintln(w, "must-show (judged here, not failing the run):")
				heading = true
			}
			fmt.Fprintf(w, "  %-4s %s %d/s: %s: %s\n", m.verdict(), s.label(), s.Rate, m.What, m.Detail)
		}
	}
}

// mixedLine is the mixed phase's account under the table.
func mixedLine(s step, m *mixedStats) string {
	lat := func(kind string) string {
		l := m.Lateness[kind]
		return fmt.Sprintf("%s %s/%s/%s ms (%d)", strings.ReplaceAll(kind, "_", " "), fmtF(l.P50), fmtF(l.P99), fmtF(l.Max), l.Count)
	}
	return fmt.Sprintf("%d messages (%d delivered at once, %d re-failed at once, %d after the window, %d exhausting); %d retries served at %s/s; lateness p50/p99/max %s, %s, %s; dead-lettered %d exhausted, %d unexpected; %d ended, %d lost (pass: p99 over every retry and nothing lost; throughput is not judged)",
		s.Sent, m.Fates[fateDelivered.String()], m.Fates[fateRefailNow.String()], m.Fates[fateRefailLate.String()], m.Fates[fateExhaust.String()],
		s.Completed, fmtF(s.ServedRate), lat("first"), lat("later_same_run"), lat("later_new_run"),
		m.DeadExhausted, m.DeadUnexpected+m.DeadWrongReason, m.Ended, s.Lost)
}

func dupCell(s step) string {
	if s.DuplicatesOtherKey > 0 {
		return fmt.Sprintf("%d+%d!", s.DuplicatesSameKey, s.DuplicatesOtherKey)
	}
	return fmt.Sprint(s.DuplicatesSameKey)
}

// serviceCPUCell is the service's CPU per retry: its one process, or bridge and worker summed
// in the split layout.
func serviceCPUCell(s step) string {
	w, ok := s.CPUPerRetry["worker"]
	if !ok {
		return "-"
	}
	if b, ok := s.CPUPerRetry["bridge"]; ok {
		return fmtF(round(w+b)) + " (" + fmtF(b) + " bridge)"
	}
	return fmtF(w)
}

func cpuCell(s step, k string) string {
	v, ok := s.CPUPerRetry[k]
	if !ok {
		return "-"
	}
	return fmtF(v)
}

func fmtF(f float64) string {
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%.1f", f)
}

// write stores the report as <dir>/<UTC start time>.json.
func (r *report) write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("results dir: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode results: %w", err)
	}
	path := filepath.Join(dir, r.Started.Format("20060102T150405Z")+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write results: %w", err)
	}
	return path, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// temporalVersion is the CLI's `--version` line (it names the embedded server's version).
func temporalVersion(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "temporal version "))
}
