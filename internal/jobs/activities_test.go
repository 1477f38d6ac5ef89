package jobs

import (
	"context"
	"sync"
	"testing"

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
