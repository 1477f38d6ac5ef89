package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewCatalog(t *testing.T) {
	c := NewCatalog()
	assert.Equal(t, DefaultName, c.Default)
	assert.Equal(t, Builtins(), c.Policies)
	assert.Empty(t, c.Routes)
	require.NoError(t, c.Validate())

	p, dlq, note := c.Resolve("orders", "")
	assert.Equal(t, Builtins()[DefaultName], p)
	assert.Empty(t, dlq)
	assert.Empty(t, note)
}

// The tiers cap unknown errors at 2 retries; the other built-in policies do not.
func TestBuiltinUnknownCaps(t *testing.T) {
	for name, p := range Builtins() {
		switch name {
		case AggressiveName, StandardName, PatientName, CriticalName, NoneName:
			assert.Equal(t, 2, p.UnknownMaxRetries, name)
		default:
			assert.Zero(t, p.UnknownMaxRetries, name)
		}
	}
}

func TestCatalogSet(t *testing.T) {
	var c Catalog // nil map
	p := Builtins()[StandardName]
	c.Set(p)
	assert.Equal(t, p, c.Policies[StandardName])

	p.MaxRetries = 9
	c.Set(p)
	assert.Equal(t, 9, c.Policies[StandardName].MaxRetries, "replaces")
	assert.Len(t, c.Policies, 1)
}

func TestCatalogValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Catalog)
		want   string
	}{
		{"missing default", func(c *Catalog) { c.Default = "nope" }, `default_policy "nope" is not a known policy`},
		{"empty default", func(c *Catalog) { c.Default = "" }, `default_policy must not be empty`},
		{"invalid policy", func(c *Catalog) {
			p := c.Policies[StandardName]
			p.Backoff.Initial = 0
			c.Policies[StandardName] = p
		}, `policy "standard": backoff.initial must be above 0`},
		{"name mismatch", func(c *Catalog) { c.Policies["alias"] = c.Policies[StandardName] }, `policy "standard": stored under the name "alias"`},
		{"route to unknown policy", func(c *Catalog) { c.Routes = []Route{{Queue: "a.*", Policy: "nope"}} }, `route 1 (queue "a.*"): unknown policy "nope"`},
		{"bad glob", func(c *Catalog) {
			c.Routes = []Route{{Queue: "a.*", Policy: "standard"}, {Queue: "b.[", Policy: "standard"}}
		}, `route 2 (queue "b.["): queue is not a valid glob: syntax error in pattern`},
		{"route without a pattern", func(c *Catalog) { c.Routes = []Route{{Policy: "standard"}} }, `route 1: give at least one of queue, service, event_type`},
		{"bad service glob", func(c *Catalog) { c.Routes = []Route{{Service: "[", Policy: "standard"}} }, `route 1 (service "["): service is not a valid glob`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCatalog()
			tt.change(c)
			assert.ErrorContains(t, c.Validate(), tt.want)
		})
	}
}

func TestResolve(t *testing.T) {
	c := NewCatalog()
	c.Default = StandardName
	billing := Policy{
		Name:            "billing",
		Backoff:         Backoff{Kind: Schedule, Delays: []time.Duration{time.Second}},
		MaxRetries:      2,
		DeadLetterQueue: "billing.policy-dead",
	}
	c.Set(billing)
	c.Routes = []Route{
		{Queue: "billing.refunds", Policy: CriticalName, DeadLetterQueue: "refunds.dead"},
		{Queue: "billing.*", Policy: "billing"},
		{Queue: "billing.refunds.*", Policy: PatientName}, // never reached for billing.refunds
		{Queue: "email.?", Policy: EmailName, DeadLetterQueue: "email.dead"},
	}
	require.NoError(t, c.Validate())

	tests := []struct {
		name, queue, override string
		policy, dlq, note     string
	}{
		{"no route uses the default", "orders", "", StandardName, "", ""},
		{"first match wins", "billing.refunds", "", CriticalName, "refunds.dead", ""},
		{"later route", "billing.invoices", "", "billing", "billing.policy-dead", ""},
		{"glob does not over-match", "billing", "", StandardName, "", ""},
		{"single-char glob", "email.x", "", EmailName, "email.dead", ""},
		{"override known", "orders", PatientName, PatientName, "", ""},
		{"override keeps the route's DLQ", "email.x", AggressiveName, AggressiveName, "email.dead", ""},
		{"override picks up its policy's DLQ", "orders", "billing", "billing", "billing.policy-dead", ""},
		{"route DLQ beats the policy's", "billing.refunds", "billing", "billing", "refunds.dead", ""},
		{"unknown override uses the route", "billing.x", "gold", "billing", "billing.policy-dead", `unknown policy "gold"; used "billing"`},
		{"unknown override uses the default", "orders", "gold", StandardName, "", `unknown policy "gold"; used "standard"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, dlq, note := c.Resolve(tt.queue, tt.override)
			assert.Equal(t, tt.policy, p.Name)
			assert.Equal(t, c.Policies[tt.policy], p)
			assert.Equal(t, tt.dlq, dlq)
			assert.Equal(t, tt.note, note)
		})
	}
}

func TestResolveInvalidCatalog(t *testing.T) {
	c := &Catalog{Default: "gone", Routes: []Route{{Queue: "[", Policy: "x"}}}
	p, dlq, note := c.Resolve("orders", "other")
	assert.Equal(t, Builtins()[DefaultName], p, "never leaves a message without a policy")
	assert.Empty(t, dlq)
	assert.Equal(t, `unknown policy "other"; used "gone"; unknown policy "gone"; used built-in "default"`, note)

	_, _, note = c.Resolve("orders", "")
	assert.Equal(t, `unknown policy "gone"; used built-in "default"`, note)
}
