package activities

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// gate holds every destination in mode while held is set, and counts the questions.
type gate struct {
	mode  string
	held  bool
	asked int
}

func (g *gate) Holds(string) (string, bool) {
	g.asked++
	return g.mode, g.held
}

type counted struct {
	queue    string
	settings policy.Breaker
}

type counter struct {
	mu  sync.Mutex
	got []counted
}

func (c *counter) Republished(queue string, settings policy.Breaker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, counted{queue, settings})
}

func TestRepublishHeldByTheBreakerPublishesNothing(t *testing.T) {
	pub := &fakePublisher{}
	acts, reg := newTestActivities(pub)
	g, c := &gate{mode: "open", held: true}, &counter{}
	acts.Gate, acts.Counter = g, c
	settings := policy.Breaker{Probes: 2}

	_, get, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1", Breaker: &settings})
	require.NoError(t, err)
	var res RepublishResult
	get(&res)
	assert.Equal(t, RepublishResult{Held: true, HeldBy: "open"}, res)
	assert.Empty(t, pub.got)
	assert.Empty(t, c.got, "a held retry does not count towards the breaker")
	assert.Equal(t, 1.0, metricValue(t, reg, "retries_executed_total", "queue", "orders", "status", StatusHeld))
}

func TestRepublishReleasedOrClosedGoesOutAndCounts(t *testing.T) {
	settings := policy.Breaker{Probes: 2}
	for name, tc := range map[string]struct {
		held, released bool
	}{
		"released while held": {held: true, released: true},
		"closed":              {held: false},
	} {
		t.Run(name, func(t *testing.T) {
			pub := &fakePublisher{}
			acts, _ := newTestActivities(pub)
			g, c := &gate{mode: "open", held: tc.held}, &counter{}
			acts.Gate, acts.Counter = g, c
			in := RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1", Breaker: &settings, Released: tc.released}
			_, get, err := run(t, acts, acts.Republish, in)
			require.NoError(t, err)
			var res RepublishResult
			get(&res)
			assert.False(t, res.Held)
			assert.Len(t, pub.got, 1)
			assert.Equal(t, []counted{{"orders", settings}}, c.got)
			if tc.released {
				assert.Zero(t, g.asked, "a released retry does not ask the gate")
			}
		})
	}
}

// datedCounter is a counter that takes the republish's date.
type datedCounter struct {
	counter
	at []time.Time
}

func (c *datedCounter) RepublishedAt(queue string, settings policy.Breaker, at time.Time) {
	c.Republished(queue, settings)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, at)
}

// A counter that dates what it counts gets the republish's confirm time, which the
// x-retry-republished-at header also carries, for the failure reported back to be dated by.
func TestRepublishIsCountedAtItsConfirm(t *testing.T) {
	pub := &fakePublisher{}
	acts, _ := newTestActivities(pub)
	c := &datedCounter{}
	acts.Counter = c
	settings := policy.Breaker{Probes: 2}
	_, get, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1", Breaker: &settings})
	require.NoError(t, err)
	var res RepublishResult
	get(&res)
	assert.Equal(t, []counted{{"orders", settings}}, c.got)
	assert.Equal(t, []time.Time{res.PublishedAt}, c.at, "dated by the confirm")
	require.Len(t, pub.got, 1)
	assert.Equal(t, testNow.UnixMilli(), pub.got[0].msg.Headers["x-retry-republished-at"])
}

func TestRepublishWithoutABreakerIgnoresTheGate(t *testing.T) {
	pub := &fakePublisher{}
	acts, _ := newTestActivities(pub)
	g, c := &gate{mode: "open", held: true}, &counter{}
	acts.Gate, acts.Counter = g, c
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1"})
	require.NoError(t, err)
	assert.Len(t, pub.got, 1)
	assert.Zero(t, g.asked)
	assert.Empty(t, c.got)
}

func TestRepublishUnderABreakerWithoutGateOrCounter(t *testing.T) {
	pub := &fakePublisher{}
	acts, _ := newTestActivities(pub)
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1", Breaker: &policy.Breaker{}})
	require.NoError(t, err)
	assert.Len(t, pub.got, 1, "breakers off: nothing is held")
}

type lister struct {
	ids []string
	err error
	got []any
}

func (l *lister) ListHeld(_ context.Context, queue string, limit int) ([]string, error) {
	l.got = append(l.got, queue, limit)
	return l.ids, l.err
}

func TestListHeld(t *testing.T) {
	acts, _ := newTestActivities(&fakePublisher{})
	_, get, err := run(t, acts, acts.ListHeld, ListHeldInput{Queue: "orders", Limit: 3})
	require.NoError(t, err)
	var ids []string
	get(&ids)
	assert.Empty(t, ids, "no lister: none held")

	l := &lister{ids: []string{"retry/orders/a", "retry/orders/b"}}
	acts.Held = l
	_, get, err = run(t, acts, acts.ListHeld, ListHeldInput{Queue: "orders", Limit: 3})
	require.NoError(t, err)
	get(&ids)
	assert.Equal(t, []string{"retry/orders/a", "retry/orders/b"}, ids)
	assert.Equal(t, []any{"orders", 3}, l.got)

	l.err = errors.New("visibility unavailable")
	_, _, err = run(t, acts, acts.ListHeld, ListHeldInput{Queue: "orders", Limit: 3})
	require.ErrorContains(t, err, `list held retries of "orders": visibility unavailable`)
}
