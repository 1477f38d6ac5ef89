package jobs

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unsentItems fails each id's first unsent[id] applies before sending anything (Unsent), and
// refuses the ids in refused.
type unsentItems struct {
	Items
	mu      sync.Mutex
	unsent  map[string]int
	refused map[string]bool
	calls   map[string]int
}

func (u *unsentItems) Apply(_ context.Context, _ Target, id string) Applied {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls[id]++
	switch {
	case u.unsent[id] > 0:
		u.unsent[id]--
		return Applied{Err: "cannot read the state", Unsent: true}
	case u.refused[id]:
		return Applied{Err: "is scheduled, not dead"}
	}
	return Applied{Attempts: 1}
}

// An item that failed before anything was sent to it is tried once more, after the others;
// one refused is not, and one unsent twice stays failed.
func TestJobApplyTriesAnUnsentItemOnceMore(t *testing.T) {
	u := &unsentItems{unsent: map[string]int{"a": 1, "c": 2}, refused: map[string]bool{"b": true}, calls: map[string]int{}}
	acts := &Activities{Items: u}

	out, err := acts.JobApply(context.Background(), ApplyRequest{IDs: []string{"a", "b", "c", "d"}})
	require.NoError(t, err)

	require.Len(t, out, 4)
	assert.Equal(t, Applied{ID: "a", Attempts: 1}, out[0], "tried again, applied")
	assert.Equal(t, "is scheduled, not dead", out[1].Err)
	assert.Equal(t, "cannot read the state", out[2].Err, "unsent twice: failed")
	assert.Equal(t, Applied{ID: "d", Attempts: 1}, out[3])
	assert.Equal(t, map[string]int{"a": 2, "b": 1, "c": 2, "d": 1}, u.calls)
}

// Without the time for another ItemTimeout, an unsent item stays failed: the activity ends
// within its timeout rather than be cut off and run again.
func TestJobApplyLeavesAnUnsentItemWithoutTimeForIt(t *testing.T) {
	u := &unsentItems{unsent: map[string]int{"a": 1}, calls: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), ItemTimeout)
	defer cancel()

	out, err := (&Activities{Items: u}).JobApply(ctx, ApplyRequest{IDs: []string{"a"}})
	require.NoError(t, err)
	assert.True(t, out[0].Unsent)
	assert.Equal(t, 1, u.calls["a"])
}

// waitingItems holds each Apply until applyParallel of them are in flight at once (or the
// item's context ends, as it would one after the other), and records the most in flight.
type waitingItems struct {
	Items
	mu       sync.Mutex
	inFlight int
	most     int
	full     chan struct{}
	once     sync.Once
}

func (w *waitingItems) Apply(ctx context.Context, _ Target, id string) Applied {
	w.mu.Lock()
	w.inFlight++
	w.most = max(w.most, w.inFlight)
	if w.inFlight == applyParallel {
		w.once.Do(func() { close(w.full) })
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inFlight--
		w.mu.Unlock()
	}()
	select {
	case <-w.full:
		return Applied{Attempts: len(id)}
	case <-ctx.Done():
		return Applied{Err: ctx.Err().Error()}
	}
}

// A batch's items are acted on applyParallel at a time, never more, and their results come
// back in the ids' order.
func TestJobApplyActsOnSeveralItemsAtATime(t *testing.T) {
	w := &waitingItems{full: make(chan struct{})}
	ids := make([]string, 3*applyParallel)
	for i := range ids {
		ids[i] = strings.Repeat("x", i+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	out, err := (&Activities{Items: w}).JobApply(ctx, ApplyRequest{IDs: ids})
	require.NoError(t, err)

	assert.Equal(t, applyParallel, w.most)
	require.Len(t, out, len(ids))
	for i, r := range out {
		assert.Equal(t, Applied{ID: ids[i], Attempts: i + 1}, r)
	}
}
