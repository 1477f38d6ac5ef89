package main

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// The must-shows' bounds: what an overload, a burst and the mixed phase at the knee must show.
const (
	// overloadServedFloor: an overloaded pipeline serves at least this × the knee, while the
	// load lasts and through its drain (it does not fall below what it holds unloaded).
	overloadServedFloor = 0.9
	// overloadEventsTolerance: an overloaded retry costs the engine as many history events as
	// one at the knee, within this fraction (no timed-out tasks, no extra replays).
	overloadEventsTolerance = 0.05
	// opsProbeP99Bound: an operator's read and retry-now answer within this at p99 under
	// overload.
	opsProbeP99Bound = time.Second
	// burstDrainFactor: a burst of n messages is drained within this × n ÷ knee of its start.
	burstDrainFactor = 1.15
)

// Load roles: what a load's rate is, relative to the run's knee.
const (
	roleKnee      = "knee"
	roleTwiceKnee = "twice_knee"
)

// knee is the run's knee: the highest rate the ladder held (p99 lateness ≤ -p99-target,
// throughput kept up, nothing lost), which the overload doubles and against which the
// overload, the burst and the mixed phase's further loads are judged. Without a ladder in
// the run, half of -overload-rate stands for it.
type knee struct {
	Rate   int    `json:"rate_per_s"`
	Source string `json:"source"`
	// ladder is the ladder's step at that rate (its engine work per retry); nil without one.
	ladder *step
}

// kneeSourceFlag is the knee's source when it is half of -overload-rate.
const kneeSourceFlag = "-overload-rate ÷ 2"

// kneeOf is the knee of the steps run so far: the highest passing ladder step, else half of
// overloadRate (0: none).
func kneeOf(steps []step, overloadRate int) knee {
	var k knee
	for _, s := range steps {
		if s.Phase == phaseLadder && s.Pass && s.Rate > k.Rate {
			ladder := s
			k = knee{Rate: s.Rate, Source: phaseLadder, ladder: &ladder}
		}
	}
	if k.Rate == 0 && overloadRate >= 2 {
		k = knee{Rate: overloadRate / 2, Source: kneeSourceFlag}
	}
	return k
}

// overloadLoad is the overload phase's load: -overload-rate, else twice the knee.
func overloadLoad(c options, k knee) (load, error) {
	if c.OverloadRate > 0 {
		return load{rate: c.OverloadRate, duration: c.OverloadDuration}, nil
	}
	if k.Rate == 0 {
		return load{}, errors.New("overload: no knee to double: no ladder step passed in this run (or the ladder did not run); give -overload-rate")
	}
	return load{rate: 2 * k.Rate, duration: c.OverloadDuration, role: roleTwiceKnee}, nil
}

// mixedLoads are the mixed phase's loads: -rate for -duration, then, when the run has a knee,
// the knee and twice it for -mixed-knee-duration each.
func mixedLoads(c options, k knee) []load {
	loads := []load{{rate: c.Rate, duration: c.Duration}}
	if k.Rate > 0 && c.MixedKneeDuration > 0 {
		loads = append(loads,
			load{rate: k.Rate, duration: c.MixedKneeDuration, role: roleKnee},
			load{rate: 2 * k.Rate, duration: c.MixedKneeDuration, role: roleTwiceKnee})
	}
	return loads
}

// mustShow is one claim a step must show, judged by the bench and printed as a PASS, FAIL
// or N/A line; it does not fail the run.
type mustShow struct {
	What string `json:"what"`
	Pass bool   `json:"pass"`
	// NA: the claim could not be judged (what it compares with is missing from the run).
	NA     bool   `json:"na,omitempty"`
	Detail string `json:"detail"`
}

func (m mustShow) verdict() string {
	switch {
	case m.NA:
		return "N/A"
	case m.Pass:
		return "PASS"
	}
	return "FAIL"
}

