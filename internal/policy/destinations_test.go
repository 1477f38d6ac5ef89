package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const destinationsFile = `
policies:
  billing:
    backoff: {type: exponential, initial: 1s, max: 30s}
    max_retries: 5
    max_retries_ceiling: 8
    dead_letter_queue: billing.dead
routes:
  - queue: "orders.*"
    policy: standard
    dead_letter_queue: orders.dead
destinations:
  queues: ["orders.*", "billing.*", "retry.*"]
  exchanges:
    - exchange: events
      routing_keys: ["order.*"]
    - exchange: "amq.topic"
  producers:
    - user: billing-svc
      queues: ["billing.*"]
      tenants: [acme, ""]
    - user: "*"
      queues: ["orders.*"]
      exchanges: []
    - anonymous: true
      queues: ["orders.*"]
      exchanges: []
`

func TestParseDestinations(t *testing.T) {
	c, err := Parse([]byte(destinationsFile))
	require.NoError(t, err)
	assert.Equal(t, Destinations{
		Queues: []string{"orders.*", "billing.*", "retry.*"},
		Exchanges: []ExchangeRule{
			{Exchange: "events", RoutingKeys: []string{"order.*"}},
			{Exchange: "amq.topic"},
		},
		Producers: []ProducerRule{
			{User: "billing-svc", Queues: []string{"billing.*"}, Tenants: []string{"acme", ""}},
			{User: "*", Queues: []string{"orders.*"}, Exchanges: []ExchangeRule{}},
			{Anonymous: true, Queues: []string{"orders.*"}, Exchanges: []ExchangeRule{}},
		},
	}, c.Destinations)
	assert.Equal(t, 8, c.Policies["billing"].MaxRetriesCeiling)
	assert.Equal(t, []string{"billing.dead", "orders.dead"}, c.DeadLetterQueues())
}

func TestDestinationsAbsentIsTheSecureDefault(t *testing.T) {
	c, err := Parse([]byte("default_policy: standard\n"))
	require.NoError(t, err)
	assert.Equal(t, Destinations{}, c.Destinations)
	g := c.Guard("retry.scheduled", "manual-review.pending")
	for _, ok := range []Destination{
		{Queue: "orders"},
		{Queue: "anything/at all"},
		{Queue: "orders", Exchange: "events", RoutingKey: "x"},
		{Queue: "orders", Producer: "someone", Tenant: "whoever"},
	} {
		assert.NoError(t, g.Check(ok), "%+v", ok)
	}
	for _, bad := range []struct {
		d    Destination
		want string
	}{
		{Destination{Queue: "retry.scheduled"}, `queue "retry.scheduled" is the scheduler's own ingress queue`},
		{Destination{Queue: "manual-review.pending"}, `queue "manual-review.pending" is the scheduler's own manual-review queue`},
		{Destination{Queue: "orders", Exchange: "amq.direct", RoutingKey: "retry.scheduled"}, `exchange "amq.direct"`},
		{Destination{Queue: "orders", Exchange: "amq.rabbitmq.trace", RoutingKey: "x"}, "amq.* exchanges are not destinations"},
	} {
		err := g.Check(bad.d)
		require.Error(t, err, "%+v", bad.d)
		assert.True(t, strings.HasPrefix(err.Error(), "destination not allowed: "), err.Error())
		assert.Contains(t, err.Error(), bad.want)
	}
}

func TestOwnQueuesAlwaysDenied(t *testing.T) {
	c, err := Parse([]byte(destinationsFile))
	require.NoError(t, err)
	g := c.Guard("retry.scheduled", "manual-review.pending", "retry.delay")
	assert.Equal(t, []string{"billing.dead", "manual-review.pending", "orders.dead", "retry.delay", "retry.scheduled"}, g.OwnQueues())
	// "retry.*" and "orders.*" match these, and still they are refused.
	for _, q := range []string{"retry.scheduled", "retry.delay", "orders.dead", "billing.dead", "manual-review.pending"} {
		err := g.Check(Destination{Queue: q, Producer: "billing-svc", Tenant: "acme"})
		require.Error(t, err, q)
		assert.Contains(t, err.Error(), "is the scheduler's own")
	}
	// Through an exchange too: the original queue names the item.
	assert.ErrorContains(t, g.Check(Destination{Queue: "retry.scheduled", Exchange: "events", RoutingKey: "order.x"}), "scheduler's own")
}

