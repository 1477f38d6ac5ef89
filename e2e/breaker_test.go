//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Circuit breakers per destination, as a user of the broker sees them: an outage held
// instead of burnt, a canary replay, and an operator's pause and resume.

// breakerPolicyFile leaves "<prefix>.outage*" queues to the built-in default policy (and its
// default breaker), sends "<prefix>.once*" queues to dead at their first failure (so that a
// replayed dead letter is judged at once: delivered after a 2 s quiet window, or dead
// again), and releases "<prefix>.paused*" queues' held retries at 5 a second.
const breakerPolicyFile = `
policies:
  e2e-once:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 0
    quiet_window: 2s
  e2e-paused:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 3
    quiet_window: 2s
    breaker: {release_rate: 5}
routes:
  - queue: "e2e-*.once*"
    policy: e2e-once
  - queue: "e2e-*.paused*"
    policy: e2e-paused
`

// pausedReleaseRate is e2e-paused's release_rate.
const pausedReleaseRate = 5

// withBreakerPolicies replaces the stack's policy file with breakerPolicyFile; call it before
// run.
func (s *stack) withBreakerPolicies(t *testing.T) {
	t.Helper()
	require.NoError(t, os.WriteFile(s.cfg.PolicyFile, []byte(breakerPolicyFile), 0o600))
}

// arrival is one delivery to a destination as its consumer saw it.
type arrival struct {
	at    time.Time
	id    string
	count int64 // x-retry-count
}

// destination is a consumer of a queue that fails a delivery while fails says so (it
// reports the failure to the scheduler, as a service integrated with it does, with the
// delivery's x-retry-count, x-retry-key and x-retry-republished-at, then acks) and takes it otherwise. It records
// every arrival with its time.
type destination struct {
	*consumer
	mu        sync.Mutex
	arrivals  []arrival
	reportErr error
}

func (s *stack) destination(queue string, fails func(now time.Time) bool) *destination {
	dst := &destination{}
	dst.consumer = s.consume(queue, func(d amqp.Delivery) {
		now := time.Now()
		n, _ := message.HeaderInt64(d.Headers["x-retry-count"])
		dst.record(arrival{at: now, id: d.MessageId, count: n})
		if fails(now) {
			key, _ := d.Headers["x-retry-key"].(string)
			at, _ := message.HeaderInt64(d.Headers[message.HeaderRetryRepublishedAt])
			err := s.sendRetry(message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: queue,
				ErrorReason: fmt.Sprintf("503 from downstream #%d", n+1), HTTPStatus: 503, RetryCount: int(n), RetryKey: key,
				RepublishedAtMs: at})
			dst.failed(err)
		}
		_ = d.Ack(false)
	})
	return dst
}

func (d *destination) record(a arrival) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arrivals = append(d.arrivals, a)
}

func (d *destination) failed(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil && d.reportErr == nil {
		d.reportErr = fmt.Errorf("report a failure: %w", err)
	}
}

func (d *destination) seen() ([]arrival, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]arrival(nil), d.arrivals...), d.reportErr
}

// arrivalsOf keeps the arrivals of the messages ids.
func arrivalsOf(all []arrival, ids []string) []arrival {
	var out []arrival
	for _, a := range all {
		if slices.Contains(ids, a.id) {
			out = append(out, a)
		}
	}
	return out
}

func always(time.Time) bool { return true }
func never(time.Time) bool  { return false }

// failMessages reports n first failures of messages to queue: ids "<prefix>-0" onwards.
func (s *stack) failMessages(queue, prefix string, n int) []string {
	s.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		s.publishRetry(message.RetryMessage{MessageID: ids[i], OriginalPayload: []byte(ids[i]), OriginalQueue: queue,
			ErrorReason: "503 from downstream #1", HTTPStatus: 503})
	}
	return ids
}

// breakerState queries the destination's breaker workflow.
func (s *stack) breakerState(queue string) (workflows.BreakerState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := s.tc.QueryWorkflow(ctx, message.BreakerWorkflowID(queue), "", workflows.QueryBreakerState)
	if err != nil {
		return workflows.BreakerState{}, fmt.Errorf("query the breaker of %s: %w", queue, err)
	}
	var st workflows.BreakerState
	return st, v.Get(&st)
}

