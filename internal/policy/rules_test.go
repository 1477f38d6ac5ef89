package policy

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The users' examples classify as they asked under the example file's rules. tree is what
// the built-in classification alone gives: the rules change the answer where they differ,
// and only for those who ship the rules.
func TestExampleFileClassifies(t *testing.T) {
	c, err := LoadFile("../../policies.example.yaml")
	require.NoError(t, err)
	orders := Origin{Queue: "orders.created", Service: "orders", EventType: "order.created"}
	for _, tt := range []struct {
		name      string
		origin    Origin
		failure   Failure
		errorType string
		want      Category
		tree      Category
	}{
		{"missing fields", orders, Failure{Reason: "missing fields: customer_id, total"}, "", Permanent, Unknown},
		{"bad UUID", orders, Failure{Reason: "Bad UUID in order_id"}, "", Permanent, Unknown},
		{"unsupported MIME type", orders, Failure{Reason: "Unsupported MIME type text/csv"}, "", Permanent, Unknown},
		{"RabbitMQ publish failure", orders, Failure{Reason: "RabbitMQ publish failure: channel closed"}, "", Transient, Unknown},
		{"HTTP 500", orders, Failure{HTTPStatus: 500}, "", Transient, Unknown},
		{"HTTP 501", orders, Failure{HTTPStatus: 501}, "", Permanent, Unknown},
		{"HTTP 400", orders, Failure{HTTPStatus: 400}, "", Permanent, Permanent},
		{"HTTP 404", orders, Failure{HTTPStatus: 404}, "", Permanent, Permanent},
		{"HTTP 422", orders, Failure{HTTPStatus: 422}, "", Permanent, Permanent},
		{"HTTP 408 under the 4xx rule", orders, Failure{HTTPStatus: 408}, "", Permanent, Transient},
		{"HTTP 429", orders, Failure{HTTPStatus: 429}, "", RateLimited, RateLimited},
		{"HTTP 503: no rule, the tree", orders, Failure{HTTPStatus: 503}, "", Transient, Transient},
		{"exception class", orders, Failure{Reason: "boom"}, "app.OrderValidationError", Validation, Unknown},
		{"ledger duplicate", Origin{Queue: "ledger.post", Service: "ledger"}, Failure{ErrorCode: "23505"}, "", Permanent, Unknown},
		{"duplicate from another service", orders, Failure{ErrorCode: "23505"}, "", Unknown, Unknown},
		{"no rule matches", orders, Failure{Reason: "connection reset by peer"}, "", Transient, Transient},
		{"the reporter's category wins", orders, Failure{Category: "transient", HTTPStatus: 400}, "", Transient, Transient},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, c.Classify(tt.origin, tt.failure, tt.errorType), "with the file's rules")
			assert.Equal(t, tt.tree, Classify(tt.failure), "built-in tree alone")
		})
	}
}

func TestRuleMatches(t *testing.T) {
	from := Origin{Queue: "billing.invoices", Service: "billing-svc", EventType: "invoice.created"}
	for _, tt := range []struct {
		name      string
		rule      CategoryRule
		failure   Failure
		errorType string
		want      bool
	}{
		{"service glob", CategoryRule{Service: "billing-*"}, Failure{}, "", true},
		{"service glob misses", CategoryRule{Service: "orders"}, Failure{}, "", false},
		{"event type glob", CategoryRule{EventType: "invoice.*"}, Failure{}, "", true},
		{"queue glob misses", CategoryRule{Queue: "orders.*"}, Failure{}, "", false},
		{"status class", CategoryRule{HTTPStatus: []StatusRange{{400, 499}}}, Failure{HTTPStatus: 418}, "", true},
		{"status outside", CategoryRule{HTTPStatus: []StatusRange{{400, 499}}}, Failure{HTTPStatus: 500}, "", false},
		{"no status given", CategoryRule{HTTPStatus: []StatusRange{{400, 499}}}, Failure{}, "", false},
		{"any status of the list", CategoryRule{HTTPStatus: []StatusRange{{409, 409}, {422, 422}}}, Failure{HTTPStatus: 422}, "", true},
		{"error code ignores case and space", CategoryRule{ErrorCode: []string{"econnreset"}}, Failure{ErrorCode: " ECONNRESET"}, "", true},
		{"error code is exact", CategoryRule{ErrorCode: []string{"ECONN"}}, Failure{ErrorCode: "ECONNRESET"}, "", false},
		{"error type glob", CategoryRule{ErrorType: []string{"*.TimeoutException"}}, Failure{}, "System.TimeoutException", true},
		{"error type glob misses", CategoryRule{ErrorType: []string{"*.TimeoutException"}}, Failure{}, "System.IOException", false},
		{"reason substring ignores case", CategoryRule{Reason: []string{"Bad UUID"}}, Failure{Reason: "field id: bad uuid"}, "", true},
		{"reason regexp", CategoryRule{ReasonRegexp: regexp.MustCompile(`^deadlock`)}, Failure{Reason: "deadlock detected"}, "", true},
		{"reason regexp is as written", CategoryRule{ReasonRegexp: regexp.MustCompile(`^deadlock`)}, Failure{Reason: "a deadlock"}, "", false},
		{"every field must match", CategoryRule{Service: "billing-svc", HTTPStatus: []StatusRange{{500, 500}}}, Failure{HTTPStatus: 503}, "", false},
		{"every field matches", CategoryRule{Service: "billing-svc", Reason: []string{"quota"}}, Failure{Reason: "quota hit"}, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.rule.matches(from, tt.failure, tt.errorType))
		})
	}
}

