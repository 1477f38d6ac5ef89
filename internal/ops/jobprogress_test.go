package ops

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
)

// The cache holds at most maxProgressJobs jobs: the one answered longest ago goes first, and
// a job answering again keeps its place and its newest counts.
func TestProgressCacheForgetsTheOldestAnswer(t *testing.T) {
	var c progressCache
	for i := range maxProgressJobs {
		c.remember("job/"+strconv.Itoa(i), jobs.Progress{Done: i}, t0.Add(time.Duration(i)*time.Second))
	}
	c.remember("job/0", jobs.Progress{Done: 7}, t0.Add(time.Hour)) // answers again: now the newest
	c.remember("job/new", jobs.Progress{}, t0.Add(2*time.Hour))
	assert.Len(t, c.jobs, maxProgressJobs)
	_, _, ok := c.last("job/1")
	assert.False(t, ok, "the oldest answer is forgotten")
	p, at, ok := c.last("job/0")
	assert.True(t, ok)
	assert.Equal(t, 7, p.Done)
	assert.Equal(t, t0.Add(time.Hour), at)
	_, _, ok = c.last("job/new")
	assert.True(t, ok)
}
