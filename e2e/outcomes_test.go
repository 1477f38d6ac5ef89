//go:build integration

package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The e2e-wait policy (the stack's "e2e-*.wait*" queues) waits an hour before a retry and has
// a 2 s quiet window: a message stays scheduled for the operator's retry-now however slow the
// machine, only that retry-now can republish it, and its outcome is known about 2 s after it.

// outcomeWait is the ?wait of the tests' retries: the most the API allows (maxOutcomeWait), so
// that a loaded machine's slow outcome is still awaited rather than answered as pending.
const outcomeWait = "60s"

// waitingRetries publishes a failure of each id on queue and waits until each is scheduled.
func (s *stack) waitingRetries(queue string, ids ...string) []string {
	s.t.Helper()
	var wids []string
	for _, id := range ids {
		s.publishRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte("p-" + id), OriginalQueue: queue,
			ErrorReason: "503 from the api", ErrorCategory: "transient"})
		wids = append(wids, message.WorkflowID(queue, id))
	}
	for _, id := range wids {
		s.waitRetryStatus(id, workflows.StatusScheduled, patience)
	}
	return wids
}

// reportsBack is a consumer of queue that fails every delivery and reports it back with the
// scheduler's headers, as an integrated service does.
func (s *stack) reportsBack(queue string) (*consumer, func() error) {
	return s.failingConsumer(queue, func(d amqp.Delivery, n int, key string) message.RetryMessage {
		return message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: queue,
			ErrorReason: fmt.Sprintf("still 503 after retry #%d", n), ErrorCategory: "transient", RetryCount: n, RetryKey: key}
	})
}

// outcomeQueues are the two queues of the outcome tests: ok's consumer takes every retry,
// bad's reports every retry failed again (reportErr is reportsBack's).
type outcomeQueues struct {
	ok, bad   string
	okC, badC *consumer
	reportErr func() error
}

func (s *stack) outcomeQueues() outcomeQueues {
	s.t.Helper()
	q := outcomeQueues{ok: s.queue(s.prefix+".wait-ok", nil), bad: s.queue(s.prefix+".wait-bad", nil)}
	q.okC = s.consume(q.ok, nil)
	q.badC, q.reportErr = s.reportsBack(q.bad)
	return q
}

func TestRetryNowOutcomeDelivered(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".wait-ok", nil)
	c := s.consume(q, nil)
	id := s.waitingRetries(q, "fine")[0]

	sent := time.Now()
	out := api.must(200, opToken, "POST", msgPath(id)+"/retry?wait="+outcomeWait, map[string]string{"reason": "api back"})
	took := time.Since(sent)
	oc, ok := out["outcome"].(map[string]any)
	require.True(t, ok, "an outcome: %v", out)
	assert.Equal(t, "delivered", oc["result"], "%v", out)
	assert.Equal(t, "delivered", oc["status"])
	// A lower bound, which no slowness breaks: the outcome waited for the quiet window.
	assert.GreaterOrEqual(t, took, 2*time.Second, "delivered only once the 2 s quiet window passed")
	d := c.next(t, patience)
	assert.Equal(t, "fine", d.MessageId)
	assert.EqualValues(t, 1, d.Headers[message.HeaderRetryCount])
	res := s.workflowResult(id, patience)
	assert.Equal(t, workflows.StatusDelivered, res.Status)
	// The republish was the retry-now's (the policy's first delay is an hour): one republish,
	// after the operator's event in the run's record.
	c.caughtUp(t)
	assert.Len(t, c.all(), 1, "one republish")
	st, err := s.state(id)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Sequence)
	assert.True(t, slices.ContainsFunc(st.Events, func(e workflows.Event) bool {
		return e.Kind == workflows.SignalRetryNow && e.Actor == "op" && e.Detail == "api back"
	}), "the operator's retry-now is in the run's record: %+v", st.Events)
}

func TestRetryNowOutcomeFailedAgain(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".wait-bad", nil)
	c, reportErr := s.reportsBack(q)
	id := s.waitingRetries(q, "broken")[0]

	out := api.must(200, opToken, "POST", msgPath(id)+"/retry?wait="+outcomeWait, nil)
	require.NoError(t, reportErr())
	oc, ok := out["outcome"].(map[string]any)
	require.True(t, ok, "an outcome: %v", out)
	assert.Equal(t, "failed_again", oc["result"], "%v", out)
	assert.Equal(t, "still 503 after retry #1", oc["error"], "the new failure's error")
	assert.Equal(t, "transient", oc["category"])
	assert.Equal(t, "scheduled", oc["status"], "retried again on the policy's schedule")
	st := out["state"].(map[string]any)
	assert.Len(t, st["attempts"], 2, "the first failure and the retry's")
	assert.Len(t, c.all(), 1, "one republish")

	// Without a wait the answer is the state right after the retry, as before.
	out = api.must(200, opToken, "POST", msgPath(id)+"/retry", nil)
	assert.NotContains(t, out, "outcome")
	api.must(400, opToken, "POST", msgPath(id)+"/retry?wait=2m", nil)
}