// holdingSpan is a stretch of time during which a breaker held its destination: from a
// transition out of closed to the next closed (or now, when none came yet).
type holdingSpan struct {
	from, to  time.Time
	halfOpens []time.Time
}

// holdingSpans reads the spans from a breaker's events.
func holdingSpans(events []workflows.BreakerEvent, now time.Time) []holdingSpan {
	var spans []holdingSpan
	var cur *holdingSpan
	for _, e := range events {
		switch {
		case e.To.Holds() && cur == nil:
			cur = &holdingSpan{from: e.At}
		case e.To == workflows.BreakerClosed && cur != nil:
			cur.to = e.At
			spans = append(spans, *cur)
			cur = nil
		}
		if e.To == workflows.BreakerHalfOpen && cur != nil {
			cur.halfOpens = append(cur.halfOpens, e.At)
		}
	}
	if cur != nil {
		cur.to = now
		spans = append(spans, *cur)
	}
	return spans
}

// gateLag is how long after visibility lists a breaker as holding a republish may still go
// out on a quiet machine: each process's gate reads that list every BREAKER_REFRESH (500 ms),
// and a republish that passed the gate just before is still in flight. It sorts the
// republishes the outage test logs (within the lag, after it, against the probes released):
// a figure, since on a loaded machine a gate's refresh and a publish in flight take seconds
// (with one of two cores kept busy, republishes came 10 s after the breaker opened; on
// PostgreSQL under load the gates' lists failed for a while, docs/performance.md). How long
// visibility takes to list the transition is the engine's: the test measures it too.
const gateLag = 2 * time.Second

// gateLearns bounds what the outage test asserts of the gates: no republish but the probes
// more than this after visibility listed the breaker holding. It stands for "the gates learn
// of an open breaker by their refresh, not never, and do not stay open while their list
// fails", not for how soon: 60 refreshes, three times the longest lag seen on a loaded
// machine, and half the outage, whose later retries a gate that never learns lets through.
const gateLearns = 30 * time.Second

// The outage scenario: 200 messages under the default policy fail at once, and their
// destination's consumer fails every delivery for the first 60 s, then takes them.
const (
	outageMessages = 200
	outageLength   = 60 * time.Second
)

// outageRun is one run of the outage scenario: its destination, its messages, its clock,
// and what visibility listed of its breaker.
type outageRun struct {
	dst              *destination
	ids              []string
	start, recovered time.Time
	listed           *holdingWatch
}

// outage runs the scenario's start on s (already running) for queue.
func (s *stack) outage(queue string) *outageRun {
	s.t.Helper()
	r := &outageRun{start: time.Now(), listed: s.watchHolding(queue)}
	r.recovered = r.start.Add(outageLength)
	r.dst = s.destination(queue, func(now time.Time) bool { return now.Before(r.recovered) })
	r.ids = s.failMessages(queue, "outage", outageMessages)
	return r
}

// holdingWatch records when visibility, what every process's gate reads, first listed a
// breaker as holding after it did not.
type holdingWatch struct {
	mu     sync.Mutex
	listed []time.Time
}

