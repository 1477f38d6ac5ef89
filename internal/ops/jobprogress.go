package ops

import (
	"sync"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
)

// maxProgressJobs bounds the running jobs whose last progress the API remembers.
const maxProgressJobs = 256

// progressCache holds the last progress each running job's workflow answered this process.
// A job's workflow answers its progress query between batches; on a loaded server a batch
// can keep it busy past a read's timeout, read after read, and an operator is better served
// by the last counts, said to be that old, than by none.
type progressCache struct {
	mu   sync.Mutex
	jobs map[string]progressEntry
}

type progressEntry struct {
	p  jobs.Progress
	at time.Time
}

// remember keeps p, job id's answer at at; the oldest entry is forgotten beyond
// maxProgressJobs. The id is the one the API reads by, not the answer's own.
func (c *progressCache) remember(id string, p jobs.Progress, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]progressEntry{}
	}
	if _, ok := c.jobs[id]; !ok && len(c.jobs) >= maxProgressJobs {
		forgetOldest(c.jobs, func(e progressEntry) time.Time { return e.at })
	}
	c.jobs[id] = progressEntry{p: p, at: at}
}

// forgetOldest deletes the entry of m whose time (at) is the earliest.
func forgetOldest[V any](m map[string]V, at func(V) time.Time) {
	var oldest string
	var when time.Time
	for k, v := range m {
		if t := at(v); oldest == "" || t.Before(when) {
			oldest, when = k, t
		}
	}
	delete(m, oldest)
}

// last is job id's last remembered progress and when it was answered.
func (c *progressCache) last(id string) (jobs.Progress, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.jobs[id]
	return e.p, e.at, ok
}