func TestBulkRetryCountsOutcomes(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.outcomeQueues()
	var ok, bad []string
	for i := range 10 {
		ok = append(ok, fmt.Sprintf("ok-%02d", i))
		bad = append(bad, fmt.Sprintf("bad-%02d", i))
	}
	ids := append(s.waitingRetries(q.ok, ok...), s.waitingRetries(q.bad, bad...)...)
	require.Len(t, ids, 20)

	out := api.must(200, opToken, "POST", "/api/retry-queue/bulk-retry?wait="+outcomeWait, map[string]any{"ids": ids, "reason": "api back"})
	require.NoError(t, q.reportErr())
	assert.EqualValues(t, 20, out["succeeded"], "%v", out)
	assert.EqualValues(t, 0, out["failed"], "%v", out)
	assert.Equal(t, map[string]any{"succeeded": 10.0, "failed_again": 10.0, "dead": 0.0, "closed": 0.0, "pending": 0.0}, out["outcomes"])
	assert.Len(t, q.okC.all(), 10)
	assert.Len(t, q.badC.all(), 10)
	for _, id := range ids[:10] {
		assert.Equal(t, workflows.StatusDelivered, s.retryStatus(id), id)
	}
}

// The page's Retry now waits for the outcome and says it: Retry successful, or the failure.
func TestOpsBrowserRetryNowShowsTheOutcome(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.outcomeQueues()
	fine := s.waitingRetries(q.ok, "fine")[0]
	broken := s.waitingRetries(q.bad, "broken")[0]
	p.signIn(api.base, opToken, "#rq-table")
	retryNow := func(id string) {
		t.Helper()
		p.until("scheduled retry "+id, rowExpr("#rq-table", id))
		p.clickNow("retry now of "+id, rowSel("#rq-table", id)+` td.actions button:nth-child(2)`)
	}

	retryNow(fine)
	p.until("the retry's outcome", `document.querySelector("#progress").textContent.includes("Retry successful")`)
	assert.Equal(t, "Retried "+fine+": Retry successful.", p.text("#progress"))

	retryNow(broken)
	p.until("the retry's failure", `document.querySelector("#progress").textContent.includes("Failed again")`)
	assert.Equal(t, "Retried "+broken+": Failed again: still 503 after retry #1 (transient).", p.text("#progress"))

	// Retry selected: the job's outcomes show as they settle.
	many := append(s.waitingRetries(q.ok, "fine-2"), s.waitingRetries(q.bad, "broken-2")...)
	for _, id := range many {
		p.until("scheduled retry "+id, rowExpr("#rq-table", id))
	}
	p.bulk("#rq-table", "#rq-bulk-retry", many...)
	p.until("the bulk retry's outcomes", `document.querySelector("#job-outcomes").textContent.includes("0 pending")`)
	assert.Equal(t, "Outcomes: 1 delivered, 1 failed again, 0 pending.", p.text("#job-outcomes"))
	require.NoError(t, q.reportErr())
}

// A bulk retry job counts signals sent as it goes; GET /api/jobs/{id} adds how the retried
// messages fared, as they settle.
func TestBulkRetryJobCountsOutcomes(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.outcomeQueues()
	ids := append(s.waitingRetries(q.ok, "ok-1", "ok-2", "ok-3"), s.waitingRetries(q.bad, "bad-1", "bad-2")...)
	refused := s.dead(q.ok, "", "dead-1")[0]
	s.waitRetryStatus(refused, workflows.StatusDead, patience)

	job := api.waitJob(opToken, api.must(202, opToken, "POST", "/api/retry-queue/bulk-retry",
		map[string]any{"ids": append(ids, refused), "reason": "api back"}))
	assert.EqualValues(t, 5, job["done"], "%v", job)
	assert.EqualValues(t, 1, job["failed"], "a dead letter is not on the retry queue")
	id := job["id"].(string)
	want := map[string]any{"succeeded": 3.0, "failed_again": 2.0, "dead": 0.0, "closed": 0.0, "pending": 0.0}
	eventually(t, patience, func() error {
		got := api.job(opToken, id)["outcomes"]
		if !assert.ObjectsAreEqual(want, got) {
			return fmt.Errorf("outcomes %v, want %v", got, want)
		}
		return nil
	})
	require.NoError(t, q.reportErr())
}
