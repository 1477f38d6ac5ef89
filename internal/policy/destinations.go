package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Destinations are the operator's rules of where the scheduler may republish a message, and
// which destinations and tenants a producer may name. The zero value is the secure default:
// any queue through the default exchange and any named exchange but the broker's own
// (amq.*). Whatever the rules say, the scheduler's own queues are never a destination (see
// Guard).
//
// Patterns are path.Match globs, as in routes ("orders.*"). A nil list is "not restricted
// here"; an empty, non-nil one allows nothing.
type Destinations struct {
	// Queues are the queues a message may have failed on and be republished to: its
	// original queue, which names its item, its breaker and its metric series, and which is
	// its destination through the default exchange. Nil: any queue.
	Queues []string `json:"queues" yaml:"queues"`
	// Exchanges are the named exchanges a report may ask to republish through. Nil: any
	// exchange but amq.*.
	Exchanges []ExchangeRule `json:"exchanges" yaml:"exchanges"`
	// Producers bind producers to destinations and tenants; the first whose User matches
	// the report's producer applies, on top of Queues and Exchanges.
	Producers []ProducerRule `json:"producers,omitempty" yaml:"producers"`
}

// ExchangeRule allows a named exchange, and optionally only some routing keys on it.
type ExchangeRule struct {
	// Exchange is a glob on the exchange name. It matches an amq.* exchange only when it
	// starts with "amq." itself: a broad "*" never opens the broker's own exchanges.
	Exchange string `json:"exchange" yaml:"exchange"`
	// RoutingKeys are globs on the routing key; nil: any key.
	RoutingKeys []string `json:"routing_keys,omitempty" yaml:"routing_keys"`
}

// ProducerRule is what one producer, named by the AMQP user-id RabbitMQ validated, may ask.
// A nil list leaves that dimension to the block's own lists.
type ProducerRule struct {
	// User is a glob on the user-id. It never matches a report without one: a producer that
	// leaves user-id out would otherwise escape the rule written for its user.
	User string `json:"user,omitempty" yaml:"user"`
	// Anonymous makes the rule the one for reports without a user-id (instead of User). Once
	// the block binds producers, such a report is refused unless a rule is written for it.
	Anonymous bool           `json:"anonymous,omitempty" yaml:"anonymous"`
	Queues    []string       `json:"queues" yaml:"queues"`
	Exchanges []ExchangeRule `json:"exchanges" yaml:"exchanges"`
	// Tenants are globs on the report's tenant id; a report without one is the empty
	// tenant, which "*" matches but "acme*" does not.
	Tenants []string `json:"tenants" yaml:"tenants"`
}

// Destination is where a report asks the scheduler to republish, and who asks.
type Destination struct {
	Queue      string
	Exchange   string // empty: the default exchange
	RoutingKey string
	Producer   string // the validated AMQP user-id; empty when the report had none
	Tenant     string
}

// What says what is refused, for a reason that names it.
func (d Destination) what() string {
	if d.Exchange == "" {
		return fmt.Sprintf("queue %q", d.Queue)
	}
	return fmt.Sprintf("exchange %q with routing key %q (original queue %q)", d.Exchange, d.RoutingKey, d.Queue)
}

// queues are the queues d names: its original queue and, through the default exchange, the
// queue its routing key names, where the publish lands.
func (d Destination) queues() []string {
	if d.Exchange == "" && d.RoutingKey != "" && d.RoutingKey != d.Queue {
		return []string{d.Queue, d.RoutingKey}
	}
	return []string{d.Queue}
}

// brokerQueuePrefix starts the broker's own queue names (amq.gen-* server-named queues,
// amq.rabbitmq.reply-to direct reply-to), which are never a destination.
const brokerQueuePrefix = "amq."

// brokerExchangePrefix starts the broker's own exchanges (amq.direct, amq.topic,
// amq.rabbitmq.trace, ...), which the secure default never republishes to.
const brokerExchangePrefix = "amq."

