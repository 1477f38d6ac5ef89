package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Route sends the messages it matches to a policy. Each field given must match; the route
// that matches on the most fields wins, and among those the first listed.
type Route struct {
	// Queue is a path.Match glob on the original queue name ("billing.*"). '*' does not
	// cross '/', which queue names rarely contain.
	Queue string `json:"queue,omitempty"`
	// Service is a glob on the reporting service's name.
	Service string `json:"service,omitempty"`
	// EventType is a glob on the message's event type ("order.*").
	EventType string `json:"event_type,omitempty"`
	// Policy names the policy for matching messages.
	Policy string `json:"policy"`
	// DeadLetterQueue, when set, beats the policy's own dead-letter queue.
	DeadLetterQueue string `json:"dead_letter_queue,omitempty"`
}

// fields are the route's match fields by their policy-file keys.
func (r Route) fields() []struct{ key, pattern string } {
	return []struct{ key, pattern string }{{"queue", r.Queue}, {"service", r.Service}, {"event_type", r.EventType}}
}

// specificity is how many fields the route matches on: more beats fewer.
func (r Route) specificity() int {
	n := 0
	for _, f := range r.fields() {
		if f.pattern != "" {
			n++
		}
	}
	return n
}

func (r Route) matches(o Origin) bool {
	return globMatch(r.Queue, o.Queue) && globMatch(r.Service, o.Service) && globMatch(r.EventType, o.EventType)
}

// describe names the route in errors: its position (1-based) and its patterns.
func (r Route) describe(i int) string {
	var parts []string
	for _, f := range r.fields() {
		if f.pattern != "" {
			parts = append(parts, fmt.Sprintf("%s %q", f.key, f.pattern))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("route %d", i+1)
	}
	return fmt.Sprintf("route %d (%s)", i+1, strings.Join(parts, ", "))
}

// Catalog is the set of named policies, the routes that pick one per message, and the rules
// that classify failures before the built-in tree.
type Catalog struct {
	// Default is used for messages that no route matches.
	Default  string            `json:"default"`
	Policies map[string]Policy `json:"policies"`
	Routes   []Route           `json:"routes,omitempty"`
	// CategoryRules are the policy file's rules: tried in order before the built-in
	// classification, the first match wins (RuleCategory).
	CategoryRules []CategoryRule `json:"rules,omitempty"`
	// Destinations are where the scheduler may republish; the zero value is the secure
	// default (see Destinations).
	Destinations Destinations `json:"destinations,omitzero"`
}

// NewCatalog returns the built-in policies with "default" as the default and no routes,
// which is what a service without a policy file runs on.
func NewCatalog() *Catalog {
	return &Catalog{Default: DefaultName, Policies: Builtins()}
}

// Set adds p, or replaces the policy of the same name.
func (c *Catalog) Set(p Policy) {
	if c.Policies == nil {
		c.Policies = make(map[string]Policy)
	}
	c.Policies[p.Name] = p
}

// Validate checks the whole catalog before it is used, so that a bad file stops the
// service at start rather than misrouting messages later: every policy is valid, the
// default and every route's policy exist, and every route pattern is well formed.
func (c *Catalog) Validate() error {
	var errs []error
	names := make([]string, 0, len(c.Policies))
	for name := range c.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := c.Policies[name]
		if p.Name != name {
			errs = append(errs, fmt.Errorf("policy %q: stored under the name %q", p.Name, name))
		}
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Default == "" {
		errs = append(errs, errors.New("default_policy must not be empty"))
	} else if _, ok := c.Policies[c.Default]; !ok {
		errs = append(errs, fmt.Errorf("default_policy %q is not a known policy", c.Default))
	}
	for i, r := range c.Routes {
		where := r.describe(i)
		if r.specificity() == 0 {
			errs = append(errs, fmt.Errorf("%s: give at least one of queue, service, event_type", where))
		}
		for _, f := range r.fields() {
			if _, err := path.Match(f.pattern, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s is not a valid glob: %w", where, f.key, err))
			}
		}
		if _, ok := c.Policies[r.Policy]; !ok {
			errs = append(errs, fmt.Errorf("%s: unknown policy %q", where, r.Policy))
		}
	}
	for i, r := range c.CategoryRules {
		if err := r.validate(); err != nil {
			errs = append(errs, fmt.Errorf("classification %s: %w", r.label(i), err))
		}
	}
	if err := c.Destinations.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DeadLetterQueues are the dead-letter queues the catalog's policies and routes name, sorted,
// each once.
func (c *Catalog) DeadLetterQueues() []string {
	var qs []string
	for _, p := range c.Policies {
		if p.DeadLetterQueue != "" {
			qs = append(qs, p.DeadLetterQueue)
		}
	}
	for _, r := range c.Routes {
		if r.DeadLetterQueue != "" {
			qs = append(qs, r.DeadLetterQueue)
		}
	}
	slices.Sort(qs)
	return slices.Compact(qs)
}

// Guard is the catalog's destinations with the scheduler's own queues: ingress and
// manualReview (the global dead-letter queue), every dead-letter queue the catalog names,
// and any other queue the service declares (others).
// A nil catalog is the built-in one: the secure default destinations.
func (c *Catalog) Guard(ingress, manualReview string, others ...string) *Guard {
	if c == nil {
		c = &Catalog{}
	}
	own := map[string]string{}
	for _, q := range others {
		own[q] = "queue"
	}
	for _, q := range c.DeadLetterQueues() {
		own[q] = "dead-letter queue"
	}
	own[manualReview] = "manual-review queue"
	own[ingress] = "ingress queue"
	return NewGuard(c.Destinations, own)
}

// Resolve is Choose for a message known only by its queue.
func (c *Catalog) Resolve(queue, override string) (p Policy, deadLetterQueue string, note string) {
	return c.Choose(Origin{Queue: queue}, override)
}

// Choose picks the policy and dead-letter queue for a message from origin o, with an
// optional per-message override (a policy name). An unknown override does not fail the
// message: the routed policy is used and note says so for the history. The dead-letter
// queue is the route's, else the policy's, else "" for the caller's global queue.
func (c *Catalog) Choose(o Origin, override string) (p Policy, deadLetterQueue string, note string) {
	name := c.Default
	route, routed := c.route(o)
	if routed {
		name = route.Policy
	}
	if override != "" {
		if _, ok := c.Policies[override]; ok {
			name = override
		} else {
			note = fmt.Sprintf("unknown policy %q; used %q", override, name)
		}
	}
	p, ok := c.Policies[name]
	if !ok {
		// Only reachable with a catalog that fails Validate; never leave a message without a policy.
		p = Builtins()[DefaultName]
		note = joinNotes(note, fmt.Sprintf("unknown policy %q; used built-in %q", name, DefaultName))
	}
	deadLetterQueue = p.DeadLetterQueue
	if routed && route.DeadLetterQueue != "" {
		deadLetterQueue = route.DeadLetterQueue
	}
	return p, deadLetterQueue, note
}

// route returns the matching route with the most fields, the first listed among equals, so
// that a file of queue-only routes keeps its first-match order.
func (c *Catalog) route(o Origin) (Route, bool) {
	best, found := Route{}, false
	for _, r := range c.Routes {
		if r.matches(o) && (!found || r.specificity() > best.specificity()) {
			best, found = r, true
		}
	}
	return best, found
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
