package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The soak's verdict is only as good as its ledger: these pin what the consumer does with
// each delivery and what the ledger counts.

func TestPlansAreDeterministicAndFollowTheShares(t *testing.T) {
	queues := []string{"orders", "invoices"}
	outcomes := map[int]int{}
	seenQueue := map[string]bool{}
	for i := range 2000 {
		p := makePlan(7, i, queues, testMaxRetries)
		again := makePlan(7, i, queues, testMaxRetries)
		require.Equal(t, p, again, "the same seed and index give the same plan")
		outcomes[p.failures]++
		seenQueue[p.queue] = true
		assert.Contains(t, string(p.payload), `"soak":7`)
	}
	assert.Len(t, seenQueue, 2, "both queues get traffic")
	assert.Len(t, outcomes, 4, "fails once, twice, three times, exhausts: %v", outcomes)
	// 40 / 25 / 15 / 20 %, within a few points on 2,000 messages.
	for failures, want := range map[int]float64{1: 0.40, 2: 0.25, 3: 0.15, testMaxRetries + 1: 0.20} {
		assert.InDelta(t, want, float64(outcomes[failures])/2000, 0.04, "share failing %d times", failures)
	}
	assert.NotEqual(t, makePlan(7, 1, queues, 3).payload, makePlan(8, 1, queues, 3).payload, "another seed, another payload")

	for i := range 200 {
		assert.LessOrEqual(t, makePlan(1, i, queues, 0).failures, 1, "with no retries a message fails at most its first delivery")
	}
}

func TestArriveFailsUntilThePlanIsSpentThenAccepts(t *testing.T) {
	p := plan{id: "m-000001", queue: "orders", failures: 2, payload: []byte("body")}
	l := newLedger([]plan{p}, nil)

	v, r := l.arrive(p.id, 0, "", p.payload)
	assert.Equal(t, verdictFail, v, "the first delivery fails (the producer's report)")
	l.reported(r, "")
	v, _ = l.arrive(p.id, 1, "m:1", p.payload)
	assert.Equal(t, verdictFail, v, "the first retry fails")
	l.reported(r, "m:1")
	v, _ = l.arrive(p.id, 1, "m:1", p.payload)
	assert.Equal(t, verdictDrop, v, "a processed key again is a duplicate")
	v, _ = l.arrive(p.id, 2, "m:2", []byte("other"))
	assert.Equal(t, verdictAccept, v, "the second retry is taken")

	require.Len(t, r.deliveries, 4)
	assert.True(t, r.deliveries[2].Dup)
	assert.False(t, r.deliveries[3].BodyOK, "a changed body is noted")
	assert.True(t, r.deliveries[3].Accepted)
	assert.EqualValues(t, 4, l.deliveries.Load())
	assert.EqualValues(t, 1, l.duplicates.Load())
	assert.EqualValues(t, 1, l.accepted.Load())
	assert.EqualValues(t, 2, l.reports.Load())
	assert.EqualValues(t, 1, l.settled.Load())
	assert.False(t, r.settledAt.IsZero())

	v, r = l.arrive("m-999999", 0, "", nil)
	assert.Equal(t, verdictDrop, v, "a stranger is dropped")
	assert.Nil(t, r)
	assert.Equal(t, []string{`delivery of unknown message "m-999999"`}, l.strange)
}

func TestADeliveryWithoutACountIsAccepted(t *testing.T) {
	p := plan{id: "m-000001", queue: "orders", failures: 3}
	l := newLedger([]plan{p}, nil)
	v, _ := l.arrive(p.id, -1, "k", nil)
	assert.Equal(t, verdictAccept, v, "no x-retry-count: nothing to fail it by")
}

func TestDeadLettersSettleOnceAndStrangersAreNoted(t *testing.T) {
	p := plan{id: "m-000001", queue: "orders", failures: testMaxRetries + 1}
	l := newLedger([]plan{p}, []hostile{{id: "bad-1", kind: "to-amq"}})
	at := l.t0.Add(1500 * time.Millisecond)

	l.deadLettered(p.id, deadLetter{DLQID: "d-1", At: at})
	l.deadLettered(p.id, deadLetter{DLQID: "d-2", At: at.Add(time.Second)})
	r := l.byID[p.id]
	assert.Len(t, r.envelopes, 2)
	assert.Equal(t, at, r.settledAt, "settled by the first envelope")
	assert.EqualValues(t, 1, l.settled.Load())
	assert.EqualValues(t, 2, l.envelopes.Load())

	l.deadLettered("m-424242", deadLetter{At: at})
	assert.Equal(t, []string{`dead letter of unknown message "m-424242"`}, l.strange)

	l.markPublished(p.id)
	l.markHostilePublished("bad-1")
	assert.True(t, r.published)
	assert.EqualValues(t, 1, l.published.Load())
	assert.True(t, l.hostileDeadLettered("bad-1", "forbidden destination", "d-3"))
	assert.False(t, l.hostileDeadLettered("m-000001", "x", "d-4"), "not a bad report")
	h := l.hostile["bad-1"]
	assert.True(t, h.published)
	assert.Equal(t, []hostileEnvelope{{Reason: "forbidden destination", DLQID: "d-3"}}, h.envelopes)
}

func TestPulseRateAndRecovery(t *testing.T) {
	l := newLedger(nil, nil)
	sec := func(i int) time.Time { return l.t0.Add(time.Duration(i)*time.Second + 100*time.Millisecond) }
	l.mu.Lock()
	for i, n := range []int{10, 10, 0, 0, 2, 6} {
		for range n {
			l.pulse(sec(i))
		}
	}
	l.pulse(l.t0.Add(-time.Second)) // before the start: not counted
	l.mu.Unlock()

	assert.InDelta(t, 10, l.rate(sec(0), sec(2)), 0.001)
	assert.InDelta(t, 0, l.rate(sec(2), sec(4)), 0.001)
	assert.InDelta(t, 0, l.rate(sec(2), sec(2)), 0.001, "an empty span is one second")
	assert.InDelta(t, 2.8, l.rate(sec(0), sec(10)), 0.001, "seconds past the last arrival count as none")
	assert.Equal(t, 3*time.Second, l.recovery(sec(2), 10, 10*time.Second), "half of 10 per second again at second 5")
	assert.Equal(t, time.Duration(-1), l.recovery(sec(2), 10, 2*time.Second), "not within the limit")
	assert.Equal(t, time.Duration(-1), l.recovery(sec(2), 100, time.Minute))
}
