//go:build integration

package e2e

import (
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// deadFrom publishes messages of a consuming service that go to dead at once, each with the
// error type and reason given.
func (s *stack) deadFrom(queue, service, errorType, reason string, ids ...string) []string {
	s.t.Helper()
	var wids []string
	for _, id := range ids {
		s.publishRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte("p-" + id), OriginalQueue: queue,
			ErrorReason: reason, ErrorCategory: "permanent", Service: service, ErrorType: errorType})
		wids = append(wids, message.WorkflowID(queue, id))
	}
	return wids
}

// envelopes reads n envelopes from the stack's dead-letter queue, by workflow ID.
func (s *stack) envelopes(n int) map[string]message.Envelope {
	s.t.Helper()
	c := s.consume(s.dlq, nil)
	out := map[string]message.Envelope{}
	for range n {
		e := envelopeOf(s.t, c.next(s.t, patience))
		out[e.WorkflowID] = e
	}
	return out
}

func sorted(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}

// Dead letters of two consuming services are found by service, by error type, by a part of
// the last error in any case, and by either id of their envelope; the rows show the service
// and the External System; a replay filtered by service replays that service's only.
func TestFindDeadLetters(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)

	billing := s.deadFrom(q, "billing", "TimeoutError", "Upstream TIMEOUT after 30s", "b1", "b2")
	shipping := s.deadFrom(q, "shipping", "ValidationError", "missing field sku", "s1")
	envs := s.envelopes(3)
	all := "/api/dead-letters?queue=" + url.QueryEscape(q)
	api.waitTotal(viewerToken, all, 3)

	out := api.waitTotal(viewerToken, all+"&service=billing", 2)
	assert.Equal(t, sorted(billing), sorted(itemIDs(out)))
	row := rowOf(t, out, billing[0])
	assert.Equal(t, "billing", row["service"])
	assert.Equal(t, "TimeoutError", row["error_type"])
	assert.Equal(t, q, row["external_system"], "published to the default exchange: its queue")
	assert.Equal(t, envs[billing[0]].DLQID, row["dlq_id"])
	assert.Equal(t, envs[billing[0]].DLQUUID, row["dlq_uuid"])
	out = api.waitTotal(viewerToken, all+"&service=shipping", 1)
	assert.Equal(t, shipping, itemIDs(out))

	out = api.waitTotal(viewerToken, all+"&error_type=ValidationError", 1)
	assert.Equal(t, shipping, itemIDs(out))
	out = api.must(200, viewerToken, "GET", all+"&error_text="+url.QueryEscape("upstream timeout"), nil)
	assert.Equal(t, sorted(billing), sorted(itemIDs(out)), "a substring, any case")
	out = api.must(200, viewerToken, "GET", all+"&error_text=SKU&service=billing", nil)
	assert.Empty(t, out["items"], "every filter applies")

	// The envelope's ids, as the dead-letter queue carries them, find their dead letter.
	for _, id := range []string{envs[shipping[0]].DLQID, envs[billing[1]].DLQUUID} {
		out = api.waitTotal(viewerToken, "/api/dead-letters?dlq_id="+url.QueryEscape(id), 1)
		require.Len(t, out["items"], 1, id)
		got := out["items"].([]any)[0].(map[string]any)
		assert.True(t, got["dlq_id"] == id || got["dlq_uuid"] == id, "%s found %v", id, got)
	}
	out = api.must(200, viewerToken, "GET", "/api/dead-letters?dlq_id="+url.QueryEscape(billing[0]+"#7"), nil)
	assert.Empty(t, out["items"], "a dlqId no envelope carries")
	code, bad := api.call(viewerToken, "GET", "/api/dead-letters?error_text="+url.QueryEscape("a\x01"), nil)
	assert.Equal(t, 400, code, bad)

	// A replay filtered by service: a dry run counts, the job replays billing's only.
	dry := api.must(200, opToken, "POST", "/api/dead-letters/replay", map[string]any{"queue": q, "service": "billing", "dry_run": true})
	assert.EqualValues(t, 2, dry["count"])
	back := s.consume(q, nil)
	job := api.waitJob(opToken, api.must(202, opToken, "POST", "/api/dead-letters/replay",
		map[string]any{"queue": q, "service": "billing", "reason": "billing fixed"}))
	assert.Equal(t, "completed", job["state"], job)
	assert.EqualValues(t, 2, job["done"], job)
	assert.Equal(t, map[string]any{"queue": q, "service": "billing"}, job["filter"])
	var republished []string
	for range 2 {
		republished = append(republished, back.next(t, patience).MessageId)
	}
	back.caughtUp(t)
	assert.Equal(t, []string{"b1", "b2"}, sorted(republished))
	assert.Len(t, back.all(), 2, "nothing of shipping's was republished")
	assert.Equal(t, workflows.StatusDead, s.retryStatus(shipping[0]))
	for _, id := range billing {
		assert.NotEqual(t, workflows.StatusDead, s.retryStatus(id), id)
	}
	api.waitTotal(viewerToken, all+"&service=billing", 0)

	// A purge by error text acts on what matched when it was asked.
	job = api.waitJob(adminToken, api.must(202, adminToken, "POST", "/api/dead-letters/purge",
		map[string]any{"queue": q, "error_text": "MISSING FIELD", "reason": "bad input"}))
	assert.EqualValues(t, 1, job["done"], job)
	assert.Equal(t, workflows.StatusDiscarded, s.workflowResult(shipping[0], patience).Status)
}

// The page: the Service and External System columns, and the search box finds a dead letter
// by the dlqId of its envelope.
func TestFindDeadLettersInBrowser(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	billing := s.deadFrom(q, "billing", "TimeoutError", "upstream timeout", "b1")[0]
	shipping := s.deadFrom(q, "shipping", "ValidationError", "missing field sku", "s1")[0]
	envs := s.envelopes(2)
	api.waitTotal(viewerToken, "/api/dead-letters?queue="+url.QueryEscape(q), 2)

	p.signIn(api.base, viewerToken, "#app")
	p.until("dead letters "+billing+", "+shipping, rowExpr("#dl-table", billing)+" && "+rowExpr("#dl-table", shipping))
	row := rowSel("#dl-table", billing)
	assert.Equal(t, "billing", p.text(row+" td.service"))
	assert.Equal(t, q, p.text(row+" td.external-system"))
	assert.Equal(t, "shipping", p.text(rowSel("#dl-table", shipping)+" td.service"))
	ok, err := p.eval(`Array.from(document.querySelectorAll("#dl-table thead th")).some(th => th.textContent === "External System")`)
	require.NoError(t, err)
	assert.True(t, ok, "the External System column")

	p.setValue("#dl-filters [name=dlq_id]", envs[shipping].DLQID)
	p.clickNow("the dead letters' filter", `#dl-filters button[type=submit]`)
	p.until("the search by dlqId", rowExpr("#dl-table", shipping)+" && !"+rowExpr("#dl-table", billing))

	p.setValue("#dl-filters [name=dlq_id]", "")
	p.setValue("#dl-filters [name=error_text]", "UPSTREAM")
	p.clickNow("the dead letters' filter", `#dl-filters button[type=submit]`)
	p.until("the error text filter", rowExpr("#dl-table", billing)+" && !"+rowExpr("#dl-table", shipping))
	assert.True(t, strings.Contains(p.attr(row+" td.err", "title"), "TimeoutError"), "the error type on the last error")
}
