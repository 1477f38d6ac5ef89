package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// settleAs makes the fake settle each retried message by its message id once the retry was
// applied (republished), on the state query after it, the way RetryWorkflow does later:
// "ok…" delivered (its run completes), "bad…" a new failure, "dead…" a new failure that
// sends it to dead; any other stays awaiting its outcome.
func settleAs(h *harness) {
	h.fake.onRetry = func(s *workflows.State) {
		s.Sequence++
		s.Events[len(s.Events)-1].At = t0 // the API's clock
	}
	h.fake.onQuery = func(s *workflows.State) {
		if s.Status != workflows.StatusRepublishing {
			return
		}
		id := s.Message.MessageID
		fail := message.Attempt{Attempt: len(s.Attempts) + 1, Timestamp: t0.Add(time.Minute), Error: "502 from " + id, Category: "transient"}
		switch {
		case len(id) >= 2 && id[:2] == "ok":
			s.Status = workflows.StatusDelivered
			h.fake.closed[s.WorkflowID] = true
		case len(id) >= 3 && id[:3] == "bad":
			s.Status = workflows.StatusScheduled
			s.Attempts = append(s.Attempts, fail)
		case len(id) >= 4 && id[:4] == "dead":
			s.Status = workflows.StatusDead
			s.Attempts = append(s.Attempts, fail)
		default:
			s.Status = workflows.StatusAwaitingOutcome
		}
	}
}

// scheduledOrders is a scheduled message on the orders queue for each id, then the states
// rest: the messages settleAs settles by their ids.
func scheduledOrders(ids []string, rest ...workflows.State) []workflows.State {
	var out []workflows.State
	for _, id := range ids {
		out = append(out, item("orders", id, workflows.StatusScheduled, t0, ""))
	}
	return append(out, rest...)
}

// idsBody is the body of a bulk call on the orders queue's messages ids.
func idsBody(ids ...string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = `"retry/orders/` + id + `"`
	}
	return `{"ids":[` + strings.Join(quoted, ",") + `]}`
}

func TestRetryWaitsForItsOutcome(t *testing.T) {
	h := newHarness(t, scheduledOrders([]string{"ok1", "bad1", "dead1", "slow1"})...)
	settleAs(h)
	cases := []struct {
		id, result, status, err string
	}{
		{"ok1", ResultDelivered, "delivered", ""},
		{"bad1", ResultFailedAgain, "scheduled", "502 from bad1"},
		{"dead1", ResultDead, "dead", "502 from dead1"},
		{"slow1", ResultPending, "awaiting-outcome", ""},
	}
	for _, c := range cases {
		code, out := h.do("o", "POST", "/api/messages/retry%2Forders%2F"+c.id+"/retry?wait=300ms", "")
		require.Equal(t, 200, code, out)
		oc, ok := out["outcome"].(map[string]any)
		require.True(t, ok, "%s: an outcome: %v", c.id, out)
		assert.Equal(t, c.result, oc["result"], c.id)
		assert.Equal(t, c.status, oc["status"], c.id)
		assert.Equal(t, c.status, out["state"].(map[string]any)["status"], "%s: the state is the latest read", c.id)
		if c.err != "" {
			assert.Equal(t, c.err, oc["error"], c.id)
			assert.Equal(t, "transient", oc["category"], c.id)
		}
	}
	assert.Contains(t, h.log.String(), `"outcome":"failed_again"`, "the outcome is logged")
}

func TestRetryWithoutWaitAnswersAtOnce(t *testing.T) {
	h := newHarness(t, item("orders", "ok1", workflows.StatusScheduled, t0, ""))
	settleAs(h)
	code, out := h.do("o", "POST", "/api/messages/retry%2Forders%2Fok1/retry", "")
	require.Equal(t, 200, code, out)
	assert.NotContains(t, out, "outcome")
	assert.Equal(t, "republishing", out["state"].(map[string]any)["status"])
}

