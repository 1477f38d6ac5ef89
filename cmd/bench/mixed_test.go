package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fates are fixed by the sequence number, in the advertised shares, and spread so that an
// evenly spaced sample of a step meets every fate.
func TestFateOfShares(t *testing.T) {
	counts := map[fate]int{}
	const n = 20000
	for seq := range n {
		counts[fateOf(seq)]++
		require.Equal(t, fateOf(seq), fateOf(seq))
	}
	share := func(f fate) float64 { return float64(counts[f]) / n }
	assert.InDelta(t, 0.05, share(fateExhaust), 0.01)
	assert.InDelta(t, 0.15, share(fateRefailNow), 0.01)
	assert.InDelta(t, 0.15, share(fateRefailLate), 0.01)
	assert.InDelta(t, 0.65, share(fateDelivered), 0.01)

	var seqs []int
	for seq := range 6000 {
		seqs = append(seqs, seq)
	}
	sampled := map[fate]int{}
	for _, seq := range spread(seqs, 200) {
		sampled[fateOf(seq)]++
	}
	assert.Len(t, sampled, int(numFates), "no aliasing with an evenly spaced sample: %v", sampled)
}

func TestFateRules(t *testing.T) {
	quiet := 2 * time.Second
	for _, c := range []struct {
		f       fate
		retries int
		fails   []bool // deliveries 1..4
		after   time.Duration
	}{
		{fateDelivered, 1, []bool{false, false, false, false}, 0},
		{fateRefailNow, 2, []bool{true, false, false, false}, 0},
		{fateRefailLate, 2, []bool{true, false, false, false}, 3 * time.Second},
		{fateExhaust, benchMaxRetries, []bool{true, true, true, false}, 0},
	} {
		assert.Equal(t, c.retries, c.f.retries(), c.f.String())
		for i, want := range c.fails {
			assert.Equal(t, want, c.f.failsAt(i+1), "%s delivery %d", c.f, i+1)
		}
		assert.Equal(t, c.after, c.f.reportAfter(quiet), c.f.String())
	}
	assert.Equal(t, "first", retryKind(fateRefailLate, 1))
	assert.Equal(t, "later_new_run", retryKind(fateRefailLate, 2))
	assert.Equal(t, "later_same_run", retryKind(fateRefailNow, 2))
	assert.Equal(t, "later_same_run", retryKind(fateExhaust, 3))
}

// seqsOf returns the first n sequence numbers of fate f.
func seqsOf(f fate, n int) []int {
	var out []int
	for seq := 0; len(out) < n; seq++ {
		if fateOf(seq) == f {
			out = append(out, seq)
		}
	}
	return out
}

// mixedScenario is a step of the mixed phase played without a server: the consumer's
// decisions come from the tracker as they would in runMixed.
type mixedScenario struct {
	t     *testing.T
	tr    *mixedTracker
	start time.Time
}

func (m *mixedScenario) at(ms int) time.Time {
	return m.start.Add(time.Duration(ms) * time.Millisecond)
}

// deliver is retry n of seq arriving at ms; it checks the consumer's decision.
func (m *mixedScenario) deliver(seq, n, ms int, wantFail bool) {
	m.t.Helper()
	got := m.tr.arrived(seq, n, fmt.Sprintf("m-%d:%d", seq, n), m.at(ms))
	require.Equal(m.t, wantFail, got, "seq %d (%s) delivery %d", seq, fateOf(seq), n)
}

