package ops

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

const base = `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = 'tq'`

func TestRetryQueueQuery(t *testing.T) {
	f, err := parseRetryQueueFilter(url.Values{})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus IN ('scheduled', 'held', 'republishing', 'awaiting-outcome')`, f.query("tq"))

	f, err = parseRetryQueueFilter(url.Values{"status": {"scheduled"}, "queue": {`it's`}, "category": {"Rate_Limited"}, "tenant": {"acme"}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus = 'scheduled' AND OriginalQueue = 'it\'s' AND ErrorCategory = 'rate-limited' AND TenantId = 'acme'`, f.query("tq"))

	f, err = parseRetryQueueFilter(url.Values{"status": {"scheduled,awaiting-outcome"}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus IN ('scheduled', 'awaiting-outcome')`, f.query("tq"))
}

func TestDeadLetterQuery(t *testing.T) {
	f, err := parseDeadLetterFilter(url.Values{"queue": {"orders"}, "from": {"2026-01-01T00:00:00+01:00"}, "to": {"2026-01-02T00:00:00Z"}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus = 'dead' AND OriginalQueue = 'orders' AND DeadAt >= '2025-12-31T23:00:00Z' AND DeadAt < '2026-01-02T00:00:00Z'`, f.query("tq"))
}

func TestFiltersRefuseBadValues(t *testing.T) {
	for _, q := range []url.Values{
		{"status": {"dead"}},
		{"status": {`scheduled" OR "1"="1`}},
		{"category": {"nonsense"}},
		{"queue": {"a\x00b"}},
		{"queue": {`x" OR RetryStatus != "y`}},
		{"queue": {`a\b`}},
		{"queue": {"line\nbreak"}},
		{"queue": {"'lead"}},
		{"tenant": {"trail'"}},
		{"queue": {string(make([]byte, 300))}},
		{"tenant": {"\xff"}},
		{"sort": {"x"}},
	} {
		_, err := parseRetryQueueFilter(q)
		var br badRequest
		require.ErrorAs(t, err, &br, "%v", q)
	}
	for _, q := range []url.Values{
		{"from": {"yesterday"}},
		{"to": {"2026-01-01"}},
		{"from": {"2026-01-02T00:00:00Z"}, "to": {"2026-01-01T00:00:00Z"}},
		{"status": {"dead"}},
	} {
		_, err := parseDeadLetterFilter(q)
		var br badRequest
		require.ErrorAs(t, err, &br, "%v", q)
	}
}

func TestBulkFilter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f, err := BulkFilter{Queue: "orders", Category: "permanent", OlderThan: "2d"}.filter(now, workflows.StatusDead)
	require.NoError(t, err)
	assert.Equal(t, []workflows.Status{workflows.StatusDead}, f.Statuses)
	assert.Equal(t, time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC), f.DeadTo)
	assert.Equal(t, base+` AND RetryStatus = 'dead' AND OriginalQueue = 'orders' AND ErrorCategory = 'permanent' AND DeadAt < '2026-02-27T12:00:00Z'`, f.query("tq"))

	for _, b := range []BulkFilter{{OlderThan: "-1h"}, {OlderThan: "soon"}, {OlderThan: "0s"}, {Category: "x"}, {Queue: "\x01"},
		{EventType: `a"b`}, {Tenant: "\x01"}} {
		_, err := b.filter(now, workflows.StatusDead)
		var br badRequest
		require.ErrorAs(t, err, &br, "%+v", b)
	}

	// The retry queue's retry-matching: scheduled items only, by event type and tenant too; an
	// age is a dead letter's.
	f, err = BulkFilter{Queue: "orders", EventType: "order.created", Tenant: "acme"}.filter(now, workflows.StatusScheduled)
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus = 'scheduled' AND OriginalQueue = 'orders' AND TenantId = 'acme' AND EventType = 'order.created'`, f.query("tq"))
	_, err = BulkFilter{OlderThan: "1h"}.filter(now, workflows.StatusScheduled)
	var br badRequest
	require.ErrorAs(t, err, &br)
	assert.Contains(t, br.msg, "dead letters only")
}

func TestEventTypeFilter(t *testing.T) {
	f, err := parseRetryQueueFilter(url.Values{"event_type": {"order.created"}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus IN ('scheduled', 'held', 'republishing', 'awaiting-outcome') AND EventType = 'order.created'`, f.query("tq"))
	f, err = parseDeadLetterFilter(url.Values{"event_type": {"it's.odd"}, "category": {"permanent"}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus = 'dead' AND ErrorCategory = 'permanent' AND EventType = 'it\'s.odd'`, f.query("tq"))
	for _, bad := range []string{`x" OR EventType != "y`, `a\b`, "a\x00", string(make([]byte, 256))} {
		_, err := parseRetryQueueFilter(url.Values{"event_type": {bad}})
		var br badRequest
		require.ErrorAs(t, err, &br, bad)
		_, err = parseDeadLetterFilter(url.Values{"event_type": {bad}})
		require.ErrorAs(t, err, &br, bad)
	}
}

func TestDeliveredQuery(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	closed := `WorkflowType = 'RetryWorkflow' AND ExecutionStatus = 'Completed' AND TaskQueue = 'tq'`
	f, err := parseDeliveredFilter(url.Values{}, now)
	require.NoError(t, err)
	assert.Equal(t, closed+` AND RetryStatus = 'delivered' AND CloseTime >= '2026-02-28T12:00:00Z'`, f.query("tq"), "the last 24 h by default")
	f, err = parseDeliveredFilter(url.Values{"since": {"7d"}, "queue": {"orders"}, "event_type": {"order.created"}}, now)
	require.NoError(t, err)
	assert.Equal(t, closed+` AND RetryStatus = 'delivered' AND OriginalQueue = 'orders' AND EventType = 'order.created' AND CloseTime >= '2026-02-22T12:00:00Z'`, f.query("tq"))
	for _, q := range []url.Values{{"since": {"yesterday"}}, {"since": {"-1h"}}, {"since": {"91d"}}, {"status": {"dead"}}, {"from": {"x"}}} {
		_, err := parseDeliveredFilter(q, now)
		var br badRequest
		require.ErrorAs(t, err, &br, "%v", q)
	}
}

func TestDeadLetterOrder(t *testing.T) {
	o, err := parseDeadLetterOrder(url.Values{})
	require.NoError(t, err)
	assert.Equal(t, order{By: sortDeadAt, Desc: true}, o)
	o, err = parseDeadLetterOrder(url.Values{"sort": {"created_at"}, "order": {"asc"}})
	require.NoError(t, err)
	assert.Equal(t, order{By: sortCreatedAt}, o)
	for _, q := range []url.Values{{"sort": {"next_retry_at"}}, {"order": {"up"}}} {
		_, err := parseDeadLetterOrder(q)
		var br badRequest
		require.ErrorAs(t, err, &br, "%v", q)
	}
}

func TestWorkflowUIURL(t *testing.T) {
	assert.Equal(t, "", WorkflowUIURL("", "default", "retry/orders/m-1", "r1"), "no UI configured: no link")
	assert.Equal(t, "http://127.0.0.1:8233/namespaces/default/workflows/retry%2Forders%2Fm-1/0195-ab/history",
		WorkflowUIURL("http://127.0.0.1:8233", "default", "retry/orders/m-1", "0195-ab"))
	assert.Equal(t, "https://ui.example/t/namespaces/prod.acme/workflows/retry%2Forders%2Fa%20b%3Fc%23d",
		WorkflowUIURL("https://ui.example/t", "prod.acme", "retry/orders/a b?c#d", ""), "without a run: the UI opens the latest")
}

func TestScopeFilter(t *testing.T) {
	f := Filter{}
	require.NoError(t, scopeFilter(Principal{Name: "all"}, &f))
	assert.Empty(t, f.Tenant)
	require.NoError(t, scopeFilter(Principal{Name: "b", Tenant: "acme"}, &f))
	assert.Equal(t, "acme", f.Tenant, "a scoped token's lists are filtered to its tenant")
	f = Filter{Tenant: "globex"}
	err := scopeFilter(Principal{Name: "b", Tenant: "acme"}, &f)
	var ae *apiError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 403, ae.Status)
}

func TestCursorRoundTrip(t *testing.T) {
	c := cursor{At: 12345, ID: "retry/orders/m-1"}
	got, err := decodeCursor(c.encode())
	require.NoError(t, err)
	assert.Equal(t, c, *got)
	for _, bad := range []string{"!!", "e30", "bm90IGpzb24"} {
		_, err := decodeCursor(bad)
		var br badRequest
		require.ErrorAs(t, err, &br, bad)
	}
	n, err := parsePageSize("")
	require.NoError(t, err)
	assert.Equal(t, defaultPageSize, n)
	for _, bad := range []string{"0", "501", "x", "-1"} {
		_, err := parsePageSize(bad)
		require.Error(t, err, bad)
	}
}

// A value visibility can match is quoted, never refused for its quotes: it stays one literal,
// so it cannot widen the query.
func TestHostileValuesStayOneLiteral(t *testing.T) {
	f, err := parseDeadLetterFilter(url.Values{"queue": {`x' OR RetryStatus != 'y`}, "tenant": {`a') OR ('1'='1`}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus = 'dead' AND OriginalQueue = 'x\' OR RetryStatus != \'y' AND TenantId = 'a\') OR (\'1\'=\'1'`, f.query("tq"))
	_, err = parseDeadLetterFilter(url.Values{"queue": {`x\' OR 1=1 --`}})
	var br badRequest
	require.ErrorAs(t, err, &br)
	assert.Contains(t, br.msg, "visibility cannot match")
}

// The finding filters: service and error type are exact conditions in visibility, dlq_id
// matches either id in DeadLetterIds, error_text stays out of the query (matched on the
// items' state).
func TestFindingFilters(t *testing.T) {
	f, err := parseDeadLetterFilter(url.Values{"service": {"billing"}, "error_type": {"java.io.IOException"},
		"error_text": {"Connection RESET"}, "dlq_id": {"retry/orders/m-1#0"}})
	require.NoError(t, err)
	assert.Equal(t, "Connection RESET", f.ErrorText, "kept as sent; matched case-insensitively")
	assert.Equal(t, base+` AND RetryStatus = 'dead' AND ConsumerService = 'billing' AND ErrorType = 'java.io.IOException' AND DeadLetterIds = 'retry/orders/m-1#0'`, f.query("tq"))

	f, err = parseRetryQueueFilter(url.Values{"service": {"it's"}, "error_text": {`50"3`}})
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus IN ('scheduled', 'held', 'republishing', 'awaiting-outcome') AND ConsumerService = 'it\'s'`, f.query("tq"))
	assert.Equal(t, `50"3`, f.ErrorText, "any text: it never reaches visibility")

	_, err = parseRetryQueueFilter(url.Values{"dlq_id": {"x#0"}})
	require.ErrorContains(t, err, `unknown query parameter "dlq_id"`, "dead letters only")

	f, err = parseDeliveredFilter(url.Values{"service": {"billing"}}, time.Now())
	require.NoError(t, err)
	assert.Equal(t, "billing", f.Service)

	for _, q := range []url.Values{
		{"service": {`a"b`}},
		{"service": {"\x01"}},
		{"error_type": {"'x"}},
		{"error_type": {string(make([]byte, 256))}},
		{"error_text": {"   "}},
		{"error_text": {"a\nb"}},
		{"error_text": {"\xff"}},
		{"error_text": {string(make([]byte, 256))}},
		{"dlq_id": {"a\\b#0"}},
		{"dlq_id": {"a\x00#0"}},
		{"dlq_id": {"x" + string(make([]byte, 1100))}},
	} {
		_, err := parseDeadLetterFilter(q)
		var br badRequest
		require.ErrorAs(t, err, &br, "%q", q)
	}
}

func TestBulkFindingFilter(t *testing.T) {
	f, err := BulkFilter{Service: "billing", ErrorType: "TimeoutError", ErrorText: "timed out"}.filter(time.Now(), workflows.StatusDead)
	require.NoError(t, err)
	assert.Equal(t, base+` AND RetryStatus = 'dead' AND ConsumerService = 'billing' AND ErrorType = 'TimeoutError'`, f.query("tq"))
	assert.Equal(t, "timed out", f.ErrorText)
	assert.Equal(t, map[string]string{"service": "billing", "error_type": "TimeoutError", "error_text": "timed out"},
		BulkFilter{}.filterView(f))
	for _, b := range []BulkFilter{{Service: `a"b`}, {ErrorType: "\x01"}, {ErrorText: " "}} {
		_, err := b.filter(time.Now(), workflows.StatusDead)
		var br badRequest
		require.ErrorAs(t, err, &br, "%+v", b)
	}
}

func TestExternalSystem(t *testing.T) {
	assert.Equal(t, "orders", externalSystem(message.Message{OriginalQueue: "orders"}))
	assert.Equal(t, "events:order.created", externalSystem(message.Message{OriginalQueue: "orders", OriginalExchange: "events", OriginalRoutingKey: "order.created"}))
	assert.Equal(t, "events:orders", externalSystem(message.Message{OriginalQueue: "orders", OriginalExchange: "events"}))
}