func TestExplicitDestinations(t *testing.T) {
	c, err := Parse([]byte(destinationsFile))
	require.NoError(t, err)
	g := c.Guard("retry.scheduled", "manual-review.pending")
	billing := func(d Destination) Destination { d.Producer, d.Tenant = "billing-svc", "acme"; return d }
	for _, ok := range []Destination{
		billing(Destination{Queue: "billing.invoices"}),
		{Queue: "billing.invoices", Producer: "billing-svc"}, // no tenant: "" is listed
		billing(Destination{Queue: "billing.x", Exchange: "events", RoutingKey: "order.created"}),
		billing(Destination{Queue: "billing.x", Exchange: "amq.topic", RoutingKey: "anything"}),
		{Queue: "orders.eu", Producer: "shop"},
		{Queue: "orders.eu"}, // anonymous: the rule written for it
	} {
		assert.NoError(t, g.Check(ok), "%+v", ok)
	}
	for _, bad := range []struct {
		d    Destination
		want string
	}{
		{Destination{Queue: "audit"}, `queue "audit" matches no pattern in destinations.queues`},
		{billing(Destination{Queue: "billing.x", Exchange: "events", RoutingKey: "invoice.paid"}), "matches no rule in destinations.exchanges"},
		{billing(Destination{Queue: "billing.x", Exchange: "other", RoutingKey: "order.x"}), "matches no rule in destinations.exchanges"},
		{billing(Destination{Queue: "billing.x", Exchange: "amq.direct", RoutingKey: "x"}), `exchange "amq.direct"`},
		{billing(Destination{Queue: "orders.eu"}), `producer "billing-svc" may not use queue "orders.eu"`},
		{Destination{Queue: "billing.x", Producer: "billing-svc", Tenant: "globex"}, `producer "billing-svc" may not use tenant "globex"`},
		{Destination{Queue: "billing.x", Producer: "shop"}, `producer "shop" may not use queue "billing.x"`},
		{Destination{Queue: "billing.x"}, `anonymous producer (no user-id) may not use queue "billing.x"`},
		{Destination{Queue: "orders.eu", Producer: "shop", Exchange: "events", RoutingKey: "order.x"}, `producer "shop" may not use exchange "events"`},
	} {
		err := g.Check(bad.d)
		require.Error(t, err, "%+v", bad.d)
		assert.Contains(t, err.Error(), bad.want)
	}
}

func TestBroadExchangePatternNeverOpensAmq(t *testing.T) {
	c, err := Parse([]byte("destinations:\n  exchanges:\n    - exchange: \"*\"\n"))
	require.NoError(t, err)
	g := c.Guard("retry.scheduled", "manual-review.pending")
	assert.NoError(t, g.Check(Destination{Queue: "q", Exchange: "events", RoutingKey: "k"}))
	assert.ErrorContains(t, g.Check(Destination{Queue: "q", Exchange: "amq.fanout", RoutingKey: "k"}), "matches no rule")
}

func TestEmptyListsAllowNothing(t *testing.T) {
	c, err := Parse([]byte("destinations:\n  queues: []\n"))
	require.NoError(t, err)
	assert.ErrorContains(t, c.Guard("in", "dlq").Check(Destination{Queue: "orders"}), "matches no pattern")
}

func TestDestinationsValidation(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"destinations:\n  queues: [\"[\"]\n", `destinations.queues[0] "[" is not a valid glob`},
		{"destinations:\n  queues: [\"\"]\n", `destinations.queues[0] must not be empty`},
		{"destinations:\n  exchanges: [{exchange: \"\"}]\n", `destinations.exchanges[0].exchange must not be empty`},
		{"destinations:\n  exchanges: [{exchange: x, routing_keys: [\"[\"]}]\n", `destinations.exchanges[0].routing_keys[0] "[" is not a valid glob`},
		{"destinations:\n  producers: [{queues: [a]}]\n", `destinations.producers[0].user must not be empty`},
		{"destinations:\n  producers: [{user: u, tenants: [\"[\"]}]\n", `destinations.producers[0].tenants[0] "[" is not a valid glob`},
		{"destinations:\n  producers: [{user: u, queue: [a]}]\n", `unknown key "queue" in a producer rule`},
		{"destinations:\n  queue: [a]\n", `unknown key "queue" in destinations`},
		{"destinations:\n  exchanges: [{exchange: x, routing_key: a}]\n", `unknown key "routing_key" in an exchange rule`},
	} {
		_, err := Parse([]byte(tc.file))
		require.Error(t, err, tc.file)
		assert.Contains(t, err.Error(), tc.want, tc.file)
	}
}