// A step with one message of each fate doing what it should, plus the faults the phase must
// catch: a message never back (lost), an exhausting message never dead-lettered (lost), a
// dead letter of a message meant to be delivered, an exhausting message dead-lettered for
// another reason, a retry nobody asked for, a duplicate with the same key.
func TestMixedTrackerBookkeeping(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mixedScenario{t: t, tr: newMixedTracker(time.Second, nil), start: start}
	tr := m.tr
	delivered := seqsOf(fateDelivered, 4)
	now := seqsOf(fateRefailNow, 1)[0]
	late := seqsOf(fateRefailLate, 1)[0]
	exhaust := seqsOf(fateExhaust, 3)
	for i, seq := range append(append(append([]int{}, delivered...), now, late), exhaust...) {
		tr.markSent(seq, m.at(10*i))
	}
	tr.markError()
	sentAt := func(seq int) int { return int(tr.sent[seq].Sub(start) / time.Millisecond) }

	// delivered[0]: taken at its first retry, 20 ms late, delivered twice with its key.
	d0 := delivered[0]
	m.deliver(d0, 1, sentAt(d0)+1020, false)
	m.deliver(d0, 1, sentAt(d0)+1500, false) // a duplicate: not judged again
	// delivered[1]: never comes back (lost). delivered[2]: taken, then dead-lettered anyway.
	d2 := delivered[2]
	m.deliver(d2, 1, sentAt(d2)+1000, false)
	tr.deadLettered(d2, "exhausted", m.at(9000))
	// delivered[3]: taken, then a retry 2 that no report asked for.
	d3 := delivered[3]
	m.deliver(d3, 1, sentAt(d3)+1000, false)
	m.deliver(d3, 2, sentAt(d3)+4000, false)

	// Re-failed at once: reported at the arrival; retry 2 is due a delay after the report.
	m.deliver(now, 1, sentAt(now)+1100, true)
	tr.reportSent(now, 1, m.at(sentAt(now)+1110))
	m.deliver(now, 2, sentAt(now)+2110+300, false)

	// Re-failed after the window: reported 3 s after the arrival; a new run's retry 2.
	m.deliver(late, 1, sentAt(late)+1000, true)
	tr.reportSent(late, 1, m.at(sentAt(late)+4000))
	m.deliver(late, 2, sentAt(late)+5000+50, false)

	// exhaust[0]: fails three times, then dead-lettered as exhausted.
	e0 := exhaust[0]
	for n := 1; n <= benchMaxRetries; n++ {
		due := sentAt(e0) + 1000 + (n-1)*1500
		m.deliver(e0, n, due, true)
		tr.reportSent(e0, n, m.at(due+500))
	}
	tr.deadLettered(e0, deadReasonExhausted, m.at(sentAt(e0)+6000))
	// exhaust[1]: retried, never dead-lettered (lost). exhaust[2]: dead-lettered as poison,
	// after only its first retry.
	e1, e2 := exhaust[1], exhaust[2]
	m.deliver(e1, 1, sentAt(e1)+1000, true)
	tr.reportSent(e1, 1, m.at(sentAt(e1)+1000))
	m.deliver(e1, 2, sentAt(e1)+2000, true)
	tr.reportSent(e1, 2, m.at(sentAt(e1)+2000))
	m.deliver(e1, 3, sentAt(e1)+3000, true)
	tr.reportSent(e1, 3, m.at(sentAt(e1)+3000))
	m.deliver(e2, 1, sentAt(e2)+1000, true)
	tr.reportSent(e2, 1, m.at(sentAt(e2)+1000))
	tr.deadLettered(e2, "poison", m.at(sentAt(e2)+2000))
	tr.stray()

	assert.False(t, tr.allEnded())
	assert.ElementsMatch(t, []int{delivered[1], e1}, tr.notEnded(5))
	assert.ElementsMatch(t, []int{d0, d2, d3}, tr.endedProperly(fateDelivered))
	assert.Equal(t, []int{e0}, tr.endedProperly(fateExhaust), "dead-lettered as exhausted only")
	assert.Equal(t, []int{late}, tr.endedProperly(fateRefailLate))

	var s step
	end := start.Add(100 * time.Millisecond)
	st := tr.fill(&s, start, end, 2*time.Second)
	assert.Equal(t, 9, s.Sent)
	assert.Equal(t, 1, s.SendErrors)
	assert.Equal(t, 2, s.Lost, "delivered[1] never back, exhaust[1] never dead-lettered")
	assert.Equal(t, 1, s.DuplicatesSameKey)
	assert.Zero(t, s.DuplicatesOtherKey)
	assert.Equal(t, 3, s.DeadLettered)
	assert.Equal(t, map[string]int{"delivered": 4, "refail_at_once": 1, "refail_after_window": 1, "exhaust": 3}, st.Fates)
	// Retries: d0, d2, d3 (1 each; d3's second is unexpected), now ×2, late ×2, e0 ×3, e1 ×3, e2 ×1.
	assert.Equal(t, 14, s.Completed)
	assert.Equal(t, map[string]int{"first": 8, "later_same_run": 5, "later_new_run": 1}, st.Retries)
	assert.Equal(t, 1, st.UnexpectedRetries)
	assert.Equal(t, 1, st.DeadExhausted)
	assert.Equal(t, 1, st.DeadUnexpected)
	assert.Equal(t, 1, st.DeadWrongReason)
	assert.Equal(t, 2, st.MissingRetries, "exhaust[2] was dead-lettered without retries 2 and 3")
	assert.Equal(t, 7, st.Ended)
	assert.Equal(t, 1, st.Strays)
	assert.Equal(t, 3000.0, st.LateReportAfterMs)
	assert.Equal(t, 9, st.Reports)
	// Lateness of each kind against its own due time.
	assert.Equal(t, 300.0, st.Lateness["later_same_run"].Max, "the re-failed-at-once retry: report + 1 s + 300 ms")
	assert.Equal(t, 50.0, st.Lateness["later_new_run"].Max)
	assert.Equal(t, 100.0, st.Lateness["first"].Max)
	assert.Equal(t, 300.0, s.Lateness.Max)

	judgeMixed(&s, st, options{MixedP99Target: 250 * time.Millisecond}, true)
	assert.False(t, s.Pass)
	assert.Equal(t, "p99 over target (later_same_run), lost, dead-lettered, dead-lettered not as exhausted, retries missing, unexpected retries, send errors", s.Why)
}