func TestRuleCategoryFirstMatchWins(t *testing.T) {
	c := NewCatalog()
	c.CategoryRules = []CategoryRule{
		{Name: "teapots", HTTPStatus: []StatusRange{{418, 418}}, Category: Transient},
		{HTTPStatus: []StatusRange{{400, 499}}, Category: Permanent},
	}
	require.NoError(t, c.Validate())
	o := Origin{Queue: "q"}

	cat, rule, ok := c.RuleCategory(o, Failure{HTTPStatus: 418}, "")
	assert.True(t, ok)
	assert.Equal(t, Transient, cat)
	assert.Equal(t, `rule 1 ("teapots")`, rule)

	cat, rule, ok = c.RuleCategory(o, Failure{HTTPStatus: 404}, "")
	assert.True(t, ok)
	assert.Equal(t, Permanent, cat)
	assert.Equal(t, "rule 2", rule)

	_, _, ok = c.RuleCategory(o, Failure{HTTPStatus: 404, Category: "Rate_Limited"}, "")
	assert.False(t, ok, "the reporter's category wins")
	_, _, ok = c.RuleCategory(o, Failure{HTTPStatus: 503}, "")
	assert.False(t, ok, "no rule: the tree decides")
	assert.Equal(t, Unknown, c.Classify(o, Failure{HTTPStatus: 500}, ""), "the tree's answer")
}

func TestParseRuleErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		want []string
	}{
		{"bad regexp", "rules:\n  - {reason_regexp: 'a(b', category: permanent}\n",
			[]string{"classification rule 1: reason_regexp: error parsing regexp: missing closing ): `a(b`"}},
		{"empty regexp", "rules:\n  - {name: all, reason_regexp: '', category: permanent}\n",
			[]string{`classification rule 1 ("all"): reason_regexp is empty`}},
		{"unknown category", "rules:\n  - {http_status: 500, category: fatal}\n",
			[]string{`classification rule 1: category "fatal" is not one of transient, rate-limited, permanent`}},
		{"no category", "rules:\n  - {http_status: 500}\n",
			[]string{`classification rule 1: category is required`}},
		{"matches everything", "rules:\n  - {name: x, category: permanent}\n",
			[]string{`classification rule 1 ("x"): matches every failure`}},
		{"bad status", "rules:\n  - {http_status: [4x, 700, 500-400], category: permanent}\n",
			[]string{`http status "4x": want a status (503), a class (5xx) or a range (500-504)`,
				`http status range 700-700: want statuses from 100 to 599`, `http status range 500-400`}},
		{"empty reason", "rules:\n  - {reason: ['timeout', ' '], category: transient}\n",
			[]string{`reason has an empty item, which would match every failure`}},
		{"bad glob", "rules:\n  - {service: 'a[', category: transient}\n",
			[]string{`classification rule 1: service "a[" is not a valid glob`}},
		{"unknown key", "rules:\n  - {reasons: x, category: transient}\n",
			[]string{`line 2: unknown key "reasons" in a rule`}},
		{"nested list", "rules:\n  - {reason: [[x]], category: transient}\n",
			[]string{`expected a value or a list of values`}},
		{"second rule numbered", "rules:\n  - {http_status: 500, category: transient}\n  - {http_status: 5xx, category: nope}\n",
			[]string{`classification rule 2: category "nope"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseRuleSpellings(t *testing.T) {
	c, err := Parse([]byte(`
rules:
  - name: one of each
    service: billing-*
    event_type: invoice.*
    queue: billing.*
    http_status: [404, 5XX, 520-530]
    error_code: E1
    error_type: "*Error"
    reason: timeout
    reason_regexp: '(?i)^time'
    category: Rate_Limited
`))
	require.NoError(t, err)
	require.Len(t, c.CategoryRules, 1)
	r := c.CategoryRules[0]
	assert.Equal(t, RateLimited, r.Category, "any accepted spelling, stored as the category")
	assert.Equal(t, []StatusRange{{404, 404}, {500, 599}, {520, 530}}, r.HTTPStatus)
	assert.Equal(t, []string{"E1"}, r.ErrorCode, "one item without brackets")
	assert.Equal(t, []string{"timeout"}, r.Reason)
	assert.Equal(t, "(?i)^time", r.ReasonRegexp.String())

	// The catalog as JSON (what ops shows) carries the rules, the regexp as text.
	b, err := json.Marshal(c.CategoryRules)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"reason_regexp":"(?i)^time"`)
	assert.Contains(t, string(b), `"category":"rate-limited"`)
}

func TestRuleValidateInGo(t *testing.T) {
	c := NewCatalog()
	c.CategoryRules = []CategoryRule{{Reason: []string{"x"}, Category: "rate_limited"}}
	err := c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `classification rule 1: category "rate_limited" is not one of`, "Go callers use the constants")
}