// watchHolding polls visibility every 100 ms, until the test ends, for queue's breaker with
// the query the gates use.
func (s *stack) watchHolding(queue string) *holdingWatch {
	w := &holdingWatch{}
	query := visibility.BreakerWorkflows(visibility.Running, s.cfg.TaskQueue).
		BreakerModes(visibility.HoldingBreakerModes...).
		Equal(visibility.WorkflowID, message.BreakerWorkflowID(queue)).String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		was := false
		for {
			lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := s.tc.ListWorkflow(lctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.temporal.Namespace, Query: query})
			lcancel()
			if err == nil {
				now := len(resp.Executions) > 0
				if now && !was {
					w.mu.Lock()
					w.listed = append(w.listed, time.Now())
					w.mu.Unlock()
				}
				was = now
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// firstAtOrAfter is the first time visibility listed the breaker holding at or after from,
// or until when it never did before until.
func (w *holdingWatch) firstAtOrAfter(from, until time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, at := range w.listed {
		if !at.Before(from) && at.Before(until) {
			return at
		}
	}
	return until
}

// TestBreakerHoldsRetriesThroughAnOutage: with breakers on (the default), the destination's
// breaker opens after the first retries fail, holds every retry due while the consumer is
// down except its probes, and releases them once a probe passes: nothing is dead-lettered,
// every message is delivered after the recovery.
func TestBreakerHoldsRetriesThroughAnOutage(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	s.run("all")
	q := s.queue(s.prefix+".outage-orders", nil)
	dead := s.consume(s.dlq, nil)
	s.checkOutageHeld(t, "1 process", q, dead, s.outage(q))
}

// checkOutageHeld waits for the outage scenario's messages to end delivered and checks what
// the breaker held: nothing dead-lettered (the policy's 3 retries take about 17 s, well
// inside the outage: a retry the breaker did not hold would have spent them), every last
// delivery after the recovery within the policy's retries, the breaker opened, held and
// released retries and closed, and no republish but the probes once the gates had surely
// learnt of it (gateLearns). It logs the figures under label: the retries sent into the open
// breaker, those more than gateLag after visibility listed it beside the probes released (how
// fast the gates learn is a benchmark's figure, not this test's).
func (s *stack) checkOutageHeld(t *testing.T, label, q string, dead *consumer, r *outageRun) {
	t.Helper()
	dst, ids, start, recovered := r.dst, r.ids, r.start, r.recovered
	// Every workflow ends delivered; a dead one fails the test at once (it never ends: its
	// run parks it for an operator).
	eventually(t, 8*time.Minute, func() error {
		var dead, open []string
		for _, id := range ids {
			switch s.retryStatus(message.WorkflowID(q, id)) {
			case workflows.StatusDelivered:
			case workflows.StatusDead:
				dead = append(dead, id)
			default:
				open = append(open, id)
			}
		}
		if len(dead) > 0 {
			t.Fatalf("%s: %d of %d messages dead-lettered with breakers on: %v", label, len(dead), len(ids), dead)
		}
		if len(open) > 0 {
			return fmt.Errorf("%d of %d messages not delivered yet", len(open), len(ids))
		}
		return nil
	})
	settled := time.Since(start)
	dead.caughtUp(t)
	dst.caughtUp(t)
	require.Empty(t, dead.all(), "dead letters with breakers on")

	arrivals, err := dst.seen()
	require.NoError(t, err)
	last := map[string]arrival{}
	for _, a := range arrivals {
		if a.at.After(last[a.id].at) {
			last[a.id] = a
		}
	}
	require.Len(t, last, len(ids))
	for _, id := range ids {
		assert.False(t, last[id].at.Before(recovered), "%s: its last delivery came before the recovery", id)
		assert.LessOrEqual(t, last[id].count, int64(3), "%s: within the default policy's 3 retries", id)
	}

	st, err := s.breakerState(q)
	require.NoError(t, err)
	assert.Equal(t, workflows.BreakerClosed, st.Mode, "closed again after the recovery")
	spans := holdingSpans(st.Events, time.Now())
	require.NotEmpty(t, spans, "the breaker never opened: %+v", st.Events)
	probes := st.Settings.WithDefaults().Probes
	var strict, held, late, probeBound int
	var lastInLag, listLag time.Duration // the latest republish within the lag; visibility's longest
	for _, sp := range spans {
		probeBound += probes * len(sp.halfOpens)
		// The transition's time is the breaker's task's; visibility lists it after that task.
		listed := r.listed.firstAtOrAfter(sp.from.Add(-100*time.Millisecond), sp.to)
		listLag = max(listLag, listed.Sub(sp.from))
		for _, a := range arrivals {
			if a.at.Before(sp.from) || !a.at.Before(sp.to) {
				continue
			}
			strict++
			if a.at.Sub(listed) >= gateLag {
				held++
			} else {
				lastInLag = max(lastInLag, a.at.Sub(sp.from))
			}
			if a.at.Sub(listed) >= gateLearns {
				late++
			}
		}
	}
	assert.LessOrEqual(t, late, probeBound, "republishes while the breaker held, %s after visibility listed it, vs the probes released", gateLearns)
	// The retries' own records: the breaker held them and let them go.
	heldAndReleased := 0
	for _, id := range ids {
		mst, err := s.state(message.WorkflowID(q, id))
		require.NoError(t, err, id)
		kinds := map[string]bool{}
		for _, e := range mst.Events {
			kinds[e.Kind] = true
		}
		if kinds["held"] && kinds["released"] {
			heldAndReleased++
		}
	}
	assert.Positive(t, heldAndReleased, "no retry's record shows it held by the breaker and released")

	var during int
	for _, a := range arrivals {
		if a.at.Before(recovered) {
			during++
		}
	}
	t.Logf("%s, breakers on, %d messages, consumer down %s under the default policy: %d dead-lettered, %d delivered, %d held and released; "+
		"%d republishes (%d during the outage, %d after); all settled %s after the first report",
		label, len(ids), outageLength, len(dead.all()), len(ids), heldAndReleased, len(arrivals), during, len(arrivals)-during, settled.Round(time.Second))
	for _, sp := range spans {
		t.Logf("breaker held from +%s to +%s (%s), %d half-opens",
			sp.from.Sub(start).Round(100*time.Millisecond), sp.to.Sub(start).Round(100*time.Millisecond),
			sp.to.Sub(sp.from).Round(100*time.Millisecond), len(sp.halfOpens))
	}
	t.Logf("%s: republishes while it held: %d, of which %d within the gate's lag (the last %s after opening; visibility listed a transition at most %s after it) and %d after it; probes released at most %d",
		label, strict, strict-held, lastInLag.Round(10*time.Millisecond), listLag.Round(10*time.Millisecond), held, probeBound)
	t.Logf("breaker events: %s", describeEvents(st.Events, start))
}

// TestBreakerOffBurnsRetriesThroughAnOutage is the same scenario with the breaker disabled
// (BREAKERS=off): every retry goes out into the outage, and messages are dead-lettered as
// exhausted. The default policy spends its 3 retries in about 17 s, well inside the 60 s
// outage, so the test ends once every message is dead or delivered instead of waiting for
// the recovery.
func TestBreakerOffBurnsRetriesThroughAnOutage(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	s.cfg.Breakers = config.BreakersOff
	s.run("all")
	q := s.queue(s.prefix+".outage-orders", nil)
	dead := s.consume(s.dlq, nil)
	r := s.outage(q)
	dst, ids, start := r.dst, r.ids, r.start

	eventually(t, 3*time.Minute, func() error {
		open := 0
		for _, id := range ids {
			switch s.retryStatus(message.WorkflowID(q, id)) {
			case workflows.StatusDead, workflows.StatusDelivered:
			default:
				open++
			}
		}
		if open > 0 {
			return fmt.Errorf("%d of %d messages neither dead nor delivered", open, len(ids))
		}
		return nil
	})
	settled := time.Since(start)
	dead.caughtUp(t)
	reasons := map[string]int{}
	for _, d := range dead.all() {
		reasons[envelopeOf(t, d).DeadReason]++
	}
	arrivals, err := dst.seen()
	require.NoError(t, err)
	require.Positive(t, reasons["exhausted"], "no message was dead-lettered for exhaustion with breakers off")
	t.Logf("breakers off, %d messages, consumer down %s under the default policy: %d dead-lettered %v, %d republishes, all dead or delivered %s after the first report",
		outageMessages, outageLength, len(dead.all()), reasons, len(arrivals), settled.Round(time.Second))
}

// describeEvents is a breaker's events, times from start.
func describeEvents(events []workflows.BreakerEvent, start time.Time) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\n  +%s %s by %s", e.At.Sub(start).Round(100*time.Millisecond), e.To, e.Actor)
		if e.Detail != "" {
			fmt.Fprintf(&b, ": %s", e.Detail)
		}
	}
	return b.String()
}

