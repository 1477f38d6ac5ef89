package bridge

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// rulesCatalog classifies validation errors of the orders service as permanent and routes
// its order.created events to the patient policy.
func rulesCatalog(t *testing.T) *policy.Catalog {
	t.Helper()
	c, err := policy.Parse([]byte(`
routes:
  - queue: "orders*"
    policy: aggressive
  - service: orders
    event_type: "order.*"
    policy: patient
    dead_letter_queue: orders.dead
rules:
  - name: validation
    service: orders
    reason: ["missing field", "bad uuid"]
    category: permanent
  - error_type: "*Throttled*"
    category: rate-limited
`))
	require.NoError(t, err)
	return c
}

// The bridge puts a matching rule's category on the report, with a note naming the rule, for
// both ingress forms; the workflow then takes it as the reporter's own.
func TestDecodeAppliesClassificationRules(t *testing.T) {
	opts := testOptions()
	opts.Resolver = rulesCatalog(t)

	for _, tt := range []struct {
		name     string
		change   func(map[string]any)
		want     policy.Category
		wantNote string
	}{
		{"rule by service and reason", func(f map[string]any) {
			f["service"], f["error_reason"] = "orders", "Missing field: total"
		}, policy.Permanent, `classified permanent by the policy file's rule 1 ("validation")`},
		{"rule by error type", func(f map[string]any) {
			f["error_type"] = "Aws.ThrottledException"
		}, policy.RateLimited, `classified rate-limited by the policy file's rule 2`},
		{"another service: no rule", func(f map[string]any) {
			f["service"], f["error_reason"] = "billing", "missing field: total"
		}, "", ""},
		{"the reporter's category wins", func(f map[string]any) {
			f["service"], f["error_reason"], f["error_category"] = "orders", "bad UUID", "transient"
		}, policy.Transient, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := validRetryMessage()
			tt.change(f)
			rep, err := Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f)}, opts)
			require.NoError(t, err)
			assert.Equal(t, string(tt.want), rep.Failure.Category)
			if tt.wantNote != "" {
				assert.Contains(t, rep.Notes, tt.wantNote)
			} else {
				for _, n := range rep.Notes {
					assert.NotContains(t, n, "classified")
				}
			}
		})
	}

	t.Run("dead-lettered form", func(t *testing.T) {
		d := deadLettered("orders", amqp.Table{
			message.HeaderService:     "orders",
			message.HeaderErrorReason: "bad UUID in id",
		}, []byte("{}"))
		rep, err := Decode(d, opts)
		require.NoError(t, err)
		assert.Equal(t, string(policy.Permanent), rep.Failure.Category)
		assert.Equal(t, policy.Permanent, policy.Classify(rep.Failure), "what the workflow will decide on")
	})
}

// The policy is chosen by service and event type as well as queue: the more specific route wins.
func TestDecodeRoutesByServiceAndEventType(t *testing.T) {
	opts := testOptions()
	opts.Resolver = rulesCatalog(t)
	for _, tt := range []struct {
		name       string
		service    string
		eventType  string
		wantPolicy string
		wantDLQ    string
	}{
		{"queue route only", "billing", "order.created", policy.AggressiveName, "manual-review.pending"},
		{"service and event type beat queue", "orders", "order.created", policy.PatientName, "orders.dead"},
		{"event type misses", "orders", "invoice.created", policy.AggressiveName, "manual-review.pending"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := validRetryMessage()
			f["service"], f["event_type"] = tt.service, tt.eventType
			rep, err := Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f)}, opts)
			require.NoError(t, err)
			assert.Equal(t, tt.wantPolicy, rep.Policy.Name)
			assert.Equal(t, tt.wantDLQ, rep.DeadLetterQueue)
		})
	}

	t.Run("event type from the x-event-type header", func(t *testing.T) {
		d := deadLettered("orders", amqp.Table{
			message.HeaderService:   "orders",
			message.HeaderEventType: "order.paid",
		}, []byte("{}"))
		rep, err := Decode(d, opts)
		require.NoError(t, err)
		assert.Equal(t, policy.PatientName, rep.Policy.Name)
	})
}
