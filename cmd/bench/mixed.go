package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// fate is what the mixed phase's consumer does with a message's republished deliveries.
type fate int

const (
	// fateDelivered: the first republish is taken.
	fateDelivered fate = iota
	// fateRefailNow: the first republish fails and is reported at once, inside the quiet
	// window: the same run schedules retry 2.
	fateRefailNow
	// fateRefailLate: the first republish fails and is reported after the quiet window: the
	// run has ended as delivered, and a new run continues the count with retry 2.
	fateRefailLate
	// fateExhaust: every delivery fails and is reported at once: benchMaxRetries republishes,
	// then the next report dead-letters it as exhausted.
	fateExhaust
	numFates
)

var fateNames = [numFates]string{"delivered", "refail_at_once", "refail_after_window", "exhaust"}

func (f fate) String() string { return fateNames[f] }

// fateOf is message seq's fate, from a hash of seq so that the fates are spread evenly over
// the step and over any evenly spaced sample of it: 5 % exhaust, 15 % re-fail at once, 15 %
// re-fail after the window (30 % of the messages fail their first republish once), the rest
// are taken at the first republish.
func fateOf(seq int) fate {
	// murmur3's 32-bit finalizer: consecutive numbers land far apart.
	h := uint32(seq)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	switch b := h % 100; {
	case b < 5:
		return fateExhaust
	case b < 20:
		return fateRefailNow
	case b < 35:
		return fateRefailLate
	}
	return fateDelivered
}

// retries is how many republishes a message of this fate gets.
func (f fate) retries() int {
	switch f {
	case fateRefailNow, fateRefailLate:
		return 2
	case fateExhaust:
		return benchMaxRetries
	}
	return 1
}

// failsAt says whether the consumer fails delivery n (its x-retry-count) of such a message.
func (f fate) failsAt(n int) bool {
	switch f {
	case fateRefailNow, fateRefailLate:
		return n == 1
	case fateExhaust:
		return n >= 1 && n <= benchMaxRetries
	}
	return false
}

// reportAfter is how long after a failed delivery arrived the consumer reports it: at once,
// or a second past the quiet window, when the workflow has ended.
func (f fate) reportAfter(quietWindow time.Duration) time.Duration {
	if f == fateRefailLate {
		return quietWindow + time.Second
	}
	return 0
}

// retryKind names the lateness classes of the mixed phase: a message's first retry (due at
// its send + delay), a later one in the same run (due at its failure report + delay), and a
// later one in a new run (the report came after the quiet window).
func retryKind(f fate, n int) string {
	switch {
	case n <= 1:
		return retryKinds[0]
	case f == fateRefailLate:
		return retryKinds[2]
	}
	return retryKinds[1]
}

// retryKinds are retryKind's names, in the order the report lists them.
var retryKinds = []string{"first", "later_same_run", "later_new_run"}

// attempt is retry n (x-retry-count) of message seq.
type attempt struct{ seq, n int }

// deadLetter is an envelope the bench took off the step's dead-letter queue.
type deadLetter struct {
	reason string
	at     time.Time
}

// mixedTracker is the mixed phase's bookkeeping: when each message was sent, when each of its
// failures was reported, when each retry arrived, and which messages were dead-lettered.
type mixedTracker struct {
	// delay is the nominal first delay (where windows and waits start); delayOf(seq, n) is
	// retry n of message seq's own, counted from the failure it answers.
	delay   time.Duration
	delayOf func(seq, n int) time.Duration

	mu      sync.Mutex
	sent    map[int]time.Time
	reports map[attempt]time.Time
	got     map[attempt][]arrival
	dead    map[int][]deadLetter
	// ended: the message's last retry arrived, it was dead-lettered, or its report could not
	// be sent (it can go no further).
	ended        map[int]bool
	strays       int
	sendErrors   int
	reportErrors int
	progress     atomic.Int64
}

