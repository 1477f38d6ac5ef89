package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPostgresBackends(t *testing.T) {
	match := postgresBackends("retry_scheduler_tmp_ab12", "retry_scheduler_tmp_ab12_visibility")
	for cmd, want := range map[string]bool{
		"postgres: 15/main: postgres retry_scheduler_tmp_ab12 127.0.0.1(51234) idle          ":        true,
		"postgres: postgres retry_scheduler_tmp_ab12_visibility 127.0.0.1(51236) INSERT":              true,
		"postgres: 15/main: postgres retry_scheduler_tmp_cd34 127.0.0.1(51238) idle":                  false,
		"postgres: 15/main: postgres retry_scheduler_tmp_ab12_other 127.0.0.1(51240) idle":            false,
		"postgres: 15/main: checkpointer ":                                                            false,
		"/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main retry_scheduler_tmp_ab12": false,
	} {
		assert.Equal(t, want, match(cmd), cmd)
	}
}

// A process seen at the start counts from there; one born later counts from zero; one that
// exits keeps what it had used at its last sample.
func TestProcGroupAccounting(t *testing.T) {
	g := newProcGroup(func(string) bool { return false })
	g.see(10, 5.0) // running at the start
	g.see(11, 2.0) // running at the start, exits later
	g.began = true
	g.see(10, 6.5)
	g.see(11, 2.25)
	g.see(12, 0.5) // born during the step
	g.see(12, 1.0)
	g.see(10, 7.0)
	assert.Equal(t, 2.0+0.25+1.0, g.used())
}

// The CPU meter measures a group alongside the named processes and counts it in ours.
func TestCPUMeterGroup(t *testing.T) {
	self := os.Getpid()
	g := newProcGroup(func(string) bool { return false })
	m := newCPUMeter(map[string]int{"bench": self}, map[string]*procGroup{"db": g})
	var s step
	m.record(&s)
	assert.Contains(t, s.CPU, "db")
	assert.Contains(t, s.CPU, "bench")
	assert.GreaterOrEqual(t, s.CPU["bench"], 0.0)
	assert.Zero(t, s.CPU["db"], "no matching process")
	m.close() // closing twice is harmless
}
