package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
)

// Route sends messages from matching queues to a policy.
type Route struct {
	// Queue is a path.Match glob on the original queue name ("billing.*"); the first
	// matching route wins. '*' does not cross '/', which queue names rarely contain.
	Queue string `json:"queue"`
	// Policy names the policy for matching queues.
	Policy string `json:"policy"`
	// DeadLetterQueue, when set, beats the policy's own dead-letter queue.
	DeadLetterQueue string `json:"dead_letter_queue,omitempty"`
}

// Catalog is the set of named policies and the routes that pick one per queue.
type Catalog struct {
	// Default is used for queues that no route matches.
	Default  string            `json:"default"`
	Policies map[string]Policy `json:"policies"`
	Routes   []Route           `json:"routes,omitempty"`
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
		where := fmt.Sprintf("route %d (queue %q)", i+1, r.Queue)
		if r.Queue == "" {
			errs = append(errs, fmt.Errorf("%s: queue must not be empty", where))
		} else if _, err := path.Match(r.Queue, ""); err != nil {
			errs = append(errs, fmt.Errorf("%s: queue is not a valid glob: %w", where, err))
		}
		if _, ok := c.Policies[r.Policy]; !ok {
			errs = append(errs, fmt.Errorf("%s: unknown policy %q", where, r.Policy))
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
func (c *Catalog) Guard(ingress, manualReview string, others ...string) *Guard {
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

// Resolve picks the policy and dead-letter queue for a message from queue, with an
// optional per-message override (a policy name). An unknown override does not fail the
// message: the routed policy is used and note says so for the history. The dead-letter
// queue is the route's, else the policy's, else "" for the caller's global queue.
func (c *Catalog) Resolve(queue, override string) (p Policy, deadLetterQueue string, note string) {
	name := c.Default
	route, routed := c.route(queue)
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

// route returns the first route whose pattern matches queue.
func (c *Catalog) route(queue string) (Route, bool) {
	for _, r := range c.Routes {
		if ok, _ := path.Match(r.Queue, queue); ok {
			return r, true
		}
	}
	return Route{}, false
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
