package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// A 10 s load: 20 arrivals inside it, 10 after it, the last at 15 s.
func TestServedRates(t *testing.T) {
	var arrivals []time.Time
	for i := range 20 {
		arrivals = append(arrivals, at(0.5+float64(i)*0.5)) // 0.5 … 10.0, the end included
	}
	for i := range 10 {
		arrivals = append(arrivals, at(10.5+float64(i)*0.5)) // 10.5 … 15.0
	}
	during, through, drained := servedRates(arrivals, t0, at(10))
	assert.Equal(t, 2.0, during, "20 arrivals in [0, 10 s]")
	assert.Equal(t, 2.0, through, "30 arrivals over [0, 15 s]")
	assert.Equal(t, at(15), drained)

	during, through, drained = servedRates(nil, t0, at(10))
	assert.Zero(t, during)
	assert.Zero(t, through)
	assert.True(t, drained.IsZero())

	// Arrivals before the start (none should be) count through the drain only.
	during, _, _ = servedRates([]time.Time{at(-1), at(5)}, t0, at(10))
	assert.Equal(t, 0.1, during)
}

func TestRatio(t *testing.T) {
	assert.Equal(t, 0.9, ratio(27, 30))
	assert.Equal(t, 1.07, ratio(20.3, 19))
	assert.Equal(t, 0.0, ratio(5, 0))
}

// The knee is the highest passing ladder step, a failing step above it notwithstanding;
// without one, half of -overload-rate.
func TestKneeOf(t *testing.T) {
	steps := []step{
		{Phase: phaseCeiling, Rate: 60, Pass: true},
		{Phase: phaseLadder, Rate: 25, Pass: true},
		{Phase: phaseLadder, Rate: 30, Pass: true, Engine: &engineWork{Retries: 600}},
		{Phase: phaseLadder, Rate: 35, Pass: false},
		{Phase: phaseLadder + "/B", Rate: 40, Pass: true},
	}
	k := kneeOf(steps, 0)
	assert.Equal(t, 30, k.Rate)
	assert.Equal(t, phaseLadder, k.Source)
	require.NotNil(t, k.ladder)
	assert.Equal(t, 600, k.ladder.Engine.Retries, "the ladder's step at the knee, for its engine work")
	assert.Equal(t, 30, kneeOf(steps, 90).Rate, "the ladder's knee wins over -overload-rate")

	k = kneeOf(steps[:1], 75)
	assert.Equal(t, knee{Rate: 37, Source: kneeSourceFlag}, k, "no ladder: half of -overload-rate")
	assert.Equal(t, knee{}, kneeOf([]step{{Phase: phaseLadder, Rate: 10}}, 0), "no passing step, no flag")
}

func TestOverloadLoad(t *testing.T) {
	c := options{OverloadDuration: 2 * time.Minute}
	l, err := overloadLoad(c, knee{Rate: 30, Source: phaseLadder})
	require.NoError(t, err)
	assert.Equal(t, load{rate: 60, duration: 2 * time.Minute, role: roleTwiceKnee}, l)

	_, err = overloadLoad(c, knee{})
	assert.ErrorContains(t, err, "give -overload-rate")

	c.OverloadRate = 80
	l, err = overloadLoad(c, knee{Rate: 30, Source: phaseLadder})
	require.NoError(t, err)
	assert.Equal(t, load{rate: 80, duration: 2 * time.Minute}, l, "the flag sets the rate")

	c = options{MixedKneeDuration: 0, Rate: 50, Duration: time.Minute}
	assert.Len(t, mixedLoads(c, knee{Rate: 30}), 1, "-mixed-knee-duration 0: the -rate load only")
}

