package ops

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// itemUpdate applies an edit or a snooze the way RetryWorkflow does: the validator's
// refusals, then the change, simplified (an edit republishes, a snooze schedules).
func (f *fakeTemporal) itemUpdate(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.wfs[o.WorkflowID]
	if !ok || f.closed[o.WorkflowID] {
		return nil, fmt.Errorf("no running workflow %s", o.WorkflowID)
	}
	var why, errType string
	switch a := o.Args[0].(type) {
	case workflows.EditRetry:
		if why, errType = workflows.EditRefusal(&a, s); why == "" {
			if a.ReplacePayload {
				s.Message.Payload = a.Payload
			}
			if a.ReplaceHeaders {
				s.Message.Headers = a.Headers
			}
			if d := a.Destination; d != nil {
				s.Message.OriginalQueue, s.Message.OriginalExchange, s.Message.OriginalRoutingKey = d.Queue, d.Exchange, d.RoutingKey
			}
			s.Edits = append(s.Edits, workflows.Edit{Actor: a.Actor, Reason: a.Reason})
			s.Status = workflows.StatusRepublishing
		}
	case workflows.Snooze:
		if why, errType = workflows.SnoozeRefusal(&a, s, t0, 30*24*time.Hour); why == "" {
			s.Status, s.NextRetryAt = workflows.StatusScheduled, a.Until
		}
	default:
		return nil, fmt.Errorf("update %s with %T", o.UpdateName, a)
	}
	if why != "" {
		return &fakeUpdate{id: o.WorkflowID, err: temporal.NewNonRetryableApplicationError(why, errType, nil)}, nil
	}
	f.itemUpdates = append(f.itemUpdates, o.Args[0])
	return &fakeUpdate{id: o.WorkflowID, state: *s}, nil
}

const (
	deadPath  = "/api/messages/retry%2Forders%2Fd/retry"
	snoozeDue = "/api/messages/retry%2Forders%2Fs/snooze"
)

// editHarness has a dead letter d and a scheduled item s on orders, and a guard that allows
// the orders* queues and the orders.x exchange, the ingress being the scheduler's own.
func editHarness(t *testing.T) *harness {
	return newHarnessWith(t, func(c *APIConfig) {
		c.MaxMessageBytes = 16
		c.Guard = policy.NewGuard(policy.Destinations{
			Queues:    []string{"orders*", "retry.*"},
			Exchanges: []policy.ExchangeRule{{Exchange: "orders.x"}},
		}, map[string]string{"retry.scheduled": "ingress queue"})
	}, item("orders", "d", workflows.StatusDead, t0, ""), item("orders", "s", workflows.StatusScheduled, t0.Add(time.Minute), ""))
}

func TestEditRetryRefusals(t *testing.T) {
	h := editHarness(t)
	for _, tt := range []struct {
		token, path, body string
		status            int
		contains          string
	}{
		{"v", deadPath, `{"payload":"x"}`, 403, "needs operator"},
		{"o", deadPath, `{"payload":"x"}`, 403, "needs the admin role (o is operator)"},
		{"a", deadPath, `{"payload":"x","payload_base64":"eA=="}`, 400, "both set"},
		{"a", deadPath, `{"payload_base64":"%%%"}`, 400, "not standard base64"},
		{"a", deadPath, `{"payload":"` + strings.Repeat("x", 17) + `"}`, 400, "17 bytes, over the 16-byte limit"},
		{"a", deadPath, `{"headers":[1]}`, 400, "not a JSON object"},
		{"a", deadPath, `{"headers":{"x-death":[]}}`, 400, `header "x-death" is the scheduler's or the broker's own`},
		{"a", deadPath, `{"headers":{"CC":"other"}}`, 400, `header "CC"`},
		{"a", deadPath, `{"destination":{}}`, 400, "neither a queue nor an exchange"},
		{"a", deadPath, `{"destination":{"exchange":"orders.x"}}`, 400, "routing_key is empty"},
		{"a", deadPath, `{"destination":{"queue":"` + strings.Repeat("q", 256) + `"}}`, 400, "short-string limit"},
		{"a", deadPath, `{"destination":{"queue":"retry.scheduled"}}`, 403, `destination not allowed: queue "retry.scheduled" is the scheduler's own ingress queue`},
		{"a", deadPath, `{"destination":{"queue":"billing"}}`, 403, `queue "billing" matches no pattern in destinations.queues`},
		{"a", deadPath, `{"destination":{"exchange":"amq.topic","routing_key":"orders"}}`, 403, `exchange "amq.topic"`},
		{"a", deadPath, `{"destination":{"surprise":1}}`, 400, "unknown field"},
	} {
		code, out := h.do(tt.token, "POST", tt.path, tt.body)
		assert.Equal(t, tt.status, code, "%s: %v", tt.body, out)
		assert.Contains(t, out["error"], tt.contains, "%s", tt.body)
	}
	assert.Empty(t, h.fake.itemUpdates, "no refused edit reaches the workflow")
	assert.Contains(t, h.log.String(), `"action":"edit-retry","result":"refused"`)
}

