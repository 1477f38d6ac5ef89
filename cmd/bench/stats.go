package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"time"
)

// latency summarises lateness samples in milliseconds.
type latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// summarize returns the nearest-rank percentiles of ds (which it sorts).
func summarize(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return latency{
		Count: len(ds),
		P50:   ms(rank(ds, 0.50)),
		P99:   ms(rank(ds, 0.99)),
		Max:   ms(ds[len(ds)-1]),
		Mean:  round(ms(sum) / float64(len(ds))),
	}
}

// rank is the nearest-rank percentile of sorted ds.
func rank(ds []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

func round(f float64) float64 { return math.Round(f*10) / 10 }

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on
// every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// cpuSeconds is the user+system CPU time a process has used so far, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces; fields after it
	// are space-separated: state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of pid %d: malformed stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of pid %d: malformed stat", pid)
	}
	utime, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu of pid %d: malformed stat", pid)
	}
	return float64(utime+stime) / clockTicks, nil
}

// machineCPUSeconds is the CPU time all cores have spent busy (not idle or waiting for I/O)
// since boot, from the first line of /proc/stat.
func machineCPUSeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("machine cpu: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 8 || string(f[0]) != "cpu" {
		return 0, errors.New("machine cpu: malformed /proc/stat")
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal ...: all but idle (4) and iowait (5).
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, errors.New("machine cpu: malformed /proc/stat")
		}
		busy += n
	}
	return float64(busy) / clockTicks, nil
}

// cpuMeter measures, between newCPUMeter and used, the CPU seconds of named processes, of
// named groups of processes (procGroup) and of the whole machine; "others" is the machine's
// minus ours: everything else running meanwhile (the broker, and other people's work on a
// shared machine).
type cpuMeter struct {
	pids    map[string]int
	groups  map[string]*procGroup
	start   map[string]float64
	machine float64
	began   time.Time
	stop    chan struct{}
	done    chan struct{}
}

// groupSampleInterval is how often a group's processes are read, so that one that exits
// during the step is counted up to its last second.
const groupSampleInterval = time.Second

func newCPUMeter(pids map[string]int, groups map[string]*procGroup) *cpuMeter {
	m := &cpuMeter{pids: pids, groups: groups, start: map[string]float64{}, began: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	for name, pid := range pids {
		m.start[name], _ = cpuSeconds(pid)
	}
	for _, g := range groups {
		g.sample()
	}
	m.machine, _ = machineCPUSeconds()
	go m.watch()
	return m
}

func (m *cpuMeter) watch() {
	defer close(m.done)
	if len(m.groups) == 0 {
		return
	}
	tick := time.NewTicker(groupSampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
			for _, g := range m.groups {
				g.sample()
			}
		}
	}
}

// close ends the groups' sampling; record does it too.
func (m *cpuMeter) close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// record puts into s the CPU seconds each process and group used since newCPUMeter (-1 when
// unreadable), plus "others", and how many cores the others kept busy on average.
func (m *cpuMeter) record(s *step) {
	m.close()
	s.CPU = m.used()
	if o, ok := s.CPU["others"]; ok {
		s.OthersBusyCores = round(o / time.Since(m.began).Seconds())
	}
}

func (m *cpuMeter) used() map[string]float64 {
	out := map[string]float64{}
	ours := 0.0
	for name, pid := range m.pids {
		now, err := cpuSeconds(pid)
		if err != nil {
			out[name] = -1
			continue
		}
		out[name] = math.Round((now-m.start[name])*100) / 100
		ours += now - m.start[name]
	}
	for name, g := range m.groups {
		g.sample()
		u := g.used()
		out[name] = math.Round(u*100) / 100
		ours += u
	}
	if now, err := machineCPUSeconds(); err == nil && m.machine > 0 {
		out["others"] = math.Round(max(0, now-m.machine-ours)*100) / 100
	}
	return out
}