// Overload and without a ladder: -overload-rate is needed, and checked before anything runs.
func TestParseConfigOverload(t *testing.T) {
	_, err := parseConfig([]string{"-phases", "overload"}, nil)
	assert.ErrorContains(t, err, "-phases overload without ladder needs -overload-rate")

	c, err := parseConfig([]string{"-phases", "overload", "-overload-rate", "60", "-overload-duration", "5s"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{phaseOverload}, c.Phases)
	assert.Equal(t, 60, c.OverloadRate)
	assert.Equal(t, 5*time.Second, c.OverloadDuration)

	c, err = parseConfig([]string{"-phases", "overload,ladder"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{phaseLadder, phaseOverload}, c.Phases, "the ladder runs first and finds the knee")
	assert.Equal(t, 120*time.Second, c.OverloadDuration)
	assert.Equal(t, time.Minute, c.MixedKneeDuration)

	_, err = parseConfig([]string{"-phases", "overload", "-overload-rate", "1"}, nil)
	assert.ErrorContains(t, err, "-overload-rate must be 0")
	_, err = parseConfig([]string{"-mixed-knee-duration", "-1s"}, nil)
	assert.ErrorContains(t, err, "-mixed-knee-duration must not be negative")
}

// work is an engine's work per retry as the table shows it: events, workflow tasks,
// visibility writes, persistence requests.
func work(events, wft, vis, db float64) *engineWork {
	return &engineWork{PersistenceRequests: 1000, PersistencePerRetry: db, VisibilityWritesPerRetry: vis,
		History: &historySummary{Sampled: 20, PerRetry: shapeFigures{Events: events, WorkflowTasks: wft}}}
}

func goodProbe() *opsProbeStats {
	return &opsProbeStats{Rounds: 120, Get: latency{Count: 120, P50: 40, P99: 900}, Retry: latency{Count: 120, P50: 80, P99: 1000}}
}

func verdicts(ms []mustShow) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		out[m.What] = m.verdict()
	}
	return out
}

func TestOverloadStatsAndMustShows(t *testing.T) {
	ladder := step{Phase: phaseLadder, Rate: 30, Pass: true, Engine: work(19, 3, 4, 14.7)}
	k := kneeOf([]step{ladder}, 0)
	s := step{Phase: phaseOverload, Rate: 60, Lost: 0, Engine: work(19.9, 3, 4, 16.9)}
	s.Engine.WorkflowTaskTimeouts = &taskTimeouts{ScheduleToStart: 12}
	// 10 s of load served at 27/s (0.9 × 30), then 8 s more at 30/s.
	var arrivals []time.Time
	for i := range 270 {
		arrivals = append(arrivals, at(float64(i+1)/27))
	}
	for i := range 240 {
		arrivals = append(arrivals, at(10+float64(i+1)/30))
	}
	o := newOverloadStats(s, arrivals, t0, at(10), k)
	assert.Equal(t, 27.0, o.ServedDuringLoad)
	assert.Equal(t, 0.9, o.DuringLoadToKnee)
	assert.Equal(t, 28.3, o.ServedThroughDrain, "510 over 18 s")
	assert.Equal(t, 0.94, o.ThroughDrainToKnee)
	assert.Equal(t, 18.0, o.DrainedAfterSeconds)
	assert.Equal(t, []engineFigure{
		{Figure: figureEvents, Overload: 19.9, Ladder: 19, Ratio: 1.05},
		{Figure: figureWorkflowTasks, Overload: 3, Ladder: 3, Ratio: 1},
		{Figure: figureVisibility, Overload: 4, Ladder: 4, Ratio: 1},
		{Figure: figureDBOps, Overload: 16.9, Ladder: 14.7, Ratio: 1.15},
	}, o.Engine)
	assert.Equal(t, 12.0, o.WorkflowTaskTimeouts.total())

	o.Probe = goodProbe()
	ms := overloadMustShows(o)
	assert.Equal(t, map[string]string{
		"served during the load ≥ 0.9 × knee":   "PASS",
		"served through the drain ≥ 0.9 × knee": "PASS",
		"0 lost": "PASS",
		"history events per retry within 5% of the ladder's at the knee": "PASS",
		"ops API GET one message p99 ≤ 1s":                               "PASS",
		"ops API retry-now p99 ≤ 1s":                                     "PASS",
	}, verdicts(ms), "0.9 × knee and ×1.05 are on the bounds, and pass")
	s.MustShow = ms
	judgeOverload(&s)
	assert.True(t, s.Pass, s.Why)

	// Served below the floor, one lost, 6 % more events, a slow and failing probe.
	o.ServedDuringLoad, o.DuringLoadToKnee, o.Lost = 26.9, 0.9, 1
	o.Engine[0] = engineFigure{Figure: figureEvents, Overload: 20.2, Ladder: 19, Ratio: ratio(20.2, 19)}
	o.Probe.Retry.P99, o.Probe.GetErrors = 1001, 1
	ms = overloadMustShows(o)
	assert.Equal(t, map[string]string{
		"served during the load ≥ 0.9 × knee":   "FAIL",
		"served through the drain ≥ 0.9 × knee": "PASS",
		"0 lost": "FAIL",
		"history events per retry within 5% of the ladder's at the knee": "FAIL",
		"ops API GET one message p99 ≤ 1s":                               "FAIL",
		"ops API retry-now p99 ≤ 1s":                                     "FAIL",
	}, verdicts(ms))
	s.MustShow = ms
	judgeOverload(&s)
	assert.False(t, s.Pass)
	assert.Equal(t, "served during the load ≥ 0.9 × knee, 0 lost, history events per retry within 5% of the ladder's at the knee, ops API GET one message p99 ≤ 1s, ops API retry-now p99 ≤ 1s", s.Why)

	// Without a ladder (the knee from -overload-rate) the events cannot be compared; without
	// a probe, or one that could not start, the API's claims fail.
	o = newOverloadStats(s, arrivals, t0, at(10), knee{Rate: 30, Source: kneeSourceFlag})
	assert.Nil(t, o.Engine)
	o.Probe = &opsProbeStats{SetupError: "ops API refused the probe's token"}
	ms = overloadMustShows(o)
	assert.Equal(t, "N/A", verdicts(ms)["history events per retry within 5% of the ladder's at the knee"])
	assert.Equal(t, "FAIL", verdicts(ms)["ops API retry-now p99 ≤ 1s"])
	assert.Contains(t, ms[len(ms)-1].Detail, "could not start: ops API refused")
	o.Probe = nil
	assert.Equal(t, "FAIL", verdicts(overloadMustShows(o))["ops API GET one message p99 ≤ 1s"])
}

