package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

const testMaxRetries = 3

// exhausted is a ledger of one message planned to exhaust its retries and be dead-lettered,
// whose one failure report (the producer's) was published.
func exhausted() (*ledger, *record) {
	l := newLedger([]plan{{id: "m-000001", queue: "orders", failures: testMaxRetries + 1}}, nil)
	r := l.byID["m-000001"]
	r.published = true
	return l, r
}

func judgeOne(l *ledger, o outcome) (figures, []problem) {
	wid := func(r *record) string { return "wf-" + r.id }
	return judge(l, map[string]outcome{"wf-m-000001": o}, map[string]int{"wf-m-000001": 1}, wid, testMaxRetries)
}

func TestJudgeDeadWithItsEnvelopePasses(t *testing.T) {
	l, r := exhausted()
	r.envelopes = []deadLetter{{DLQID: "d-1", Attempts: []int{1}, At: time.Now()}}

	f, probs := judgeOne(l, outcome{Status: string(workflows.StatusDead)})

	assert.Empty(t, probs)
	assert.Zero(t, f.Lost)
	assert.Zero(t, f.Unexpected)
	assert.Equal(t, 1, f.Parked)
	assert.Equal(t, 1, f.DeadLettered)
}

func TestJudgeDeadWithoutEnvelopeIsLost(t *testing.T) {
	l, _ := exhausted()

	f, probs := judgeOne(l, outcome{Status: string(workflows.StatusDead), RetryCount: testMaxRetries})

	assert.Equal(t, 1, f.Lost)
	assert.Equal(t, 1, f.LostDeadNoEnvelope)
	assert.Equal(t, 1, f.Parked)
	assert.Zero(t, f.DeadLettered)
	require.Len(t, probs, 1)
	assert.Equal(t, "lost", probs[0].Check)
	assert.Contains(t, probs[0].Detail, "no envelope")
}

func TestJudgeHeldAtTheDeadlineIsInFlight(t *testing.T) {
	held := outcome{Status: string(workflows.StatusHeld)}
	require.True(t, held.live(), "a run held by a breaker is asked again")
	l, _ := exhausted()

	f, _ := judgeOne(l, held)

	assert.Equal(t, 1, f.Lost)
	assert.Equal(t, 1, f.LostInFlight)
	assert.Zero(t, f.LostOther)
}