// canaryDeadLetters sends n messages to dead at their first failure (policy e2e-once) and
// waits until the API lists them.
func (s *stack) canaryDeadLetters(api *opsAPI, queue string, n int) []string {
	s.t.Helper()
	ids := s.failMessages(queue, "dead", n)
	api.waitTotal(viewerToken, "/api/dead-letters?queue="+url.QueryEscape(queue)+"&page_size=1", n)
	return ids
}

// replayCanary replays queue's dead letters with a canary of n.
func (api *opsAPI) replayCanary(queue string, n int) map[string]any {
	api.t.Helper()
	job := api.waitJob(opToken, api.must(202, opToken, "POST", "/api/dead-letters/replay",
		map[string]any{"queue": queue, "canary": n, "reason": "downstream fixed?"}))
	api.t.Logf("replay with a canary of %d: %v", n, job)
	c := job["canary"].(map[string]any)
	return map[string]any{"stopped": job["stopped"] != nil, "reason": job["stopped"], "replayed": job["done"],
		"failed": c["failed"], "delivered": c["delivered"]}
}

const (
	canaryDeadLetters = 100
	canarySize        = 10
)

// TestCanaryReplayStopsIntoAFailingConsumer: the canary fails again, so the replay stops
// after it and says why; the rest stay dead, never republished.
func TestCanaryReplayStopsIntoAFailingConsumer(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".once-orders", nil)
	dst := s.destination(q, always)
	s.canaryDeadLetters(api, q, canaryDeadLetters)
	dst.caughtUp(t)
	before, err := dst.seen()
	require.NoError(t, err)
	require.Empty(t, before, "a dead letter was republished before the replay")

	began := time.Now()
	out := api.replayCanary(q, canarySize)
	took := time.Since(began)
	assert.Equal(t, true, out["stopped"], "the replay did not say it stopped: %v", out)
	assert.Contains(t, out["reason"], "canary", "the replay did not say why it stopped: %v", out)
	assert.EqualValues(t, canarySize, out["replayed"])
	assert.EqualValues(t, canarySize, out["failed"])
	assert.EqualValues(t, 0, out["delivered"])

	dst.caughtUp(t)
	arrivals, err := dst.seen()
	require.NoError(t, err)
	assert.LessOrEqual(t, len(arrivals), canarySize, "republished into a failing consumer")
	// The canary is dead again, the rest never left: all 100 are dead letters.
	api.waitTotal(viewerToken, "/api/dead-letters?queue="+url.QueryEscape(q)+"&page_size=1", canaryDeadLetters)
	t.Logf("canary %d of %d dead letters into a failing consumer: %d republished, stopped after %s",
		canarySize, canaryDeadLetters, len(arrivals), took.Round(100*time.Millisecond))
}