// Validate checks every pattern, naming the rule as the policy file spells it.
func (d Destinations) Validate() error {
	var errs []error
	glob := func(where, p string) {
		if p == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty", where))
		} else if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("%s %q is not a valid glob: %w", where, p, err))
		}
	}
	globs := func(where string, ps []string) {
		for i, p := range ps {
			glob(fmt.Sprintf("%s[%d]", where, i), p)
		}
	}
	exchanges := func(where string, rules []ExchangeRule) {
		for i, r := range rules {
			w := fmt.Sprintf("%s[%d]", where, i)
			glob(w+".exchange", r.Exchange)
			globs(w+".routing_keys", r.RoutingKeys)
		}
	}
	globs("destinations.queues", d.Queues)
	exchanges("destinations.exchanges", d.Exchanges)
	for i, p := range d.Producers {
		w := fmt.Sprintf("destinations.producers[%d]", i)
		switch {
		case p.Anonymous && p.User != "":
			errs = append(errs, fmt.Errorf("%s: set user or anonymous: true, not both", w))
		case !p.Anonymous:
			glob(w+".user", p.User)
		}
		globs(w+".queues", p.Queues)
		exchanges(w+".exchanges", p.Exchanges)
		// The empty tenant is a valid pattern here: it names reports without a tenant.
		for j, t := range p.Tenants {
			if _, err := path.Match(t, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s.tenants[%d] %q is not a valid glob: %w", w, j, t, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Guard applies Destinations with the scheduler's own queues, which are never a destination:
// a retry published into the ingress would be decoded as a new report (and its payload, a
// report of its own, could name any destination); one published into a dead-letter queue
// would pose as a dead letter.
type Guard struct {
	rules Destinations
	own   map[string]string // queue → what it is to the scheduler
}

// NewGuard returns the guard of rules; own maps each of the scheduler's own queues to what it
// is ("ingress", "dead-letter queue"), for the reason. Empty names are ignored.
func NewGuard(rules Destinations, own map[string]string) *Guard {
	g := &Guard{rules: rules, own: make(map[string]string, len(own))}
	for q, role := range own {
		if q != "" {
			g.own[q] = role
		}
	}
	return g
}

// OwnQueues are the scheduler's own queue names, sorted.
func (g *Guard) OwnQueues() []string {
	qs := make([]string, 0, len(g.own))
	for q := range g.own {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs
}

// Check says whether the scheduler may republish to d: nil, or an error whose text begins
// "destination not allowed: " and says what was refused and why.
func (g *Guard) Check(d Destination) error {
	for _, q := range d.queues() {
		if role, ok := g.own[q]; ok {
			return notAllowed("queue %q is the scheduler's own %s", q, role)
		}
		if strings.HasPrefix(q, brokerQueuePrefix) {
			return notAllowed("queue %q is the broker's own (server-named and direct reply-to queues start with %q)", q, brokerQueuePrefix)
		}
		if !allowedQueue(g.rules.Queues, q) {
			return notAllowed("queue %q matches no pattern in destinations.queues", q)
		}
	}
	if d.Exchange != "" && !allowedExchange(g.rules.Exchanges, d.Exchange, d.RoutingKey) {
		if g.rules.Exchanges == nil {
			return notAllowed("%s: the broker's amq.* exchanges are not destinations unless destinations.exchanges names them", d.what())
		}
		return notAllowed("%s matches no rule in destinations.exchanges", d.what())
	}
	p, ok := g.producer(d.Producer)
	if !ok {
		if d.Producer == "" && len(g.rules.Producers) > 0 {
			return notAllowed("a report without a user-id matches no destinations.producers rule: have the producer set user-id, or bind such reports with a rule of their own (anonymous: true)")
		}
		return nil
	}
	who := "anonymous producer (no user-id)"
	if d.Producer != "" {
		who = fmt.Sprintf("producer %q", d.Producer)
	}
	if !allowedQueue(p.Queues, d.Queue) {
		return notAllowed("%s may not use queue %q (destinations.producers rule for user %q)", who, d.Queue, p.User)
	}
	if d.Exchange != "" && p.Exchanges != nil && !allowedExchange(p.Exchanges, d.Exchange, d.RoutingKey) {
		return notAllowed("%s may not use %s (destinations.producers rule for user %q)", who, d.what(), p.User)
	}
	if p.Tenants != nil && !matchAny(p.Tenants, d.Tenant) {
		return notAllowed("%s may not use tenant %q (destinations.producers rule for user %q)", who, d.Tenant, p.User)
	}
	return nil
}

// producer is the first rule whose user pattern matches user, or for a report without a
// user-id the first anonymous rule.
func (g *Guard) producer(user string) (ProducerRule, bool) {
	for _, p := range g.rules.Producers {
		if user == "" || p.Anonymous {
			if user == "" && p.Anonymous {
				return p, true
			}
			continue
		}
		if ok, _ := path.Match(p.User, user); ok {
			return p, true
		}
	}
	return ProducerRule{}, false
}

func notAllowed(format string, args ...any) error {
	return errors.New("destination not allowed: " + fmt.Sprintf(format, args...))
}

// allowedQueue: a nil list allows any queue.
func allowedQueue(patterns []string, queue string) bool {
	return patterns == nil || matchAny(patterns, queue)
}

// allowedExchange: a nil list allows any exchange but amq.*; a rule matches an amq.*
// exchange only when its own pattern starts with "amq.".
func allowedExchange(rules []ExchangeRule, exchange, key string) bool {
	broker := strings.HasPrefix(exchange, brokerExchangePrefix)
	if rules == nil {
		return !broker
	}
	for _, r := range rules {
		if broker && !strings.HasPrefix(r.Exchange, brokerExchangePrefix) {
			continue
		}
		if ok, _ := path.Match(r.Exchange, exchange); !ok {
			continue
		}
		if r.RoutingKeys == nil || matchAny(r.RoutingKeys, key) {
			return true
		}
	}
	return false
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