// newMixedTracker tracks messages whose retry n is due delayOf(seq, n) after the failure it
// answers (nil: delay for every retry).
func newMixedTracker(delay time.Duration, delayOf func(seq, n int) time.Duration) *mixedTracker {
	if delayOf == nil {
		delayOf = func(int, int) time.Duration { return delay }
	}
	return &mixedTracker{
		delay: delay, delayOf: delayOf, sent: map[int]time.Time{}, reports: map[attempt]time.Time{},
		got: map[attempt][]arrival{}, dead: map[int][]deadLetter{}, ended: map[int]bool{},
	}
}

func (t *mixedTracker) markSent(seq int, at time.Time) {
	t.mu.Lock()
	t.sent[seq] = at
	t.mu.Unlock()
}

func (t *mixedTracker) markError() {
	t.mu.Lock()
	t.sendErrors++
	t.mu.Unlock()
}

// arrived records delivery n of message seq and says whether the consumer fails it. Only
// the first delivery of a retry is judged: a second one carries the same x-retry-key, by which
// a consumer drops duplicates.
func (t *mixedTracker) arrived(seq, n int, key string, at time.Time) (fail bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.progress.Add(1)
	k := attempt{seq, n}
	first := len(t.got[k]) == 0
	t.got[k] = append(t.got[k], arrival{at: at, key: key})
	if !first {
		return false
	}
	f := fateOf(seq)
	if f != fateExhaust && n == f.retries() {
		t.ended[seq] = true
	}
	return f.failsAt(n)
}

// reportSent records that the failure of delivery n of message seq was reported at at.
func (t *mixedTracker) reportSent(seq, n int, at time.Time) {
	t.mu.Lock()
	t.reports[attempt{seq, n}] = at
	t.mu.Unlock()
	t.progress.Add(1)
}

// reportFailed records a report that could not be sent: the message goes no further.
func (t *mixedTracker) reportFailed(seq int) {
	t.mu.Lock()
	t.reportErrors++
	t.ended[seq] = true
	t.mu.Unlock()
	t.progress.Add(1)
}

// deadLettered records message seq's dead-letter envelope.
func (t *mixedTracker) deadLettered(seq int, reason string, at time.Time) {
	t.mu.Lock()
	t.dead[seq] = append(t.dead[seq], deadLetter{reason: reason, at: at})
	t.ended[seq] = true
	t.mu.Unlock()
	t.progress.Add(1)
}

// stray records a delivery or a dead letter the bench could not place.
func (t *mixedTracker) stray() {
	t.mu.Lock()
	t.strays++
	t.mu.Unlock()
}

// allEnded says whether every message sent has ended.
func (t *mixedTracker) allEnded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for seq := range t.sent {
		if !t.ended[seq] {
			return false
		}
	}
	return true
}

// waitAll waits until every message has ended, or nothing has happened for idle, or limit.
func (t *mixedTracker) waitAll(ctx context.Context, idle, limit time.Duration) {
	waitFor(ctx, t.delay, idle, limit, t.allEnded, t.progress.Load)
}

// notEnded returns up to n messages that have not ended, lowest first.
func (t *mixedTracker) notEnded(n int) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lowestSent(t.sent, n, func(seq int) bool { return !t.ended[seq] })
}

// endedProperly returns the messages of fate f that ended as they should: their last retry
// arrived, or (exhaust) they were dead-lettered as exhausted.
func (t *mixedTracker) endedProperly(f fate) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for seq := range t.sent {
		if fateOf(seq) != f {
			continue
		}
		if f == fateExhaust {
			if d := t.dead[seq]; len(d) > 0 && d[0].reason == deadReasonExhausted {
				out = append(out, seq)
			}
		} else if len(t.got[attempt{seq, f.retries()}]) > 0 {
			out = append(out, seq)
		}
	}
	return out
}

// latestFirst returns up to n messages whose first retry was latest (for their timelines).
func (t *mixedTracker) latestFirst(n int) []traced {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []traced
	for k, arrivals := range t.got {
		sentAt, ok := t.sent[k.seq]
		if k.n != 1 || !ok || len(arrivals) == 0 {
			continue
		}
		out = append(out, traced{seq: k.seq, sent: sentAt, arrived: arrivals[0].at, late: arrivals[0].at.Sub(sentAt.Add(t.delay))})
	}
	slices.SortFunc(out, func(a, b traced) int { return int(b.late - a.late) })
	return out[:min(n, len(out))]
}

