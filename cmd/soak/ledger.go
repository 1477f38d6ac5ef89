package main

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// plan is what the soak intends for message i: where it comes from and how often the
// consumer fails it. The consumer fails a delivery with x-retry-count n while n < failures,
// so failures counts the first failure (the report the producer sends) too: failures ≤ max
// is delivered after that many retries, failures = max+1 exhausts and is dead-lettered.
type plan struct {
	id       string
	queue    string
	failures int
	payload  []byte
}

// makePlan derives message i's plan from the seed: a fixed share of each outcome.
func makePlan(seed uint64, i int, queues []string, maxRetries int) plan {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", seed, i)
	u := h.Sum64()
	// 40 % fail once, 25 % twice, 15 % three times, 20 % exhaust (with max 3).
	var failures int
	switch r := u % 100; {
	case r < 40:
		failures = 1
	case r < 65:
		failures = 2
	case r < 80:
		failures = 3
	default:
		failures = maxRetries + 1
	}
	failures = min(failures, maxRetries+1)
	pad := int((u >> 8) % 400)
	payload := fmt.Appendf(nil, `{"soak":%d,"i":%d,"pad":"%s"}`, seed, i, bytes.Repeat([]byte("x"), pad))
	return plan{
		id:       fmt.Sprintf("m-%06d", i),
		queue:    queues[int((u>>20)%uint64(len(queues)))],
		failures: failures,
		payload:  payload,
	}
}

// delivery is one arrival on an original queue.
type delivery struct {
	Count    int    `json:"count"` // x-retry-count; -1 when absent or not a number
	Key      string `json:"key"`   // x-retry-key
	At       time.Time
	BodyOK   bool
	Accepted bool // the consumer took it as a success
	Dup      bool // its key had been processed before: dropped as a duplicate
}

// deadLetter is one envelope read from the dead-letter queue.
type deadLetter struct {
	DLQID        string
	Attempts     []int
	TotalRetries int
	DeadReason   string
	At           time.Time
}

// record is everything observed about one message.
type record struct {
	plan
	published  bool
	deliveries []delivery
	// reported holds the retry keys whose failure report the broker confirmed.
	reported map[string]bool
	// processed holds the keys the consumer handled (reported or accepted): a second
	// delivery with one of them is a duplicate and is dropped, as the README asks of consumers.
	processed map[string]bool
	envelopes []deadLetter
	settledAt time.Time
}

// ledger holds the records and the running counters the progress line shows.
type ledger struct {
	mu      sync.Mutex
	byID    map[string]*record
	order   []*record
	strange []string // deliveries or envelopes for ids the soak never sent
	// hostile are the bad reports mixed into the traffic, by id and in order.
	hostile      map[string]*hostileRecord
	hostileOrder []*hostileRecord

	published, deliveries, duplicates, accepted, reports, envelopes, settled atomic.Int64
	// lastArrival is the unix nanos of the latest delivery or envelope.
	lastArrival atomic.Int64
	// perSecond counts deliveries and dead letters by second since t0: the pipeline's pulse,
	// from which each fault's stall and recovery are read.
	t0        time.Time
	perSecond []int
}

func newLedger(plans []plan, bad []hostile) *ledger {
	l := &ledger{byID: make(map[string]*record, len(plans)), t0: time.Now(), hostile: make(map[string]*hostileRecord, len(bad))}
	for _, h := range bad {
		r := &hostileRecord{hostile: h}
		l.hostile[h.id] = r
		l.hostileOrder = append(l.hostileOrder, r)
	}
	for _, p := range plans {
		r := &record{plan: p, reported: map[string]bool{}, processed: map[string]bool{}}
		l.byID[p.id] = r
		l.order = append(l.order, r)
	}
	return l
}

func (l *ledger) markPublished(id string) {
	l.mu.Lock()
	l.byID[id].published = true
	l.mu.Unlock()
	l.published.Add(1)
}

