package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// procGroup measures the CPU of a changing set of processes, those whose command line
// match accepts. PostgreSQL forks a backend per connection, so the set is read from /proc at
// the start, every second meanwhile (cpuMeter) and at the end: a process first seen after the
// start counts from zero (it was born during the step), and one that exits keeps what it had
// used at its last sample.
type procGroup struct {
	match func(cmdline string) bool

	mu          sync.Mutex
	began       bool
	first, last map[int]float64
}

func newProcGroup(match func(cmdline string) bool) *procGroup {
	return &procGroup{match: match, first: map[int]float64{}, last: map[int]float64{}}
}

// sample reads the CPU of every matching process now.
func (g *procGroup) sample() {
	entries, _ := os.ReadDir("/proc")
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !g.match(strings.ReplaceAll(string(cmd), "\x00", " ")) {
			continue
		}
		cpu, err := cpuSeconds(pid)
		if err != nil {
			continue
		}
		g.see(pid, cpu)
	}
	g.began = true
}

// see records a process's CPU seconds; the caller holds mu.
func (g *procGroup) see(pid int, cpu float64) {
	if _, ok := g.first[pid]; !ok {
		if g.began {
			g.first[pid] = 0
		} else {
			g.first[pid] = cpu
		}
	}
	g.last[pid] = cpu
}

// used is the CPU seconds the group used between its first and its last sample.
func (g *procGroup) used() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sum float64
	for pid, last := range g.last {
		sum += max(0, last-g.first[pid])
	}
	return sum
}

// postgresBackends matches the PostgreSQL backends connected to one of dbs: a backend's
// command line is its status, "postgres: [cluster name: ]user database host(port) activity".
// The server's shared processes (WAL writer, checkpointer, autovacuum) name no database and
// are left out: they count under "others".
func postgresBackends(dbs ...string) func(cmdline string) bool {
	return func(cmdline string) bool {
		rest, ok := strings.CutPrefix(cmdline, "postgres: ")
		if !ok {
			return false
		}
		return slices.ContainsFunc(strings.Fields(rest), func(f string) bool { return slices.Contains(dbs, f) })
	}
}