// deadReasonExhausted is the envelope's deadReason when max_retries ran out.
const deadReasonExhausted = "exhausted"

// mixedStats is the mixed phase's account of its messages and retries.
type mixedStats struct {
	// Fates counts the messages sent by what the consumer did with them.
	Fates map[string]int `json:"messages_by_fate"`
	// Retries counts the retries (republishes) that arrived, by kind (retryKind), and
	// Lateness is each kind's lateness.
	Retries  map[string]int     `json:"retries_by_kind"`
	Lateness map[string]latency `json:"lateness_by_kind"`
	// Reports are the failure reports the consumer sent back to the ingress queue.
	Reports      int `json:"failure_reports"`
	ReportErrors int `json:"failure_report_errors"`
	// LateReportAfterMs is how long after the arrival a failure past the window was reported.
	LateReportAfterMs float64 `json:"late_report_after_ms"`
	// Ended counts the messages that ended: last retry arrived, or dead-lettered.
	Ended int `json:"ended"`
	// DeadExhausted are the exhausting messages dead-lettered as exhausted (as they should);
	// DeadUnexpected the dead letters of messages not meant to exhaust; DeadWrongReason the
	// exhausting messages dead-lettered for another reason.
	DeadExhausted   int `json:"dead_lettered_exhausted"`
	DeadUnexpected  int `json:"dead_lettered_unexpected"`
	DeadWrongReason int `json:"dead_lettered_wrong_reason"`
	// MissingRetries are retries of ended messages that never arrived; UnexpectedRetries
	// retries past a message's last one (a report counted twice).
	MissingRetries    int `json:"missing_retries"`
	UnexpectedRetries int `json:"unexpected_retries"`
	// Strays are deliveries or dead letters the bench could not place.
	Strays int `json:"strays"`
}

// fill computes s's counts and lateness over every retry, and the mixed phase's own account,
// for load that ran from start to end. The step's "completed" are the retries that arrived.
func (t *mixedTracker) fill(s *step, start, end time.Time, quietWindow time.Duration) *mixedStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := &mixedStats{
		Fates: map[string]int{}, Retries: map[string]int{}, Lateness: map[string]latency{},
		ReportErrors: t.reportErrors, Strays: t.strays, Reports: len(t.reports),
		LateReportAfterMs: ms(fateRefailLate.reportAfter(quietWindow)),
	}
	countSends(s, t.sent, start, end)
	s.SendErrors = t.sendErrors
	for seq := range t.sent {
		m.Fates[fateOf(seq).String()]++
	}

	var all []time.Duration
	byKind := map[string][]time.Duration{}
	fs := newFirsts(start, end, t.delay)
	for k, arrivals := range t.got {
		sentAt, ok := t.sent[k.seq]
		if !ok {
			s.Unexpected++
			continue
		}
		f := fateOf(k.seq)
		firstAt := arrivals[0]
		countDuplicates(s, arrivals)
		if k.n < 1 || k.n > f.retries() {
			m.UnexpectedRetries++
			continue
		}
		due := sentAt.Add(t.delayOf(k.seq, 1))
		if k.n > 1 {
			reported, ok := t.reports[attempt{k.seq, k.n - 1}]
			if !ok {
				m.UnexpectedRetries++ // a retry no report of the bench asked for
				continue
			}
			due = reported.Add(t.delayOf(k.seq, k.n))
		}
		s.Completed++
		kind := retryKind(f, k.n)
		m.Retries[kind]++
		late := firstAt.at.Sub(due)
		all = append(all, late)
		byKind[kind] = append(byKind[kind], late)
		s.worstBySecond(int(due.Sub(start.Add(t.delay))/time.Second), late)
		fs.arrived(firstAt.at)
		fs.due(due)
	}
	s.Lateness = summarize(all)
	for kind, ds := range byKind {
		m.Lateness[kind] = summarize(ds)
	}
	fs.rates(s)

	for seq, letters := range t.dead {
		s.DeadLettered += len(letters)
		if _, ok := t.sent[seq]; !ok {
			m.Strays += len(letters)
			continue
		}
		if fateOf(seq) != fateExhaust {
			m.DeadUnexpected++
			continue
		}
		if letters[0].reason == deadReasonExhausted {
			m.DeadExhausted++
		} else {
			m.DeadWrongReason++
		}
		for _, d := range letters {
			fs.ended(d.at)
		}
	}
	fs.drain(s)

	for seq := range t.sent {
		f := fateOf(seq)
		properly := len(t.got[attempt{seq, f.retries()}]) > 0
		if f == fateExhaust {
			properly = len(t.dead[seq]) > 0
		}
		if t.ended[seq] {
			m.Ended++
		} else {
			s.Lost++
		}
		if !properly {
			continue
		}
		for n := 1; n <= f.retries(); n++ {
			if len(t.got[attempt{seq, n}]) == 0 {
				m.MissingRetries++
			}
		}
	}
	return m
}

