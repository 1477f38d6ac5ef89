package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// step is the outcome of offering load at one rate for a while: one row of the table.
type step struct {
	Phase string `json:"phase"`
	Rate  int    `json:"rate_per_s"`
	// LoadRole says what the rate is relative to the run's knee: roleKnee or roleTwiceKnee
	// ("": a rate of the flags).
	LoadRole string  `json:"load_role,omitempty"`
	Seconds  float64 `json:"load_seconds"`
	// Sent counts messages published (pipeline) or workflows started (ceiling) without error;
	// SendErrors the attempts that failed (not counted as sent).
	Sent       int     `json:"sent"`
	SendErrors int     `json:"send_errors"`
	SendRate   float64 `json:"send_rate_per_s"`
	// Completed counts distinct retries that came back (pipeline) or local activities that ran
	// (ceiling); Throughput those whose time fell inside [start+delay, start+delay+load] per second.
	Completed  int     `json:"completed"`
	Throughput float64 `json:"throughput_per_s"`
	// Lateness is completion time minus scheduled time (send time + delay), over every completion.
	Lateness       latency  `json:"lateness"`
	LatenessDuring *latency `json:"lateness_during_load,omitempty"`
	LatenessAfter  *latency `json:"lateness_after_load,omitempty"`
	// MaxBySecond is the worst lateness (ms) of the messages sent in each second of the load:
	// it tells a steady queue (rising) from periodic stalls (spikes).
	MaxBySecond []float64 `json:"lateness_max_ms_by_send_second,omitempty"`
	// DrainSeconds is the last completion minus the last scheduled time: how long the backlog
	// outlived the load (0 when there was none).
	DrainSeconds float64 `json:"drain_seconds"`
	// EndedAfterSeconds is the last end (arrival, or dead letter) minus the load's start:
	// when the step was drained, counted from its start.
	EndedAfterSeconds float64 `json:"ended_after_start_seconds"`
	// ServedRate is completions per second from the first due time to the last completion:
	// the rate the system actually worked at, backlog included.
	ServedRate float64 `json:"served_rate_per_s"`
	Lost       int     `json:"lost"`
	// Duplicates are second deliveries of a message: with the same x-retry-key (allowed, bounded)
	// or another (a bug). Unexpected are arrivals of messages never sent successfully.
	DuplicatesSameKey  int `json:"duplicates_same_key"`
	DuplicatesOtherKey int `json:"duplicates_other_key"`
	Unexpected         int `json:"unexpected_arrivals"`
	DeadLettered       int `json:"dead_lettered"`
	PeakIngressBacklog int `json:"peak_ingress_backlog,omitempty"`
	// BreakerOpens is how many times the service's circuit breakers (on by default) opened
	// during the step: retries an open breaker held are late on purpose (-1: not read).
	BreakerOpens int `json:"breaker_opens"`
	// Missing describes up to a few of the lost messages: sequence number and, for the
	// pipeline, what Temporal says of their workflow, so a loss can be told from a straggler.
	Missing []string `json:"missing,omitempty"`
	// Slowest lays out the workflow histories of the latest few messages (pipeline): when each
	// event happened, in ms after the send, so that where the lateness came from can be read.
	Slowest []string `json:"slowest,omitempty"`
	// CPU is the CPU seconds each process used over the step (load, drain and the quiet window);
	// CPUPerRetry the same in milliseconds per completion.
	CPU         map[string]float64 `json:"cpu_seconds"`
	CPUPerRetry map[string]float64 `json:"cpu_ms_per_retry"`
	// OthersBusyCores is CPU["others"] per second of the step: how busy the rest of the machine
	// kept its cores (the broker included). Above a few tenths, the numbers are noisy.
	OthersBusyCores float64 `json:"others_busy_cores"`
	// Engine is the Temporal server's work per retry: database calls from its metrics, and
	// the shape of a sample of the step's workflow histories.
	Engine *engineWork `json:"engine,omitempty"`
	// Mixed is the mixed phase's bookkeeping: what the consumer did with the messages and how
	// each kind of retry fared.
	Mixed *mixedStats `json:"mixed,omitempty"`
	// Overload is the overload phase's account: served against the knee, engine work against
	// the ladder's, the operator probe.
	Overload *overloadStats `json:"overload,omitempty"`
	// MustShow are the claims the step is judged on besides Pass (burst, mixed, overload),
	// printed as PASS/FAIL lines; they do not fail the run.
	MustShow []mustShow `json:"must_show,omitempty"`
	Pass     bool       `json:"pass"`
	Why      string     `json:"why,omitempty"`
}