// 6000 messages at a knee of 30/s: drained within 1.15 × 200 s = 230 s of the start.
func TestBurstMustShows(t *testing.T) {
	k := knee{Rate: 30, Source: phaseLadder}
	s := step{Phase: phaseBurst, Rate: 200, Sent: 6000, Completed: 6000, EndedAfterSeconds: 230}
	ms := burstMustShows(s, k)
	assert.Equal(t, map[string]string{"drained within 1.15 × messages ÷ knee of its start": "PASS", "0 lost": "PASS"}, verdicts(ms))
	assert.Equal(t, "last arrival 230 s after the start; bound 1.15 × 6000 ÷ 30/s = 230 s", ms[0].Detail)

	s.EndedAfterSeconds, s.Lost, s.Completed = 230.1, 2, 5998
	assert.Equal(t, map[string]string{"drained within 1.15 × messages ÷ knee of its start": "FAIL", "0 lost": "FAIL"}, verdicts(burstMustShows(s, k)))

	assert.Equal(t, "N/A", burstMustShows(s, knee{})[0].verdict(), "no knee in the run")
}

func TestMixedMustShows(t *testing.T) {
	m := &mixedStats{Fates: map[string]int{"exhaust": 90, "delivered": 1170}, DeadExhausted: 90}
	s := step{Phase: phaseMixed, LoadRole: roleTwiceKnee}
	assert.Equal(t, map[string]string{
		"no circuit breaker opened":                        "PASS",
		"dead-lettered as exhausted = designed to exhaust": "PASS",
		"nothing else dead-lettered":                       "PASS",
	}, verdicts(mixedMustShows(s, m)))

	s.BreakerOpens = 2
	m.DeadExhausted, m.DeadUnexpected = 89, 1
	assert.Equal(t, map[string]string{
		"no circuit breaker opened":                        "FAIL",
		"dead-lettered as exhausted = designed to exhaust": "FAIL",
		"nothing else dead-lettered":                       "FAIL",
	}, verdicts(mixedMustShows(s, m)))

	s.BreakerOpens = -1
	b := mixedMustShows(s, m)[0]
	assert.Equal(t, "FAIL", b.verdict(), "unread breaker metrics do not pass")
	assert.Contains(t, b.Detail, "could not be read")
}