// judgeMixed sets s.Pass and s.Why for the mixed phase: the p99 lateness of each kind of
// retry within the mixed target (when lateness is set: the -rate load; the loads at the knee
// and twice it are past the engine's capacity by design, their lateness reported, not judged)
// and every message accounted for. Throughput is reported, not judged: the phase offers more
// retries than messages.
func judgeMixed(s *step, m *mixedStats, c options, lateness bool) {
	var checks []check
	for _, kind := range retryKinds {
		l, ok := m.Lateness[kind]
		checks = append(checks, check{lateness && ok && l.P99 > ms(c.MixedP99Target), "p99 over target (" + kind + ")"})
	}
	decide(s, append(checks, []check{
		{s.Lost > 0, "lost"},
		{m.DeadUnexpected > 0, "dead-lettered"},
		{m.DeadWrongReason > 0, "dead-lettered not as exhausted"},
		{m.MissingRetries > 0, "retries missing"},
		{m.UnexpectedRetries > 0, "unexpected retries"},
		{s.DuplicatesOtherKey > 0, "duplicate with another key"},
		{s.SendErrors > 0 || m.ReportErrors > 0, "send errors"},
	}...))
}

// failure is a delivery the mixed phase's consumer fails, to be reported back.
type failure struct {
	seq, n int
	key    string
	id     string
	body   []byte
}

// mixedReporters is how many goroutines send the failure reports.
const mixedReporters = 8

