package ops

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// error_text keeps the items whose last error holds the text, whatever its case, after the
// visibility query of the other filters; the rows show the service, the error type, the
// envelope's ids and the External System.
func TestErrorTextFilterAndFindingColumns(t *testing.T) {
	a := item("orders", "a", workflows.StatusDead, t0, "")
	b := item("orders", "b", workflows.StatusDead, t0, "")
	b.Service = "billing"
	b.Attempts = []message.Attempt{{Attempt: 1, Error: "first"}, {Attempt: 2, Error: "Connection RESET by peer", ErrorType: "java.net.SocketException"}}
	b.Message.OriginalExchange, b.Message.OriginalRoutingKey = "events", "order.created"
	c := item("orders", "c", workflows.StatusDead, t0, "")
	c.Attempts, c.DeadDetail = nil, "reset before any attempt"
	h := newHarness(t, a, b, c)

	code, out := h.do("v", "GET", "/api/dead-letters?error_text="+url.QueryEscape("connection reset")+"&service=billing", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, []string{b.WorkflowID}, ids(out))
	assert.EqualValues(t, 1, out["total"])
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `ConsumerService = 'billing'`)
	assert.NotContains(t, h.fake.queries[len(h.fake.queries)-1], "reset", "the text is matched on the state")
	row := out["items"].([]any)[0].(map[string]any)
	assert.Equal(t, "billing", row["service"])
	assert.Equal(t, "java.net.SocketException", row["error_type"], "from the state when the attribute is not set")
	assert.Equal(t, "events:order.created", row["external_system"])
	assert.Equal(t, b.WorkflowID+"#0", row["dlq_id"])
	assert.Equal(t, message.DLQUUID(b.WorkflowID+"#0"), row["dlq_uuid"])

	code, out = h.do("v", "GET", "/api/dead-letters?error_text=RESET", "")
	require.Equal(t, 200, code, out)
	assert.Equal(t, []string{b.WorkflowID, c.WorkflowID}, ids(out), "the dead reason counts when there is no attempt")

	code, out = h.do("v", "GET", "/api/dead-letters?dlq_id="+url.QueryEscape(message.DLQUUID(a.WorkflowID+"#0")), "")
	require.Equal(t, 200, code, out)
	assert.Contains(t, h.fake.queries[len(h.fake.queries)-1], `DeadLetterIds = '`+message.DLQUUID(a.WorkflowID+"#0")+`'`)

	// A replay by error text acts on the ids matched when it was asked.
	code, out = h.do("o", "POST", "/api/dead-letters/replay", `{"error_text":"reset by PEER","dry_run":true}`)
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, 1, out["count"])
	code, out = h.do("o", "POST", "/api/dead-letters/replay", `{"error_text":"reset by PEER","reason":"fixed"}`)
	require.Equal(t, 202, code, out)
	h.fake.mu.Lock()
	in := h.fake.jobs[len(h.fake.jobs)-1].in
	h.fake.mu.Unlock()
	assert.Equal(t, []string{b.WorkflowID}, in.IDs)
	assert.Empty(t, in.Query)
	assert.Equal(t, map[string]string{"error_text": "reset by PEER"}, in.Filter)
	job := h.runJob()
	assert.EqualValues(t, 1, job.Total)
	assert.Equal(t, 1, job.Done)
}

// error_text reads at most maxErrorTextScan states: beyond, the answer asks for narrower
// filters instead of reading them all.
func TestErrorTextIsBounded(t *testing.T) {
	var states []workflows.State
	for i := range maxErrorTextScan + 1 {
		states = append(states, item("orders", fmt.Sprintf("m%04d", i), workflows.StatusDead, t0, ""))
	}
	h := newHarness(t, states...)
	code, out := h.do("v", "GET", "/api/dead-letters?error_text=503", "")
	require.Equal(t, 400, code, out)
	assert.Contains(t, out["error"], "at most 1000 items and the other filters match 1001")
	code, out = h.do("a", "POST", "/api/dead-letters/purge", `{"error_text":"503","dry_run":true}`)
	require.Equal(t, 400, code, out)
	code, out = h.do("v", "GET", "/api/dead-letters?error_text=503&page_size=5", "")
	require.Equal(t, 400, code, out)
	code, out = h.do("v", "GET", "/api/dead-letters?page_size=5", "")
	require.Equal(t, 200, code, out)
	assert.EqualValues(t, maxErrorTextScan+1, out["total"], "without error_text, no bound but MaxScan")
}