func TestRetriesCeiling(t *testing.T) {
	assert.Equal(t, DefaultMaxRetriesCeiling, Policy{MaxRetries: 3}.RetriesCeiling())
	assert.Equal(t, 40, Policy{MaxRetries: 40}.RetriesCeiling(), "never below the policy's own max_retries")
	assert.Equal(t, 7, Policy{MaxRetries: 3, MaxRetriesCeiling: 7}.RetriesCeiling())

	base := "policies:\n  p:\n    backoff: {type: schedule, delays: [1s]}\n    max_retries: 5\n"
	_, err := Parse([]byte(base + "    max_retries_ceiling: 4\n"))
	assert.ErrorContains(t, err, `policy "p": max_retries_ceiling (4) must be at least max_retries (5)`)
	_, err = Parse([]byte(base + "    max_retries_ceiling: 1001\n"))
	assert.ErrorContains(t, err, "max_retries_ceiling must be between 0 and 1000, not 1001")
	_, err = Parse([]byte(base + "    max_retries_ceiling: 5\n"))
	assert.NoError(t, err)
}

// Through the default exchange a publish lands in the queue its routing key names: that queue
// is checked like the original queue, so an edit cannot aim a retry at the ingress.
func TestDefaultExchangeRoutingKeyIsADestination(t *testing.T) {
	g := (&Catalog{}).Guard("retry.scheduled", "manual-review.pending", "dead.archive")
	for _, key := range []string{"retry.scheduled", "manual-review.pending", "dead.archive"} {
		err := g.Check(Destination{Queue: "orders", RoutingKey: key})
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), "the scheduler's own", key)
	}
	require.NoError(t, g.Check(Destination{Queue: "orders", RoutingKey: "orders"}))
	require.NoError(t, g.Check(Destination{Queue: "orders", RoutingKey: "orders.v2"}))
	// A named exchange routes by its own bindings: the key is not a queue there.
	require.NoError(t, g.Check(Destination{Queue: "orders", Exchange: "events", RoutingKey: "retry.scheduled"}))
}

// Server-named and direct reply-to queues are the broker's: never a destination, whatever
// destinations.queues allows.
func TestBrokerQueuesAreNeverDestinations(t *testing.T) {
	c, err := Parse([]byte("destinations:\n  queues: [\"*\"]\n"))
	require.NoError(t, err)
	g := c.Guard("retry.scheduled", "manual-review.pending")
	for _, d := range []Destination{
		{Queue: "amq.gen-JzTY20BRgKO-HjmUJj0wLg"},
		{Queue: "amq.rabbitmq.reply-to.g1h2AA5yb"},
		{Queue: "orders", RoutingKey: "amq.rabbitmq.reply-to"},
	} {
		err := g.Check(d)
		require.Error(t, err, "%+v", d)
		assert.Contains(t, err.Error(), "the broker's own", "%+v", d)
	}
}

// Once the block binds producers, a report without a user-id is bound only by a rule written
// for it: a producer that leaves user-id out does not escape its user's rule, and no glob
// (not even "*") stands for it.
func TestReportsWithoutUserIDFailClosed(t *testing.T) {
	c, err := Parse([]byte("destinations:\n  producers:\n    - user: billing-svc\n      queues: [\"billing.*\"]\n    - user: \"*\"\n"))
	require.NoError(t, err)
	g := c.Guard("retry.scheduled", "manual-review.pending")
	require.NoError(t, g.Check(Destination{Queue: "billing.x", Producer: "billing-svc"}))
	require.NoError(t, g.Check(Destination{Queue: "orders.x", Producer: "shop"}), `"*" binds every named producer`)
	err = g.Check(Destination{Queue: "billing.x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a report without a user-id matches no destinations.producers rule")

	// Without producer rules, a report without a user-id is bound by the block's lists alone.
	open, err := Parse([]byte("destinations:\n  queues: [\"billing.*\"]\n"))
	require.NoError(t, err)
	require.NoError(t, open.Guard("retry.scheduled", "manual-review.pending").Check(Destination{Queue: "billing.x"}))

	_, err = Parse([]byte("destinations:\n  producers:\n    - user: u\n      anonymous: true\n"))
	assert.ErrorContains(t, err, "set user or anonymous: true, not both")
}