// mustShowsFailed are the failed claims' words, for a step's Why.
func mustShowsFailed(ms []mustShow) []string {
	var out []string
	for _, m := range ms {
		if !m.NA && !m.Pass {
			out = append(out, m.What)
		}
	}
	return out
}

// ratio is a / b to two decimals (0 when b is 0).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

// burstMustShows: the burst drained within burstDrainFactor × messages ÷ knee of its start,
// and lost nothing.
func burstMustShows(s step, k knee) []mustShow {
	drain := mustShow{What: fmt.Sprintf("drained within %.2f × messages ÷ knee of its start", burstDrainFactor)}
	if k.Rate == 0 {
		drain.NA, drain.Detail = true, "no knee in this run (no ladder step passed, no -overload-rate)"
	} else {
		bound := round(burstDrainFactor * float64(s.Sent) / float64(k.Rate))
		drain.Pass = s.EndedAfterSeconds <= bound && s.Completed > 0
		drain.Detail = fmt.Sprintf("last arrival %s s after the start; bound %.2f × %d ÷ %d/s = %s s", fmtF(s.EndedAfterSeconds), burstDrainFactor, s.Sent, k.Rate, fmtF(bound))
	}
	return []mustShow{drain, lostMustShow(s.Lost)}
}

func lostMustShow(lost int) mustShow {
	return mustShow{What: "0 lost", Pass: lost == 0, Detail: fmt.Sprintf("%d lost", lost)}
}

// mixedMustShows: the downstream is healthy by design, so no breaker opens; the messages
// designed to exhaust are dead-lettered as exhausted, all of them and nothing else.
func mixedMustShows(s step, m *mixedStats) []mustShow {
	breaker := mustShow{What: "no circuit breaker opened", Pass: s.BreakerOpens == 0, Detail: fmt.Sprintf("%d opens", s.BreakerOpens)}
	if s.BreakerOpens < 0 {
		breaker.Detail = "the service's breaker metrics could not be read"
	}
	designed := m.Fates[fateExhaust.String()]
	return []mustShow{
		breaker,
		{What: "dead-lettered as exhausted = designed to exhaust", Pass: m.DeadExhausted == designed,
			Detail: fmt.Sprintf("%d dead-lettered as exhausted, %d designed to exhaust", m.DeadExhausted, designed)},
		{What: "nothing else dead-lettered", Pass: m.DeadUnexpected == 0 && m.DeadWrongReason == 0,
			Detail: fmt.Sprintf("%d messages not meant to exhaust, %d exhausting ones for another reason", m.DeadUnexpected, m.DeadWrongReason)},
	}
}

// servedRates are the retries served per second while a load lasted (arrivals in
// [start, end] over end − start) and through its drain (every arrival over
// [start, the last arrival]), and when the last arrived (zero without arrivals).
func servedRates(arrivals []time.Time, start, end time.Time) (duringLoad, throughDrain float64, drained time.Time) {
	inLoad := 0
	for _, at := range arrivals {
		if !at.Before(start) && !at.After(end) {
			inLoad++
		}
		if at.After(drained) {
			drained = at
		}
	}
	if d := end.Sub(start).Seconds(); d > 0 {
		duringLoad = round(float64(inLoad) / d)
	}
	if d := drained.Sub(start).Seconds(); d > 0 {
		throughDrain = round(float64(len(arrivals)) / d)
	}
	return duringLoad, throughDrain, drained
}

// engineFigure is one figure of the engine's work per retry, overloaded and at the knee.
type engineFigure struct {
	Figure   string  `json:"figure"`
	Overload float64 `json:"overload"`
	Ladder   float64 `json:"ladder_at_knee"`
	// Ratio is Overload / Ladder (0 when either is missing).
	Ratio float64 `json:"ratio"`
}

// Engine figures compared, in the order the report lists them.
const (
	figureEvents        = "history_events"
	figureWorkflowTasks = "workflow_tasks"
	figureVisibility    = "visibility_writes"
	figureDBOps         = "persistence_requests"
)