// runMixed offers the mixed load: the pipeline at l.rate, whose consumer fails some
// republishes again (fateOf) and reports them to the ingress queue as a service integrated
// with the scheduler does, and takes the dead letters off the step's dead-letter queue. It
// waits until every message has ended (or the drain wait runs out), then the quiet window.
func (p *pipeline) runMixed(ctx context.Context, phase, name, original string, l load) (step, error) {
	t := newMixedTracker(p.c.Delays.nominal(), func(seq, n int) time.Duration {
		return p.c.Delays.of(message.WorkflowID(original, name+"-"+strconv.Itoa(seq)), n)
	})
	cctx, stopConsumers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopConsumers(); wg.Wait() }()

	reports := make(chan failure, 1<<14)
	enqueue := func(f failure) {
		select {
		case reports <- f:
		case <-cctx.Done():
		}
	}
	for range mixedReporters {
		wg.Go(func() {
			for {
				select {
				case <-cctx.Done():
					return
				case f := <-reports:
					p.report(cctx, original, f, t)
				}
			}
		})
	}
	consuming, deadConsuming := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		p.consume(cctx, original, consuming, func(d amqp.Delivery, at time.Time) {
			var pl payload
			if err := json.Unmarshal(d.Body, &pl); err != nil {
				t.stray()
				return
			}
			n := headerInt(d.Headers[message.HeaderRetryCount])
			key, _ := d.Headers[message.HeaderRetryKey].(string)
			if !t.arrived(pl.Seq, n, key, at) {
				return
			}
			id := d.MessageId
			if id == "" {
				id = name + "-" + strconv.Itoa(pl.Seq)
			}
			f := failure{seq: pl.Seq, n: n, key: key, id: id, body: d.Body}
			if wait := fateOf(pl.Seq).reportAfter(p.c.QuietWindow) - time.Since(at); wait > 0 {
				time.AfterFunc(wait, func() { enqueue(f) })
				return
			}
			enqueue(f)
		})
	})
	wg.Go(func() {
		p.consume(cctx, p.dlq, deadConsuming, func(d amqp.Delivery, at time.Time) {
			var e message.Envelope
			seq, ok := 0, false
			if err := json.Unmarshal(d.Body, &e); err == nil {
				seq, ok = seqOf(e.MessageID, name)
			}
			if !ok {
				t.stray()
				return
			}
			t.deadLettered(seq, e.DeadReason, at)
		})
	})
	backlog := &peak{}
	wg.Go(func() { p.sampleBacklog(cctx, backlog) })
	if err := awaitConsumer(ctx, name, original, consuming); err != nil {
		return step{}, err
	}
	if err := awaitConsumer(ctx, name, p.dlq, deadConsuming); err != nil {
		return step{}, err
	}

	// A message's last retry can come up to (quiet window + 1 s + delay) × its failures after
	// its first: the drain limit is counted from the end of the load as for the other phases.
	s, start, end, engine := p.offer(ctx, phase, name, original, l, t, backlog)
	m := t.fill(&s, start, end, p.c.QuietWindow)
	s.Mixed = m
	s.Engine = engine.work(s.Completed)
	var sample []sampledWorkflow
	for f := range numFates {
		for _, seq := range spread(t.endedProperly(f), historySample/int(numFates)) {
			runs := 1
			if f == fateRefailLate {
				runs = 2
			}
			sample = append(sample, sampledWorkflow{
				id: message.WorkflowID(original, name+"-"+strconv.Itoa(seq)), retries: f.retries(), runs: runs, fate: f.String(),
			})
		}
	}
	s.Engine.addHistory(ctx, p.srv, sample)
	if s.Lost > 0 {
		s.Missing = p.explain(ctx, original, name, t.notEnded(5))
		p.env.keepDir = true
	}
	s.Slowest = p.trace(ctx, original, name, t.latestFirst(slowestTraced))
	perRetry(&s)
	judgeMixed(&s, m, p.c, l.role == "")
	s.MustShow = mixedMustShows(s, m)
	return s, nil
}

// report sends failure f back to the ingress queue, as a service integrated with the
// scheduler reports a failed delivery: the delivery's message id and body, its x-retry-count
// as retry_count and its x-retry-key as retry_key.
func (p *pipeline) report(ctx context.Context, original string, f failure, t *mixedTracker) {
	at := time.Now()
	if err := p.publishReport(ctx, original, f.id, f.body, f.n, f.key); err != nil {
		p.env.log.Debug("report", "error", err)
		t.reportFailed(f.seq)
		return
	}
	t.reportSent(f.seq, f.n, at)
}

// publishReport publishes a RetryMessage for the bench's original queue to the ingress queue,
// with a confirm.
func (p *pipeline) publishReport(ctx context.Context, original, id string, body []byte, retryCount int, retryKey string) error {
	m := message.RetryMessage{
		MessageID:       id,
		OriginalPayload: body,
		OriginalQueue:   original,
		ErrorReason:     "503 from bench",
		HTTPStatus:      503,
		ErrorCategory:   "transient",
		Service:         "bench",
		RetryCount:      retryCount,
		RetryKey:        retryKey,
	}
	return p.publishRetryMessage(ctx, m)
}

// publishRetryMessage publishes m to the ingress queue, with a confirm.
func (p *pipeline) publishRetryMessage(ctx context.Context, m message.RetryMessage) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.pub.Publish(pctx, "", p.ingress, true, amqp.Publishing{
		ContentType: "application/json", MessageId: m.MessageID, Body: raw, DeliveryMode: amqp.Persistent,
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// seqOf reads the sequence number out of a bench message id, <step name>-<seq>.
func seqOf(messageID, name string) (int, bool) {
	rest, ok := strings.CutPrefix(messageID, name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// headerInt reads an integer AMQP header (the table decodes it by its wire width); 0 when
// absent or not an integer.
func headerInt(v any) int {
	n, _ := message.HeaderInt64(v)
	return int(n)
}