// TestCanaryReplayIntoAHealthyConsumer: the canary is delivered, the replay goes on at the
// replay rate and every dead letter is delivered.
func TestCanaryReplayIntoAHealthyConsumer(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".once-orders", nil)
	dst := s.destination(q, never)
	ids := s.canaryDeadLetters(api, q, canaryDeadLetters)

	began := time.Now()
	out := api.replayCanary(q, canarySize)
	took := time.Since(began)
	assert.NotEqual(t, true, out["stopped"], "the replay stopped into a healthy consumer: %v", out)
	assert.EqualValues(t, canaryDeadLetters, out["replayed"])
	assert.EqualValues(t, canaryDeadLetters, out["delivered"])
	assert.EqualValues(t, 0, out["failed"])

	for _, id := range ids {
		require.Equal(t, workflows.StatusDelivered, s.workflowResult(message.WorkflowID(q, id), patience).Status, id)
	}
	dst.caughtUp(t)
	arrivals, err := dst.seen()
	require.NoError(t, err)
	got := map[string]bool{}
	for _, a := range arrivals {
		got[a.id] = true
	}
	assert.Len(t, got, canaryDeadLetters, "dead letters delivered")
	t.Logf("canary %d of %d dead letters into a healthy consumer: %d republishes, response after %s, all delivered after %s",
		canarySize, canaryDeadLetters, len(arrivals), took.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
}