// label names a step in the table: its phase, and for a load at the knee or twice it, which.
func (s step) label() string {
	switch s.LoadRole {
	case roleKnee:
		return s.Phase + "@knee"
	case roleTwiceKnee:
		return s.Phase + "@2×knee"
	}
	return s.Phase
}

// arrival is one completion of a message: a delivery on the original queue, or the ceiling
// workflow's local activity.
type arrival struct {
	at  time.Time
	key string
}

// tracker records, per sequence number, when it was sent and when it came back.
type tracker struct {
	// delay is the nominal first delay: where the throughput window and the wait start.
	// delayOf is message seq's own (the policy's jitter differs per message).
	delay   time.Duration
	delayOf func(seq int) time.Duration

	mu       sync.Mutex
	sent     map[int]time.Time
	got      map[int][]arrival
	distinct atomic.Int64
	errors   atomic.Int64
}

// newTracker tracks messages whose first retry is due delayOf(seq) after their send (nil: all
// after delay).
func newTracker(delay time.Duration, delayOf func(seq int) time.Duration) *tracker {
	if delayOf == nil {
		delayOf = func(int) time.Duration { return delay }
	}
	return &tracker{delay: delay, delayOf: delayOf, sent: map[int]time.Time{}, got: map[int][]arrival{}}
}

func (t *tracker) markSent(seq int, at time.Time) {
	t.mu.Lock()
	t.sent[seq] = at
	t.mu.Unlock()
}

func (t *tracker) markError() { t.errors.Add(1) }

func (t *tracker) arrived(seq int, at time.Time, key string) {
	t.mu.Lock()
	if len(t.got[seq]) == 0 {
		t.distinct.Add(1)
	}
	t.got[seq] = append(t.got[seq], arrival{at: at, key: key})
	t.mu.Unlock()
}

// paceGrace is how long past its planned end a load may go on sending (slow publishes or
// starts); what is not sent by then is not sent at all.
const paceGrace = 30 * time.Second