func TestEditRetrySendsTheEdit(t *testing.T) {
	h := editHarness(t)
	code, out := h.do("a", "POST", deadPath, `{"payload_base64":"AAEC","headers":{"x-n":7,"x-s":"v"},"destination":{"exchange":"orders.x","routing_key":"eu"},"reason":"fix"}`)
	require.Equal(t, 200, code, "%v", out)
	assert.Equal(t, "edit-retry", out["action"])
	require.Len(t, h.fake.itemUpdates, 1)
	e := h.fake.itemUpdates[0].(workflows.EditRetry)
	assert.Equal(t, "a", e.Actor)
	assert.Equal(t, "fix", e.Reason)
	assert.True(t, e.ReplacePayload)
	assert.Equal(t, []byte{0, 1, 2}, e.Payload)
	assert.True(t, e.ReplaceHeaders)
	assert.Equal(t, map[string]any{"x-n": int64(7), "x-s": "v"}, e.Headers)
	assert.Equal(t, &workflows.Destination{Queue: "orders", Exchange: "orders.x", RoutingKey: "eu"}, e.Destination,
		"an exchange's destination keeps the message's queue")
	assert.Contains(t, h.log.String(), `"action":"edit-retry","result":"applied"`)

	// A reason alone is a plain retry.
	code, out = h.do("o", "POST", "/api/messages/retry%2Forders%2Fs/retry", `{"reason":"now"}`)
	require.Equal(t, 200, code, "%v", out)
	assert.Equal(t, "retry", out["action"])
	assert.Len(t, h.fake.itemUpdates, 1)
}

func TestSnooze(t *testing.T) {
	h := editHarness(t)
	for _, tt := range []struct {
		token, body string
		status      int
		contains    string
	}{
		{"v", `{"for":"1h"}`, 403, "needs operator"},
		{"o", ``, 400, "body is empty"},
		{"o", `{}`, 400, `send {"until"`},
		{"o", `{"for":"1h","until":"2026-03-01T13:00:00Z"}`, 400, "both set"},
		{"o", `{"for":"soon"}`, 400, "not a positive duration"},
		{"o", `{"for":"-1h"}`, 400, "not a positive duration"},
		{"o", `{"until":"tomorrow"}`, 400, "not an RFC 3339 time"},
		{"o", `{"until":"2026-03-01T11:00:00Z"}`, 400, "is not in the future"},
		{"o", `{"for":"2000h"}`, 400, "beyond the dead-letter retention"},
	} {
		code, out := h.do(tt.token, "POST", snoozeDue, tt.body)
		assert.Equal(t, tt.status, code, "%s: %v", tt.body, out)
		assert.Contains(t, out["error"], tt.contains, "%s", tt.body)
	}
	assert.Empty(t, h.fake.itemUpdates)

	code, out := h.do("o", "POST", snoozeDue, `{"for":"2h","reason":"partner down"}`)
	require.Equal(t, 200, code, "%v", out)
	assert.Equal(t, "snooze", out["action"])
	n := h.fake.itemUpdates[0].(workflows.Snooze)
	assert.Equal(t, t0.Add(2*time.Hour), n.Until)
	assert.Equal(t, "partner down", n.Reason)
	code, out = h.do("o", "POST", "/api/messages/retry%2Forders%2Fd/snooze", `{"until":"2026-03-02T12:00:00Z"}`)
	require.Equal(t, 200, code, "%v", out)
	assert.Equal(t, "scheduled", out["state"].(map[string]any)["status"])
	assert.Contains(t, h.log.String(), `"action":"snooze","result":"applied"`)
}
