package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func TestSummarizeNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	assert.Equal(t, latency{Count: 100, P50: 50, P99: 99, Max: 100, Mean: 50.5}, l)
	assert.Equal(t, latency{}, summarize(nil))
}

// Ten messages at 10/s with a 1 s delay: one lost, one duplicated with its key, one with
// another key, one that arrived 2 s late (after the load).
func TestTrackerFill(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(time.Second)
	tr := newTracker(time.Second, nil)
	for seq := range 10 {
		sent := start.Add(time.Duration(seq) * 100 * time.Millisecond)
		tr.markSent(seq, sent)
		due := sent.Add(time.Second)
		switch seq {
		case 3: // lost
		case 9:
			tr.arrived(seq, due.Add(2*time.Second), "k9")
		default:
			tr.arrived(seq, due.Add(10*time.Millisecond), "k")
		}
	}
	tr.arrived(1, start.Add(5*time.Second), "k")
	tr.arrived(2, start.Add(5*time.Second), "other")
	tr.arrived(42, start, "never sent")
	tr.markError()

	var s step
	tr.fill(&s, start, end)
	assert.Equal(t, 10, s.Sent)
	assert.Equal(t, 9, s.Completed)
	assert.Equal(t, 1, s.Lost)
	assert.Equal(t, 1, s.DuplicatesSameKey)
	assert.Equal(t, 1, s.DuplicatesOtherKey)
	assert.Equal(t, 1, s.Unexpected)
	assert.Equal(t, 1, s.SendErrors)
	assert.Equal(t, 8.0, s.Throughput) // 8 completions in [start+1s, end+1s]
	assert.Equal(t, 2000.0, s.Lateness.Max)
	assert.Equal(t, 8, s.LatenessDuring.Count)
	assert.Equal(t, 1, s.LatenessAfter.Count)
	assert.Equal(t, 2.0, s.DrainSeconds)

	s.Rate = 10
	judge(&s, options{P99Target: 250 * time.Millisecond, KeepUp: 0.95})
	assert.False(t, s.Pass)
	assert.Equal(t, "p99 over target, fell behind, lost, duplicate with another key, send errors", s.Why)
}

func TestParseConfigDefaultsAndStepDuration(t *testing.T) {
	c, err := parseConfig([]string{"-duration", "15s", "-phases", "burst,ceiling"}, nil)
	assert.NoError(t, err)
	assert.Equal(t, []string{phaseCeiling, phaseBurst}, c.Phases)
	assert.Equal(t, 15*time.Second, c.StepDuration, "a short -duration shortens the steps too")
	assert.Equal(t, defaultDynamicConfig, c.DynamicConfig)

	c, err = parseConfig([]string{"-policy", "fixed", "-dynamic-config", "a=1", "-dynamic-config", "b=2", "-step-duration", "5s", "-quiet-window", "0s"}, nil)
	assert.NoError(t, err)
	assert.Equal(t, []string{"a=1", "b=2"}, c.DynamicConfig)
	assert.Equal(t, 5*time.Second, c.StepDuration)
	assert.Zero(t, c.QuietWindow)

	_, err = parseConfig([]string{"-phases", "nope", "-steps", "50,25"}, nil)
	assert.ErrorContains(t, err, `unknown phase "nope"`)
	assert.ErrorContains(t, err, "-steps must rise")
}

// The default traffic is the default policy's: its delays, jitter and quiet window, and the
// scheduled time of each retry is the service's own (the jitter hashes the workflow ID).
func TestParseConfigPolicy(t *testing.T) {
	c, err := parseConfig(nil, nil)
	require.NoError(t, err)
	def := policy.Builtins()[policy.DefaultName]
	assert.Equal(t, policyDefault, c.Policy)
	assert.Equal(t, def.QuietWindow, c.QuietWindow)
	assert.Equal(t, benchMaxRetries, def.MaxRetries, "the mixed phase's exhausting messages are republished benchMaxRetries times")
	for _, id := range []string{"a", "b", "retry/q/7"} {
		for attempt := 1; attempt <= 3; attempt++ {
			want := def.Delay(attempt, policy.JitterFraction(workflows.JitterKey(id, 0), attempt))
			assert.Equal(t, want, c.Delays.of(id, attempt))
		}
	}
	first := c.Delays.of("a", 1)
	assert.True(t, first >= 2*time.Second && first < 3*time.Second, "2 s plus up to 1 s of jitter: %s", first)
	assert.NotEqual(t, c.Delays.of("a", 1), c.Delays.of("b", 1), "jitter differs per message")

	c, err = parseConfig([]string{"-policy", "fixed", "-delay", "1500ms", "-quiet-window", "2s"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Millisecond, c.Delays.of("a", 1))
	assert.Equal(t, 1500*time.Millisecond, c.Delays.of("b", 3))
	assert.Equal(t, 2*time.Second, c.QuietWindow)

	_, err = parseConfig([]string{"-delay", "1s"}, nil)
	assert.ErrorContains(t, err, "-policy fixed only")
	_, err = parseConfig([]string{"-policy", "nope"}, nil)
	assert.ErrorContains(t, err, `-policy: "nope"`)
}

func TestParseConfigEngineAndMixed(t *testing.T) {
	c, err := parseConfig(nil, nil)
	assert.NoError(t, err)
	assert.Equal(t, devserver.EngineDev, c.Engine)
	assert.Equal(t, []string{phaseCeiling, phaseLadder, phaseSustained, phaseSplit, phaseBurst, phaseMixed, phaseOverload}, c.Phases, "mixed, then overload, run last by default")
	loads, err := phaseLoads(c, phaseMixed, knee{})
	assert.NoError(t, err)
	assert.Equal(t, []load{{rate: 50, duration: 120 * time.Second}}, loads, "at -rate for -duration, without a knee")
	loads, err = phaseLoads(c, phaseMixed, knee{Rate: 30, Source: phaseLadder})
	assert.NoError(t, err)
	assert.Equal(t, []load{{rate: 50, duration: 120 * time.Second}, {rate: 30, duration: time.Minute, role: roleKnee}, {rate: 60, duration: time.Minute, role: roleTwiceKnee}}, loads,
		"then at the knee and twice it, -mixed-knee-duration each")

	c, err = parseConfig([]string{"-engine", "postgres", "-phases", "mixed,ceiling"}, nil)
	assert.NoError(t, err)
	assert.Equal(t, devserver.EnginePostgres, c.Engine)
	assert.Equal(t, []string{phaseCeiling, phaseMixed}, c.Phases)

	_, err = parseConfig([]string{"-engine", "postgres", "-sqlite-pragma", "cache_size=-65536"}, nil)
	assert.ErrorContains(t, err, "-sqlite-pragma applies to the dev engine only")
	_, err = parseConfig([]string{"-engine", "mysql"}, nil)
	assert.ErrorContains(t, err, `-engine: devserver: unknown engine "mysql"`)
}

// A curve ends at its second failing step in a row, not at a single spoiled one.
func TestFailStreakEndsAtTheSecondFailureInARow(t *testing.T) {
	var f failStreak
	assert.False(t, f.see(false), "one failing step")
	assert.False(t, f.see(true))
	assert.False(t, f.see(false))
	assert.True(t, f.see(false), "two in a row")
}