func (l *ledger) markHostilePublished(id string) {
	l.mu.Lock()
	l.hostile[id].published = true
	l.mu.Unlock()
}

// hostileDeadLettered records an envelope of a bad report, and says whether id was one.
func (l *ledger) hostileDeadLettered(id, reason, dlqID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.hostile[id]
	if h == nil {
		return false
	}
	h.envelopes = append(h.envelopes, hostileEnvelope{Reason: reason, DLQID: dlqID})
	return true
}

// verdict is the consumer's decision for a delivery.
type verdict int

const (
	verdictDrop   verdict = iota // duplicate or stranger: ack and forget
	verdictFail                  // report a failure, then ack
	verdictAccept                // success: ack
)

// arrive records a delivery and decides what the consumer does with it.
func (l *ledger) arrive(id string, count int, key string, body []byte) (verdict, *record) {
	now := time.Now()
	l.lastArrival.Store(now.UnixNano())
	l.deliveries.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pulse(now)
	r := l.byID[id]
	if r == nil {
		l.strange = append(l.strange, "delivery of unknown message "+strconv.Quote(id))
		return verdictDrop, nil
	}
	d := delivery{Count: count, Key: key, At: now, BodyOK: bytes.Equal(body, r.payload)}
	if r.processed[key] {
		d.Dup = true
		r.deliveries = append(r.deliveries, d)
		l.duplicates.Add(1)
		return verdictDrop, r
	}
	if count >= 0 && count < r.failures {
		r.deliveries = append(r.deliveries, d)
		return verdictFail, r
	}
	d.Accepted = true
	r.deliveries = append(r.deliveries, d)
	r.processed[key] = true
	l.accepted.Add(1)
	l.settle(r, now)
	return verdictAccept, r
}

// reported records that the failure report for key was confirmed by the broker.
func (l *ledger) reported(r *record, key string) {
	l.mu.Lock()
	r.reported[key] = true
	r.processed[key] = true
	l.mu.Unlock()
	l.reports.Add(1)
}

func (l *ledger) deadLettered(id string, dl deadLetter) {
	l.lastArrival.Store(time.Now().UnixNano())
	l.envelopes.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pulse(dl.At)
	r := l.byID[id]
	if r == nil {
		l.strange = append(l.strange, "dead letter of unknown message "+strconv.Quote(id))
		return
	}
	r.envelopes = append(r.envelopes, dl)
	l.settle(r, dl.At)
}

// settle counts a message the first time it reaches an end the consumer can see.
func (l *ledger) settle(r *record, at time.Time) {
	if r.settledAt.IsZero() {
		r.settledAt = at
		l.settled.Add(1)
	}
}

// pulse counts an arrival in its second; l.mu is held.
func (l *ledger) pulse(at time.Time) {
	i := int(at.Sub(l.t0) / time.Second)
	if i < 0 {
		return
	}
	for len(l.perSecond) <= i {
		l.perSecond = append(l.perSecond, 0)
	}
	l.perSecond[i]++
}

// rate is the mean arrivals per second over [from, to).
func (l *ledger) rate(from, to time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, b := int(from.Sub(l.t0)/time.Second), int(to.Sub(l.t0)/time.Second)
	if b <= a {
		b = a + 1
	}
	sum := 0
	for i := max(a, 0); i < b && i < len(l.perSecond); i++ {
		sum += l.perSecond[i]
	}
	return float64(sum) / float64(b-a)
}

// recovery is how long after end the pulse first reached half of want per second again
// (within limit); -1 if it did not.
func (l *ledger) recovery(end time.Time, want float64, limit time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := int(end.Sub(l.t0) / time.Second)
	for i := max(start, 0); i < len(l.perSecond) && i <= start+int(limit/time.Second); i++ {
		if float64(l.perSecond[i]) >= want/2 {
			return time.Duration(i-start) * time.Second
		}
	}
	return -1
}