// pace calls send for seq 0, 1, ... at rate per second for d, spreading the calls over
// workers goroutines; it returns when every call has returned, ctx is done, or paceGrace
// after the planned end. send records its own outcome in the tracker. It returns when the
// load started and ended.
func pace(ctx context.Context, rate int, d time.Duration, workers int, send func(ctx context.Context, seq int)) (start, end time.Time) {
	ctx, cancel := context.WithTimeout(ctx, d+paceGrace)
	defer cancel()
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	jobs := make(chan int, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for seq := range jobs {
				send(ctx, seq)
			}
		})
	}
	start = time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for seq := range n {
		// Due times are absolute, so a slow send does not shift the ones after it.
		if wait := time.Until(start.Add(time.Duration(seq) * interval)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		}
		select {
		case jobs <- seq:
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	return start, time.Now()
}

// waitAll waits until every sent message has come back, or ctx ends, or nothing new has
// come back for idle (after the first delay), or limit has passed. Waiting on progress rather
// than a fixed time keeps a slow drain of a big backlog from being counted as loss.
func (t *tracker) waitAll(ctx context.Context, idle, limit time.Duration) {
	waitFor(ctx, t.delay, idle, limit, func() bool {
		t.mu.Lock()
		n := len(t.sent)
		t.mu.Unlock()
		return int(t.distinct.Load()) >= n
	}, t.distinct.Load)
}

// waitFor polls until done says so, or ctx ends, or progress has not moved for idle (counted
// from delay after the call, when the first result can be due), or limit has passed.
func waitFor(ctx context.Context, delay, idle, limit time.Duration, done func() bool, progress func() int64) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := int64(-1), time.Now().Add(delay)
	for {
		if done() {
			return
		}
		if now, got := time.Now(), progress(); got != last && now.After(lastChange) {
			last, lastChange = got, now
		}
		if time.Since(lastChange) > idle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// fill computes s's counts and lateness from what the tracker saw, for load that ran from
// start to end.
func (t *tracker) fill(s *step, start, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	countSends(s, t.sent, start, end)
	s.SendErrors = int(t.errors.Load())
	var all, during, after []time.Duration
	fs := newFirsts(start, end, t.delay)
	for seq, at := range t.sent {
		fs.due(at.Add(t.delayOf(seq)))
	}
	for seq, arrivals := range t.got {
		sentAt, ok := t.sent[seq]
		if !ok {
			s.Unexpected++
			continue
		}
		first := arrivals[0]
		countDuplicates(s, arrivals)
		s.Completed++
		due := sentAt.Add(t.delayOf(seq))
		late := first.at.Sub(due)
		all = append(all, late)
		s.worstBySecond(int(sentAt.Sub(start)/time.Second), late)
		if first.at.After(end.Add(t.delay)) {
			after = append(after, late)
		} else {
			during = append(during, late)
		}
		fs.arrived(first.at)
	}
	s.Lost = s.Sent - s.Completed
	s.Lateness = summarize(all)
	d, a := summarize(during), summarize(after)
	s.LatenessDuring, s.LatenessAfter = &d, &a
	fs.rates(s)
	fs.drain(s)
}

// countSends sets s's length, sent count and send rate from the send times of load that ran
// from start to end.
func countSends(s *step, sent map[int]time.Time, start, end time.Time) {
	s.Seconds = round(end.Sub(start).Seconds())
	s.Sent = len(sent)
	var lastSent time.Time
	for _, at := range sent {
		if at.After(lastSent) {
			lastSent = at
		}
	}
	if lastSent.After(start) {
		s.SendRate = round(float64(s.Sent) / lastSent.Sub(start).Seconds())
	}
}

// countDuplicates counts the deliveries after the first of one message (or retry) in s, by
// whether they carry the first one's key.
func countDuplicates(s *step, arrivals []arrival) {
	for _, a := range arrivals[1:] {
		if a.key == arrivals[0].key {
			s.DuplicatesSameKey++
		} else {
			s.DuplicatesOtherKey++
		}
	}
}

// worstBySecond raises s.MaxBySecond[sec] to late; a negative sec is left out.
func (s *step) worstBySecond(sec int, late time.Duration) {
	if sec < 0 {
		return
	}
	for len(s.MaxBySecond) <= sec {
		s.MaxBySecond = append(s.MaxBySecond, 0)
	}
	s.MaxBySecond[sec] = max(s.MaxBySecond[sec], ms(late))
}

// firsts tallies a step's completions for its throughput, served rate and drain: the load ran
// from start to end, and its results fall due delay later, in [from, to].
type firsts struct {
	start    time.Time
	from, to time.Time
	inWindow int
	// last is the latest completion; lastDue the latest due time.
	last, lastDue time.Time
}

func newFirsts(start, end time.Time, delay time.Duration) *firsts {
	return &firsts{start: start, from: start.Add(delay), to: end.Add(delay)}
}

// arrived records a completion at at.
func (f *firsts) arrived(at time.Time) {
	if !at.Before(f.from) && !at.After(f.to) {
		f.inWindow++
	}
	f.ended(at)
}

// ended records a message's end that is no completion (a dead letter): it only moves the
// drain's end.
func (f *firsts) ended(at time.Time) {
	if at.After(f.last) {
		f.last = at
	}
}

// due records a result's due time.
func (f *firsts) due(at time.Time) {
	if at.After(f.lastDue) {
		f.lastDue = at
	}
}

// rates sets s's throughput (completions inside the window per second of load) and served
// rate (s.Completed per second from the first due time to the last completion).
func (f *firsts) rates(s *step) {
	if window := f.to.Sub(f.from); window > 0 {
		s.Throughput = round(float64(f.inWindow) / window.Seconds())
	}
	if span := f.last.Sub(f.from).Seconds(); span > 0 {
		s.ServedRate = round(float64(s.Completed) / span)
	}
}

// drain sets s.DrainSeconds: how long past the last due time the last end came; and
// s.EndedAfterSeconds: how long after the load's start.
func (f *firsts) drain(s *step) {
	if !f.lastDue.IsZero() {
		s.DrainSeconds = round(max(0, f.last.Sub(f.lastDue).Seconds()))
	}
	if !f.last.IsZero() {
		s.EndedAfterSeconds = round(max(0, f.last.Sub(f.start).Seconds()))
	}
}

// judge sets s.Pass and s.Why against the targets.
func judge(s *step, c options) {
	decide(s, []check{
		{s.Lateness.P99 > ms(c.P99Target), "p99 over target"},
		{s.Throughput < c.KeepUp*float64(s.Rate), "fell behind"},
		{s.Lost > 0, "lost"},
		{s.DuplicatesOtherKey > 0, "duplicate with another key"},
		{s.SendErrors > 0, "send errors"},
	})
}

// check is one condition of a step's verdict: failed, and the words s.Why gives it.
type check struct {
	failed bool
	why    string
}

// decide sets s.Pass (no check failed) and s.Why (the failed checks, in order).
func decide(s *step, checks []check) {
	var why []string
	for _, c := range checks {
		if c.failed {
			why = append(why, c.why)
		}
	}
	s.Pass = len(why) == 0
	s.Why = strings.Join(why, ", ")
}

// perRetry converts s.CPU to milliseconds per completion.
func perRetry(s *step) {
	s.CPUPerRetry = map[string]float64{}
	for k, v := range s.CPU {
		if v < 0 || s.Completed == 0 || k == "others" {
			continue
		}
		s.CPUPerRetry[k] = round(v * 1000 / float64(s.Completed))
	}
}

// firstArrivals returns when each message that was sent first came back.
func (t *tracker) firstArrivals() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Time
	for seq, arrivals := range t.got {
		if _, ok := t.sent[seq]; ok && len(arrivals) > 0 {
			out = append(out, arrivals[0].at)
		}
	}
	return out
}

// completedSeqs returns the sequence numbers of the messages that came back.
func (t *tracker) completedSeqs() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for seq, arrivals := range t.got {
		if _, ok := t.sent[seq]; ok && len(arrivals) > 0 {
			out = append(out, seq)
		}
	}
	return out
}

// sample is an even spread of the completed messages' workflows for the engine's history
// figures, each retried once in one run; id names message seq's workflow.
func (t *tracker) sample(id func(seq int) string) []sampledWorkflow {
	var out []sampledWorkflow
	for _, seq := range spread(t.completedSeqs(), historySample) {
		out = append(out, sampledWorkflow{id: id(seq), retries: 1, runs: 1})
	}
	return out
}

// missing returns up to n sequence numbers that were sent and never came back, lowest first.
func (t *tracker) missing(n int) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lowestSent(t.sent, n, func(seq int) bool { return len(t.got[seq]) == 0 })
}

// lowestSent returns up to n of the sequence numbers in sent that keep holds for, lowest first.
func lowestSent(sent map[int]time.Time, n int, keep func(seq int) bool) []int {
	var out []int
	for seq := range sent {
		if keep(seq) {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out[:min(n, len(out))]
}

// failStreak counts a ceiling's or ladder's failing steps in a row.
type failStreak int

// see records a step's verdict and says whether the curve should end: its second failing
// step in a row.
func (f *failStreak) see(pass bool) bool {
	if pass {
		*f = 0
		return false
	}
	*f++
	return *f >= 2
}