func TestOutcomeWaitRefusals(t *testing.T) {
	h := newHarness(t,
		item("orders", "s", workflows.StatusScheduled, t0, ""),
		item("orders", "d", workflows.StatusDead, t0, ""),
	)
	for _, c := range []struct{ path, contains string }{
		{"/api/messages/retry%2Forders%2Fs/retry?wait=61s", "from 0 to 1m0s"},
		{"/api/messages/retry%2Forders%2Fs/retry?wait=-1s", "from 0 to 1m0s"},
		{"/api/messages/retry%2Forders%2Fs/retry?wait=soon", "not a duration"},
		{"/api/messages/retry%2Forders%2Fs/retry?wiat=1s", "unknown query parameter"},
		{"/api/messages/retry%2Forders%2Fs/skip?wait=5s", "retry only"},
		{"/api/dead-letters/bulk-resolve?wait=5s", "bulk retry only"},
		{"/api/dead-letters/bulk-retry?wait=2m", "not true, false or a duration"},
	} {
		code, out := h.do("o", "POST", c.path, `{"ids":["retry/orders/d"]}`)
		assert.Equal(t, 400, code, "%s: %v", c.path, out)
		assert.Contains(t, out["error"], c.contains, c.path)
	}
	assert.Equal(t, workflows.StatusScheduled, h.fake.wfs["retry/orders/s"].Status, "a refused call acts on nothing")
	assert.Equal(t, workflows.StatusDead, h.fake.wfs["retry/orders/d"].Status, "a refused call acts on nothing")
}

func TestBulkRetryCountsOutcomes(t *testing.T) {
	retried := []string{"ok1", "ok2", "bad1", "dead1", "slow1"}
	h := newHarness(t, scheduledOrders(retried, item("orders", "gone", workflows.StatusDead, t0, ""))...)
	settleAs(h)
	code, out := h.do("o", "POST", "/api/retry-queue/bulk-retry?wait=300ms", idsBody(append(retried, "gone")...))
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 5, out["succeeded"], "signals sent")
	assert.EqualValues(t, 1, out["failed"], "a dead letter is not on the retry queue")
	assert.Equal(t, map[string]any{"succeeded": 2.0, "failed_again": 1.0, "dead": 1.0, "closed": 0.0, "pending": 1.0}, out["outcomes"])

	// wait=true acts in the call as before, without outcomes.
	h2 := newHarness(t, item("orders", "ok1", workflows.StatusScheduled, t0, ""))
	code, out = h2.do("o", "POST", "/api/retry-queue/bulk-retry?wait=true", `{"ids":["retry/orders/ok1"]}`)
	require.Equal(t, 200, code, out)
	assert.NotContains(t, out, "outcomes")
	assert.EqualValues(t, 1, out["succeeded"])
}

// A retry from dead is judged from its reset: a failure reported before it is not a new one.
func TestBulkRetryFromDeadJudgedAfterTheReset(t *testing.T) {
	h := newHarness(t, item("orders", "bad1", workflows.StatusDead, t0, ""))
	settleAs(h)
	h.fake.onRetry = func(*workflows.State) {} // the reset alone says the retry was applied
	code, out := h.do("o", "POST", "/api/dead-letters/bulk-retry?wait=300ms", `{"ids":["retry/orders/bad1"]}`)
	require.Equal(t, 200, code, out)
	assert.Equal(t, map[string]any{"succeeded": 0.0, "failed_again": 1.0, "dead": 0.0, "closed": 0.0, "pending": 0.0}, out["outcomes"])
}

// A bulk retry job's progress, as GET /api/jobs/{id} shows it, counts how the messages it
// retried fared; an id the job could not retry is in no count.
func TestBulkRetryJobShowsOutcomes(t *testing.T) {
	retried := []string{"ok1", "bad1", "dead1", "slow1"}
	h := newHarness(t, scheduledOrders(retried, item("orders", "gone", workflows.StatusDead, t0, ""))...)
	settleAs(h)
	code, out := h.do("o", "POST", "/api/retry-queue/bulk-retry", idsBody(append(retried, "gone")...))
	require.Equal(t, 202, code, out)
	id := out["job"].(map[string]any)["id"].(string)
	assert.NotContains(t, out["job"], "outcomes", "nothing is known when the job starts")
	done := h.runJob()
	assert.Equal(t, 4, done.Done)
	assert.Equal(t, 1, done.Failed)

	code, out = h.do("v", "GET", "/api/jobs/"+id, "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, map[string]any{"succeeded": 1.0, "failed_again": 1.0, "dead": 1.0, "closed": 0.0, "pending": 1.0},
		out["job"].(map[string]any)["outcomes"])

	// Another kind of job has none.
	code, out = h.do("o", "POST", "/api/retry-queue/bulk-skip", `{"ids":["retry/orders/slow1"]}`)
	require.Equal(t, 202, code, out)
	code, out = h.do("v", "GET", "/api/jobs/"+out["job"].(map[string]any)["id"].(string), "")
	require.Equal(t, 200, code, out)
	assert.NotContains(t, out["job"], "outcomes")
}