// TestPauseHoldsAndResumeReleasesAtTheRate: a paused destination's due retries wait, held,
// with nothing republished; on resume they go out oldest first at the policy's release rate
// and are delivered, each at its first retry.
func TestPauseHoldsAndResumeReleasesAtTheRate(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".paused-orders", nil)
	dst := s.destination(q, never)
	breaker := "/api/breakers/" + url.PathEscape(q)

	out := api.must(200, opToken, "POST", breaker+"/pause", map[string]any{"reason": "payments deploy"})
	t.Logf("pause: %v", out)
	st, err := s.breakerState(q)
	require.NoError(t, err)
	require.Equal(t, workflows.BreakerPaused, st.Mode)
	require.NotNil(t, st.PausedBy)
	assert.Equal(t, "op", st.PausedBy.Actor, "the actor comes from the token")
	assert.Equal(t, "payments deploy", st.PausedBy.Reason)

	// The processes learn of the pause from visibility (BREAKER_REFRESH plus the store's lag):
	// a retry due before they have may still go out, so messages are sent one at a time until
	// one is held; then the rest come due.
	const n = 20
	heldPath := "/api/retry-queue?status=held&page_size=1&queue=" + url.QueryEscape(q)
	var first []string
	for k := 1; first == nil; k++ {
		require.LessOrEqual(t, k, 20, "no retry was held within 20 messages of the pause")
		one := s.failMessages(q, fmt.Sprintf("paused-first%d", k), 1)
		var st workflows.Status
		eventually(t, patience, func() error {
			if st = s.retryStatus(message.WorkflowID(q, one[0])); st != workflows.StatusHeld && st != workflows.StatusDelivered {
				return fmt.Errorf("RetryStatus %q", st)
			}
			return nil
		})
		if st == workflows.StatusHeld {
			first = one
		}
	}
	api.waitTotal(viewerToken, heldPath, 1)
	ids := append(first, s.failMessages(q, "paused", n-1)...)
	api.waitTotal(viewerToken, heldPath, n)
	dst.caughtUp(t)
	arrivals, err := dst.seen()
	require.NoError(t, err)
	require.Empty(t, arrivalsOf(arrivals, ids), "republished while paused")
	for _, id := range ids {
		require.Equal(t, workflows.StatusHeld, s.retryStatus(message.WorkflowID(q, id)), id)
	}
	list := api.must(200, opToken, "GET", "/api/breakers", nil)
	t.Logf("breakers while paused: %v", list)

	resumed := time.Now()
	api.must(200, opToken, "POST", breaker+"/resume", map[string]any{"reason": "deploy done"})
	for _, id := range ids {
		require.Equal(t, workflows.StatusDelivered, s.workflowResult(message.WorkflowID(q, id), patience).Status, id)
	}
	dst.caughtUp(t)
	arrivals, err = dst.seen()
	require.NoError(t, err)
	arrivals = arrivalsOf(arrivals, ids)
	require.Len(t, arrivals, n, "each held retry republished once")
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].at.Before(arrivals[j].at) })
	for _, a := range arrivals {
		assert.EqualValues(t, 1, a.count, "%s: a held retry is not an attempt", a.id)
	}
	// Released in batches of release_rate a second: n/rate batches span at least
	// (n/rate - 1) s between the first arrival and the last.
	span := arrivals[n-1].at.Sub(arrivals[0].at)
	minSpan := time.Duration(n/pausedReleaseRate-1) * time.Second
	assert.GreaterOrEqual(t, span, minSpan-300*time.Millisecond, "released faster than %d a second", pausedReleaseRate)
	perSecond := map[int]int{}
	for _, a := range arrivals {
		perSecond[int(a.at.Sub(arrivals[0].at)/time.Second)]++
	}
	st, err = s.breakerState(q)
	require.NoError(t, err)
	assert.Equal(t, workflows.BreakerClosed, st.Mode)
	t.Logf("%d held retries released at %d/s: first arrival %s after resume, last %s after the first (by second: %v)",
		n, pausedReleaseRate, arrivals[0].at.Sub(resumed).Round(10*time.Millisecond), span.Round(10*time.Millisecond), perSecond)
	t.Logf("breaker events: %s", describeEvents(st.Events, resumed))
}
