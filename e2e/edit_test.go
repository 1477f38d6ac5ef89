//go:build integration

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// deadLetters publishes a permanent failure of each id on queue and waits until each is dead.
func (s *stack) deadLetters(queue string, ids ...string) []string {
	s.t.Helper()
	wids := s.dead(queue, "", ids...)
	for _, id := range wids {
		s.waitRetryStatus(id, workflows.StatusDead, patience)
	}
	return wids
}

// untouched says that the item id was neither retried nor edited: still dead, no republish.
func (s *stack) untouched(id string) {
	s.t.Helper()
	st, err := s.state(id)
	require.NoError(s.t, err)
	assert.Equal(s.t, workflows.StatusDead, st.Status)
	assert.Zero(s.t, st.Sequence, "nothing republished")
	assert.Zero(s.t, st.Resets)
	assert.Empty(s.t, st.Edits)
}

func TestEditAndReplayADeadLetter(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".edit", nil)
	c := s.consume(q, nil)
	id := s.deadLetters(q, "bad-schema")[0]

	// Refused as ingress refuses a report: nothing is published.
	out := api.must(400, adminToken, "POST", msgPath(id)+"/retry", map[string]any{"headers": map[string]any{"x-retry-count": 0}})
	assert.Contains(t, out["error"], `header "x-retry-count" is the scheduler's or the broker's own`)
	out = api.must(400, adminToken, "POST", msgPath(id)+"/retry", map[string]any{"payload": strings.Repeat("x", 65537)})
	assert.Contains(t, out["error"], "over the 65536-byte limit (MAX_MESSAGE_BYTES)")
	api.must(400, adminToken, "POST", msgPath(id)+"/retry", map[string]any{"payload_base64": "not base64!"})
	api.must(403, viewerToken, "POST", msgPath(id)+"/retry", map[string]any{"payload": "x"})
	out = api.must(403, opToken, "POST", msgPath(id)+"/retry", map[string]any{"payload": "x"})
	assert.Contains(t, out["error"], "needs the admin role")
	s.untouched(id)

	out = api.must(200, adminToken, "POST", msgPath(id)+"/retry", map[string]any{
		"payload": `{"order":42,"schema":2}`, "headers": map[string]any{"x-schema": "v2", "x-attempt-note": 7},
		"reason": "producer sent schema 1 by mistake"})
	assert.Equal(t, "edit-retry", out["action"])
	d := c.next(t, patience)
	assert.Equal(t, "bad-schema", d.MessageId)
	assert.Equal(t, `{"order":42,"schema":2}`, string(d.Body))
	assert.Equal(t, "v2", d.Headers["x-schema"])
	assert.EqualValues(t, 7, d.Headers["x-attempt-note"])
	assert.EqualValues(t, 1, d.Headers["x-retry-count"], "the scheduler's own headers are stamped as on any retry")

	res := s.workflowResult(id, patience)
	assert.Equal(t, workflows.StatusDelivered, res.Status)
	st, err := s.state(id)
	require.NoError(t, err)
	require.Len(t, st.Edits, 1)
	e := st.Edits[0]
	assert.Equal(t, "admin", e.Actor)
	assert.Equal(t, "producer sent schema 1 by mistake", e.Reason)
	require.NotNil(t, e.PayloadBefore)
	assert.Equal(t, len("p-bad-schema"), e.PayloadBefore.Size)
	assert.Equal(t, []string{"x-attempt-note", "x-schema"}, e.HeadersSet)
	var kinds []string
	for _, ev := range st.Events {
		kinds = append(kinds, ev.Kind)
	}
	assert.Contains(t, kinds, "edited")
	s.recordHistory(id, "dead-edited-and-replayed")
}