func TestChooseRoutes(t *testing.T) {
	c := NewCatalog()
	c.Routes = []Route{
		{Queue: "billing.*", Policy: "billing"},
		{Queue: "billing.refunds", Policy: CriticalName},
		{Service: "billing-svc", Policy: PatientName},
		{Service: "billing-svc", EventType: "invoice.*", Policy: AggressiveName},
		{EventType: "invoice.*", Queue: "billing.invoices", Policy: NoneName},
		{Service: "notify", EventType: "email.*", Queue: "notify.*", Policy: EmailName, DeadLetterQueue: "notify.dead"},
	}
	billing := Builtins()[StandardName]
	billing.Name = "billing"
	c.Set(billing)
	require.NoError(t, c.Validate())
	for _, tt := range []struct {
		name    string
		origin  Origin
		want    string
		wantDLQ string
	}{
		{"nothing matches: the default", Origin{Queue: "orders", Service: "orders"}, DefaultName, ""},
		{"one field, first listed of equals", Origin{Queue: "billing.refunds"}, "billing", ""},
		{"queue-only and service-only tie: first listed", Origin{Queue: "billing.x", Service: "billing-svc"}, "billing", ""},
		{"service alone", Origin{Queue: "payments", Service: "billing-svc"}, PatientName, ""},
		{"two fields beat one", Origin{Queue: "billing.x", Service: "billing-svc", EventType: "invoice.paid"}, AggressiveName, ""},
		{"two-field tie: first listed", Origin{Queue: "billing.invoices", Service: "billing-svc", EventType: "invoice.paid"}, AggressiveName, ""},
		{"two fields of another pair", Origin{Queue: "billing.invoices", Service: "other", EventType: "invoice.paid"}, NoneName, ""},
		{"three fields beat all", Origin{Queue: "notify.mail", Service: "notify", EventType: "email.sent"}, EmailName, "notify.dead"},
		{"a field that misses rules the route out", Origin{Queue: "notify.mail", Service: "notify", EventType: "sms.sent"}, DefaultName, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, dlq, note := c.Choose(tt.origin, "")
			assert.Equal(t, tt.want, p.Name)
			assert.Equal(t, tt.wantDLQ, dlq)
			assert.Empty(t, note)
		})
	}
	p, _, _ := c.Resolve("billing.refunds", "")
	assert.Equal(t, "billing", p.Name, "Resolve is Choose by queue alone")
}

func TestParseStatusRange(t *testing.T) {
	for in, want := range map[string]StatusRange{
		"503": {503, 503}, "4xx": {400, 499}, "5XX": {500, 599}, "500-504": {500, 504}, " 500 - 504 ": {500, 504},
	} {
		got, err := ParseStatusRange(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "6xx", "x", "99", "600", "504-500", "5x", "500-", "4xx-5xx"} {
		_, err := ParseStatusRange(in)
		assert.Error(t, err, in)
	}
}