// The loads at the knee and twice it are judged on accounting, not on lateness.
func TestJudgeMixedLatenessOnlyAtRate(t *testing.T) {
	m := &mixedStats{Lateness: map[string]latency{"first": {Count: 10, P99: 90_000}}}
	var s step
	judgeMixed(&s, m, options{MixedP99Target: time.Second}, true)
	assert.Equal(t, "p99 over target (first)", s.Why)
	judgeMixed(&s, m, options{MixedP99Target: time.Second}, false)
	assert.True(t, s.Pass, s.Why)
}

// The timeout counters of workflow tasks, with or without _total, and not the activities'.
func TestParseMetricsTaskTimeouts(t *testing.T) {
	text := scrapeText + `# TYPE schedule_to_start_timeout counter
schedule_to_start_timeout{namespace="default",operation="TimerActiveTaskWorkflowTaskTimeout",service_name="history"} 7
schedule_to_start_timeout{namespace="default",operation="TimerActiveTaskActivityTimeout",service_name="history"} 100
# TYPE start_to_close_timeout_total counter
start_to_close_timeout_total{namespace="default",operation="TimerActiveTaskSpeculativeWorkflowTaskTimeout",service_name="history"} 2
`
	got, err := parseMetrics(strings.NewReader(text))
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{metricScheduleToStartTimeout: 7, metricStartToCloseTimeout: 2}, got.taskTimeout)
	assert.Equal(t, 25.0, got.persistence["UpdateWorkflowExecution"], "the persistence counters as before")

	before, err := parseMetrics(strings.NewReader(scrapeText))
	require.NoError(t, err)
	var w engineWork
	w.delta(before, got, 10)
	assert.Equal(t, &taskTimeouts{ScheduleToStart: 7, StartToClose: 2}, w.WorkflowTaskTimeouts, "none before: all grew during the step")
}