func TestReplayToAnotherDestination(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	other := s.queue(s.prefix+".orders-v2", nil)
	c := s.consume(q, nil)
	cOther := s.consume(other, nil)
	id := s.deadLetters(q, "moved")[0]

	for _, bad := range []struct {
		dest map[string]string
		want string
	}{
		{map[string]string{"queue": s.ingress}, "is the scheduler's own ingress queue"},
		{map[string]string{"queue": s.dlq}, "is the scheduler's own"},
		{map[string]string{"exchange": "amq.direct", "routing_key": other}, "amq.* exchanges are not destinations"},
	} {
		out := api.must(403, adminToken, "POST", msgPath(id)+"/retry", map[string]any{"destination": bad.dest})
		assert.Contains(t, out["error"], "destination not allowed: ")
		assert.Contains(t, out["error"], bad.want)
	}
	api.must(400, adminToken, "POST", msgPath(id)+"/retry", map[string]any{"destination": map[string]string{"exchange": "orders-x"}})
	s.untouched(id)

	api.must(403, opToken, "POST", msgPath(id)+"/retry", map[string]any{"destination": map[string]string{"queue": other}})
	s.untouched(id)
	out := api.must(200, adminToken, "POST", msgPath(id)+"/retry?wait="+outcomeWait, map[string]any{
		"destination": map[string]string{"queue": other}, "reason": "v1 consumer retired"})
	assert.Equal(t, "delivered", out["outcome"].(map[string]any)["result"], "%v", out)
	d := cOther.next(t, patience)
	assert.Equal(t, "moved", d.MessageId)
	assert.Equal(t, "p-moved", string(d.Body))
	c.caughtUp(t)
	assert.Empty(t, c.all(), "nothing went to the original queue")
	st, err := s.state(id)
	require.NoError(t, err)
	require.Len(t, st.Edits, 1)
	assert.Equal(t, q, st.Edits[0].DestinationBefore.Queue)
	assert.Equal(t, other, st.Edits[0].DestinationAfter.Queue)
	s.recordHistory(id, "dead-replayed-to-another-queue")
}

func TestSnoozeMovesTheRepublish(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	deadQ := s.queue(s.prefix+".snooze", nil)
	// The e2e-wait policy retries an hour after the failure.
	waitQ := s.queue(s.prefix+".wait-snooze", nil)
	cDead := s.consume(deadQ, nil)
	cWait := s.consume(waitQ, nil)
	dead := s.deadLetters(deadQ, "later")[0]
	scheduled := s.waitingRetries(waitQ, "much-later")[0]

	// A scheduled retry due an hour after its failure moves to 30 s from now: only the snooze
	// can explain its republish then. (30 s: still in the future when a loaded machine's
	// worker applies the snooze, which refuses a time past.)
	until := time.Now().Add(30 * time.Second).UTC().Truncate(time.Second)
	out := api.must(200, opToken, "POST", msgPath(scheduled)+"/snooze", map[string]any{"until": until.Format(time.RFC3339)})
	assert.True(t, until.Equal(nextRetryAt(t, out)), "next retry %v, want %v", nextRetryAt(t, out), until)

	out = api.must(400, opToken, "POST", msgPath(dead)+"/snooze", map[string]any{"for": "10000h"})
	assert.Contains(t, out["error"], "beyond the dead-letter retention")
	api.must(400, opToken, "POST", msgPath(dead)+"/snooze", map[string]any{"until": time.Now().Add(-time.Minute).Format(time.RFC3339)})
	api.must(400, opToken, "POST", msgPath(dead)+"/snooze", map[string]any{"for": "1h", "until": "2030-01-01T00:00:00Z"})
	api.must(400, opToken, "POST", msgPath(dead)+"/snooze", map[string]any{})
	s.untouched(dead)

	// A dead letter's retry is scheduled 4 s from now, not at once.
	out = api.must(200, opToken, "POST", msgPath(dead)+"/snooze", map[string]any{"for": "4s", "reason": "partner back at 10"})
	deadUntil := nextRetryAt(t, out)
	assert.Equal(t, "scheduled", out["state"].(map[string]any)["status"])
	d := cDead.next(t, patience)
	arrived := time.Now()
	assert.Equal(t, "later", d.MessageId)
	assert.False(t, arrived.Before(deadUntil), "arrived at %v, before the snooze's %v", arrived, deadUntil)

	d = cWait.next(t, patience)
	arrived = time.Now()
	assert.Equal(t, "much-later", d.MessageId)
	assert.False(t, arrived.Before(until), "arrived at %v, before the snooze's %v", arrived, until)

	// Once republished, the message awaits its outcome: no snooze then.
	out = api.must(409, opToken, "POST", msgPath(scheduled)+"/snooze", map[string]any{"for": "1m"})
	assert.Contains(t, out["error"], "snooze is allowed only while scheduled or dead")
	for id, name := range map[string]string{dead: "dead-snoozed-delivered", scheduled: "scheduled-snoozed-delivered"} {
		require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status, id)
		s.recordHistory(id, name)
	}
}