// perRetryFigures are a step's engine-work columns per retry: what it measured of them.
func perRetryFigures(e *engineWork) map[string]float64 {
	out := map[string]float64{}
	if e == nil {
		return out
	}
	if h := e.History; h != nil && h.Sampled > 0 {
		out[figureEvents], out[figureWorkflowTasks] = h.PerRetry.Events, h.PerRetry.WorkflowTasks
	}
	if e.PersistenceRequests > 0 {
		out[figureVisibility], out[figureDBOps] = e.VisibilityWritesPerRetry, e.PersistencePerRetry
	}
	return out
}

// compareEngine lines up the overload's engine work per retry against the ladder's at the
// knee (nil ladder: nothing to compare with).
func compareEngine(overload, ladder *engineWork) []engineFigure {
	if ladder == nil {
		return nil
	}
	o, l := perRetryFigures(overload), perRetryFigures(ladder)
	var out []engineFigure
	for _, f := range []string{figureEvents, figureWorkflowTasks, figureVisibility, figureDBOps} {
		ov, okO := o[f]
		lv, okL := l[f]
		if !okO && !okL {
			continue
		}
		fig := engineFigure{Figure: f, Overload: ov, Ladder: lv}
		if okO && okL {
			fig.Ratio = ratio(ov, lv)
		}
		out = append(out, fig)
	}
	return out
}

// overloadStats is the overload phase's account: how it was served against the knee, what it
// cost the engine against the ladder at the knee, and what an operator met meanwhile.
type overloadStats struct {
	KneeRate   int    `json:"knee_rate_per_s"`
	KneeSource string `json:"knee_source"`
	// ServedDuringLoad is the retries that arrived in [start, end of load] per second;
	// ServedThroughDrain every arrival over [start, the last arrival]; each also to the knee.
	ServedDuringLoad   float64 `json:"served_during_load_per_s"`
	ServedThroughDrain float64 `json:"served_through_drain_per_s"`
	DuringLoadToKnee   float64 `json:"served_during_load_to_knee"`
	ThroughDrainToKnee float64 `json:"served_through_drain_to_knee"`
	// DrainedAfterSeconds is the last arrival − the start of the load.
	DrainedAfterSeconds float64 `json:"drained_after_start_seconds"`
	Lost                int     `json:"lost"`
	// Engine compares the engine's work per retry with the ladder's step at the knee.
	Engine               []engineFigure `json:"engine_per_retry_vs_ladder,omitempty"`
	WorkflowTaskTimeouts *taskTimeouts  `json:"workflow_task_timeouts,omitempty"`
	// Probe is what the operator probe met (nil: it did not run).
	Probe *opsProbeStats `json:"ops_probe,omitempty"`
}

// newOverloadStats computes the overload's figures from the step, its first arrivals, the
// load's start and end and the knee.
func newOverloadStats(s step, arrivals []time.Time, start, end time.Time, k knee) *overloadStats {
	during, through, drained := servedRates(arrivals, start, end)
	o := &overloadStats{
		KneeRate: k.Rate, KneeSource: k.Source,
		ServedDuringLoad: during, ServedThroughDrain: through,
		DuringLoadToKnee: ratio(during, float64(k.Rate)), ThroughDrainToKnee: ratio(through, float64(k.Rate)),
		Lost: s.Lost,
	}
	if !drained.IsZero() {
		o.DrainedAfterSeconds = round(drained.Sub(start).Seconds())
	}
	if k.ladder != nil {
		o.Engine = compareEngine(s.Engine, k.ladder.Engine)
	}
	if s.Engine != nil {
		o.WorkflowTaskTimeouts = s.Engine.WorkflowTaskTimeouts
	}
	return o
}