// The probe against a stand-in of the ops API: its token and content type, the escaped id,
// a slow answer and an error, and the wait until the last message is scheduled.
func TestOpsProbe(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodGet:
			_ = json.NewEncoder(w).Encode(map[string]any{"state": map[string]any{"status": "scheduled"}})
		case r.Header.Get("Content-Type") != "application/json":
			w.WriteHeader(http.StatusUnsupportedMediaType)
		case strings.Contains(r.URL.EscapedPath(), "probe-1"):
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"message is delivered"}`))
		default:
			time.Sleep(20 * time.Millisecond)
			_, _ = w.Write([]byte(`{"applied":true}`))
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ids := []string{"retry/q.probe/probe-0", "retry/q.probe/probe-1"}

	o := newOpsProbe(addr, "tok", ids)
	require.NoError(t, o.awaitScheduled(context.Background()))
	o.round(context.Background(), 0)
	o.round(context.Background(), 1)
	o.arrivedAt(0, time.Now())
	o.arrivedAt(7, time.Now())
	st := o.stats()
	assert.Equal(t, 2, st.Rounds)
	assert.Equal(t, 2, st.Get.Count)
	assert.Equal(t, 2, st.Retry.Count)
	assert.Zero(t, st.GetErrors)
	assert.Equal(t, 1, st.RetryErrors)
	assert.GreaterOrEqual(t, st.Retry.Max, 20.0)
	assert.Equal(t, []string{`POST retry: 409 {"error":"message is delivered"}`}, st.Errors)
	assert.Equal(t, 1, st.RetryToArrival.Count)
	assert.Equal(t, 1, st.NotRepublished)
	assert.Contains(t, paths, "GET /api/messages/retry%2Fq.probe%2Fprobe-0", "the id escaped into one segment")
	assert.Contains(t, paths, "POST /api/messages/retry%2Fq.probe%2Fprobe-1/retry")
	assert.Equal(t, "FAIL", st.mustShows()[1].verdict(), "an error answer fails the claim")

	bad := newOpsProbe(addr, "wrong", ids)
	assert.ErrorContains(t, bad.awaitScheduled(context.Background()), "refused the probe's token")

	var out bytes.Buffer
	out.WriteString(probeLine("overload", st))
	assert.Contains(t, out.String(), "retry-now p50/p99/max")
	assert.Contains(t, out.String(), "1 never republished")
}

// The report: the table names the loads at the knee, the overload's account and the
// must-shows print under it, and the summary keeps the verdicts apart.
func TestPrintTableMustShows(t *testing.T) {
	r := &report{Settings: settings{DelayMs: 1000, P99TargetMs: 250, KeepUp: 0.95}}
	ladder := step{Phase: phaseLadder, Rate: 30, Pass: true, Engine: work(19, 3, 4, 14.7)}
	o := &overloadStats{KneeRate: 30, KneeSource: phaseLadder, ServedDuringLoad: 26, DuringLoadToKnee: 0.87,
		ServedThroughDrain: 28, ThroughDrainToKnee: 0.93, DrainedAfterSeconds: 250, Engine: compareEngine(work(20.3, 3, 4, 16.9), ladder.Engine),
		WorkflowTaskTimeouts: &taskTimeouts{ScheduleToStart: 40}, Probe: goodProbe()}
	ov := step{Phase: phaseOverload, Rate: 60, LoadRole: roleTwiceKnee, Seconds: 120, Overload: o}
	ov.MustShow = overloadMustShows(o)
	judgeOverload(&ov)
	mixedAtRate := step{Phase: phaseMixed, Rate: 50, Pass: true, Mixed: &mixedStats{Fates: map[string]int{}}}
	mixedAtKnee := step{Phase: phaseMixed, Rate: 60, LoadRole: roleTwiceKnee, Mixed: &mixedStats{Fates: map[string]int{"exhaust": 3}, DeadExhausted: 3}}
	mixedAtKnee.MustShow = mixedMustShows(mixedAtKnee, mixedAtKnee.Mixed)
	r.Steps = []step{ladder, mixedAtRate, mixedAtKnee, ov}
	r.finish(false)

	var out bytes.Buffer
	r.printTable(&out)
	text := out.String()
	assert.Contains(t, text, "mixed@2×knee")
	assert.Contains(t, text, "overload@2×knee 60/s for 120 s (knee 30/s: ladder): served 26/s during the load (0.87 × knee), 28/s through the drain (0.93 × knee)")
	assert.Contains(t, text, "history events 20.3 vs 19 (×1.07)")
	assert.Contains(t, text, "workflow task timeouts 40 (40 sticky schedule-to-start, 0 start-to-close)")
	assert.Contains(t, text, "overload@2×knee ops probe (120 rounds, one a second)")
	assert.Contains(t, text, "must-show (judged here, not failing the run):")
	assert.Contains(t, text, "  FAIL overload@2×knee 60/s: served during the load ≥ 0.9 × knee: 26/s = 0.87 × 30/s")
	assert.Contains(t, text, "  PASS mixed@2×knee 60/s: no circuit breaker opened: 0 opens")
	assert.Contains(t, text, "knee (what the overload doubles")

	sum := r.Summary
	require.NotNil(t, sum.MixedPass)
	assert.True(t, *sum.MixedPass, "the verdict of the mixed load at -rate, not of the loads at the knee")
	require.NotNil(t, sum.OverloadPass)
	assert.False(t, *sum.OverloadPass)
	assert.Equal(t, &mustShowCount{Pass: 7, Fail: 2}, sum.MustShows)
	assert.Equal(t, 30, sum.Knee.Rate)
}