// nextRetryAt is the next_retry_at of an action's answer.
func nextRetryAt(t *testing.T, out map[string]any) time.Time {
	t.Helper()
	st, ok := out["state"].(map[string]any)
	require.True(t, ok, "%v", out)
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(st["next_retry_at"]))
	require.NoError(t, err, "%v", st)
	return at
}

// The page's "Edit & retry" sends what the operator changed and says the outcome; a refused
// destination stays in the dialog; "Snooze" schedules a dead letter's retry.
func TestOpsBrowserEditAndSnooze(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".page-edit", nil)
	other := s.queue(s.prefix+".page-other", nil)
	c := s.consume(q, nil)
	cOther := s.consume(other, nil)
	ids := s.deadLetters(q, "page-edit", "page-move", "page-snooze")
	edited, moved, snoozed := ids[0], ids[1], ids[2]
	p.signIn(api.base, adminToken, "#dl-table")
	// open clicks the row's button in the page's current table.
	open := func(id, class, dialog string) {
		t.Helper()
		p.clickNow(class+" of dead letter "+id, rowSel("#dl-table", id)+" td.actions button."+class)
		p.until("the "+dialog+" dialog", `document.querySelector("#`+dialog+`").open`)
	}

	open(edited, "edit-retry", "edit")
	p.do(
		chromedp.SetValue(chromedp.CSS(`#edit-form textarea[name="payload"]`), `{"fixed":true}`),
		chromedp.SetValue(chromedp.CSS(`#edit-form textarea[name="headers"]`), `{"x-fixed": "yes"}`),
		chromedp.SetValue(chromedp.CSS(`#edit-form input[name="reason"]`), "fixed by hand"),
	)
	p.clickNow("the edit's send of "+edited, "#edit-send")
	d := c.next(t, patience)
	assert.Equal(t, `{"fixed":true}`, string(d.Body))
	assert.Equal(t, "yes", d.Headers["x-fixed"])
	p.until("the edit's outcome", `document.querySelector("#progress").textContent.includes("Edited and retried")`)
	assert.Equal(t, "Edited and retried "+edited+": Retry successful.", p.text("#progress"))

	open(moved, "edit-retry", "edit")
	p.do(chromedp.SetValue(chromedp.CSS(`#edit-form input[name="queue"]`), s.ingress))
	p.clickNow("the edit's send of "+moved+" to the ingress", "#edit-send")
	p.until("the refusal", `document.querySelector("#edit-error").textContent.includes("destination not allowed")`)
	assert.Contains(t, p.text("#edit-error"), "is the scheduler's own ingress queue")
	p.do(chromedp.SetValue(chromedp.CSS(`#edit-form input[name="queue"]`), other))
	p.clickNow("the edit's send of "+moved+" to "+other, "#edit-send")
	d = cOther.next(t, patience)
	assert.Equal(t, "page-move", d.MessageId)
	assert.Equal(t, "p-page-move", string(d.Body), "the payload is kept when not changed")

	open(snoozed, "snooze", "snooze")
	snoozedFrom := time.Now()
	p.do(chromedp.SetValue(chromedp.CSS(`#snooze-form input[name="for"]`), "1h"))
	p.clickNow("the snooze's send of "+snoozed, "#snooze-send")
	p.until("the snooze", `document.querySelector("#progress").textContent.includes("Snoozed")`)
	st, err := s.state(snoozed)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusScheduled, st.Status)
	// An hour from when the worker applied it, which was between the click and now.
	assert.False(t, st.NextRetryAt.Before(snoozedFrom.Add(time.Hour).Add(-time.Second)), "next retry %v, before an hour after the click (%v)", st.NextRetryAt, snoozedFrom)
	assert.False(t, st.NextRetryAt.After(time.Now().Add(time.Hour)), "next retry %v, after an hour from now", st.NextRetryAt)
	c.caughtUp(t)
	assert.Len(t, c.all(), 1, "only the edited message went to its queue")
}