// When every message ends as it should, the step passes, whatever its throughput.
func TestMixedTrackerAllEnded(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mixedScenario{t: t, tr: newMixedTracker(time.Second, nil), start: start}
	tr := m.tr
	d, late, e := seqsOf(fateDelivered, 1)[0], seqsOf(fateRefailLate, 1)[0], seqsOf(fateExhaust, 1)[0]
	for _, seq := range []int{d, late, e} {
		tr.markSent(seq, start)
	}
	m.deliver(d, 1, 1010, false)
	assert.False(t, tr.allEnded())
	m.deliver(late, 1, 1020, true)
	tr.reportSent(late, 1, m.at(4020))
	m.deliver(late, 2, 5030, false)
	for n := 1; n <= benchMaxRetries; n++ {
		m.deliver(e, n, 1000*n+40, true)
		tr.reportSent(e, n, m.at(1000*n+40))
	}
	assert.False(t, tr.allEnded(), "exhausted but not dead-lettered yet")
	tr.deadLettered(e, deadReasonExhausted, m.at(6000))
	assert.True(t, tr.allEnded())

	var s step
	st := tr.fill(&s, start, start.Add(time.Second), 2*time.Second)
	assert.Zero(t, s.Lost)
	assert.Equal(t, 6, s.Completed)
	assert.Equal(t, 3, st.Ended)
	assert.Equal(t, 1.0, s.DrainSeconds, "the dead letter at 6 s, 0.98 s after the last retry was due (late's second, 5.02 s)")
	s.Rate = 100 // far more than was served: throughput is not judged
	judgeMixed(&s, st, options{MixedP99Target: time.Second, KeepUp: 0.95}, true)
	assert.True(t, s.Pass, s.Why)
}

// A report that could not be sent ends its message (it can go no further) and fails the step,
// without counting it as lost.
func TestMixedReportFailure(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := newMixedTracker(time.Second, nil)
	seq := seqsOf(fateRefailNow, 1)[0]
	tr.markSent(seq, start)
	require.True(t, tr.arrived(seq, 1, "k", start.Add(time.Second)))
	tr.reportFailed(seq)
	assert.True(t, tr.allEnded())
	var s step
	st := tr.fill(&s, start, start.Add(time.Second), 0)
	assert.Zero(t, s.Lost)
	assert.Equal(t, 1, st.ReportErrors)
	judgeMixed(&s, st, options{MixedP99Target: time.Second}, true)
	assert.Equal(t, "send errors", s.Why)
}

func TestSeqOfAndHeaderInt(t *testing.T) {
	seq, ok := seqOf("mixed-0-50-17", "mixed-0-50")
	assert.True(t, ok)
	assert.Equal(t, 17, seq)
	for _, bad := range []string{"ladder-0-50-17", "mixed-0-50-", "mixed-0-50-x", "mixed-0-50--3"} {
		_, ok := seqOf(bad, "mixed-0-50")
		assert.False(t, ok, bad)
	}
	for _, v := range []any{int8(2), int16(2), int32(2), int64(2), 2, uint8(2), uint16(2), uint32(2)} {
		assert.Equal(t, 2, headerInt(v), "%T", v)
	}
	assert.Zero(t, headerInt("2"))
	assert.Zero(t, headerInt(nil))
}

func TestBenchPolicyRetriesEveryAttemptAfterTheDelay(t *testing.T) {
	p := benchPolicy("bench-1", options{Delay: time.Second, QuietWindow: 2 * time.Second})
	assert.Contains(t, p, "delays: [1s]")
	assert.Contains(t, p, "max_retries: 3")
	assert.Contains(t, p, "quiet_window: 2s")
	assert.Contains(t, p, `queue: "bench-1.*.orig-*"`)
}