// overloadMustShows judges the overload: served ≥ overloadServedFloor × knee during the
// load and through the drain, nothing lost, history events per retry within
// overloadEventsTolerance of the ladder's at the knee, and the operator probe's p99s.
func overloadMustShows(o *overloadStats) []mustShow {
	served := func(what string, rate, toKnee float64) mustShow {
		m := mustShow{What: fmt.Sprintf("served %s ≥ %.1f × knee", what, overloadServedFloor)}
		if o.KneeRate == 0 {
			m.NA, m.Detail = true, "no knee"
			return m
		}
		m.Pass = rate >= overloadServedFloor*float64(o.KneeRate)
		m.Detail = fmt.Sprintf("%s/s = %.2f × %d/s", fmtF(rate), toKnee, o.KneeRate)
		return m
	}
	out := []mustShow{
		served("during the load", o.ServedDuringLoad, o.DuringLoadToKnee),
		served("through the drain", o.ServedThroughDrain, o.ThroughDrainToKnee),
		lostMustShow(o.Lost),
	}
	events := mustShow{What: fmt.Sprintf("history events per retry within %.0f%% of the ladder's at the knee", overloadEventsTolerance*100)}
	switch f, ok := findFigure(o.Engine, figureEvents); {
	case o.KneeSource != phaseLadder:
		events.NA, events.Detail = true, "no ladder in this run to compare with"
	case !ok || f.Ratio == 0:
		events.NA, events.Detail = true, "the events per retry of the overload or of the ladder's step were not measured"
	default:
		events.Pass = math.Abs(f.Ratio-1) <= overloadEventsTolerance+1e-9
		events.Detail = fmt.Sprintf("%s vs %s = ×%.2f", fmtF(f.Overload), fmtF(f.Ladder), f.Ratio)
	}
	out = append(out, events)
	return append(out, o.Probe.mustShows()...)
}

func findFigure(figs []engineFigure, name string) (engineFigure, bool) {
	for _, f := range figs {
		if f.Figure == name {
			return f, true
		}
	}
	return engineFigure{}, false
}

// overloadLine is the overload's account under the table.
func overloadLine(s step, o *overloadStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d/s for %s s (knee %d/s: %s): served %s/s during the load (%.2f × knee), %s/s through the drain (%.2f × knee), drained %s s after its start; %d lost; lateness p50/p99 %s/%s ms",
		s.label(), s.Rate, fmtF(s.Seconds), o.KneeRate, o.KneeSource, fmtF(o.ServedDuringLoad), o.DuringLoadToKnee,
		fmtF(o.ServedThroughDrain), o.ThroughDrainToKnee, fmtF(o.DrainedAfterSeconds), o.Lost, fmtF(s.Lateness.P50), fmtF(s.Lateness.P99))
	if len(o.Engine) > 0 {
		var figs []string
		for _, f := range o.Engine {
			r := "n/a"
			if f.Ratio > 0 {
				r = fmt.Sprintf("×%.2f", f.Ratio)
			}
			figs = append(figs, fmt.Sprintf("%s %s vs %s (%s)", strings.ReplaceAll(f.Figure, "_", " "), fmtF(f.Overload), fmtF(f.Ladder), r))
		}
		fmt.Fprintf(&b, "; per retry against the ladder at the knee: %s", strings.Join(figs, ", "))
	}
	if t := o.WorkflowTaskTimeouts; t != nil {
		fmt.Fprintf(&b, "; workflow task timeouts %s (%s sticky schedule-to-start, %s start-to-close)", fmtF(t.total()), fmtF(t.ScheduleToStart), fmtF(t.StartToClose))
	} else {
		b.WriteString("; workflow task timeouts not measured (no server metrics)")
	}
	return b.String()
}

// judgeOverload sets an overload step's verdict: what it must show, and no duplicate with
// another key or send error. Lateness and keeping up are not judged: it is past the knee by
// design.
func judgeOverload(s *step) {
	var checks []check
	for _, why := range mustShowsFailed(s.MustShow) {
		checks = append(checks, check{true, why})
	}
	decide(s, append(checks,
		check{s.DuplicatesOtherKey > 0, "duplicate with another key"},
		check{s.SendErrors > 0, "send errors"}))
}
