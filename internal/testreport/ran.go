package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// ranTest is a top-level test of a run and what became of it: pass, fail or skip from the
// stream, or excluded (-excluded: the run left it out on purpose, for reason).
type ranTest struct {
	action, pkg, test, reason string
}

// ranFileEnv names the file each report appends its run's tests to (-ran-file's default):
// `make test` sets it for all its tiers, then `testreport -not-run` reads it.
const ranFileEnv = "TESTREPORT_RAN_FILE"

// appendRan appends one line a test, "action package test" (and the reason of an excluded
// one), to the file. The lines go in one write on a file opened O_APPEND, so that two tiers
// reporting at once (the PostgreSQL pass beside the dev-server tier) do not interleave.
func appendRan(path string, tests []ranTest) error {
	var b strings.Builder
	for _, r := range tests {
		fmt.Fprintf(&b, "%s %s %s", r.action, r.pkg, r.test)
		if r.reason != "" {
			fmt.Fprintf(&b, " %s", strings.Join(strings.Fields(r.reason), " "))
		}
		b.WriteByte('\n')
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("ran file: %w", err)
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ran file: %w", err)
	}
	return nil
}

// ranStatus is what became of a test over every run of the file; the greatest wins.
type ranStatus int

const (
	// excluded: the runs that had the test left it out on purpose (-excluded, with a reason:
	// E2E_POSTGRES_SKIP's, that another pass runs it).
	excluded ranStatus = iota + 1
	// skipped: a run skipped it (a missing prerequisite: its tier lists why), and none ran it.
	skipped
	// ran: some run passed or failed it (a failure is its tier's to report).
	ran
)

// runRecord is a test's status over the runs, and the reason a run excluded it.
type runRecord struct {
	status ranStatus
	reason string
}

// readRan reads a file of appendRan's lines: for each test (package and name), whether any
// run ran it, or one skipped it, or runs only excluded it (and why).
func readRan(path string) (map[string]runRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ran file: %w", err)
	}
	defer f.Close()
	got := map[string]runRecord{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 || len(fields) > 3 && fields[0] != "excluded" {
			return nil, fmt.Errorf("ran file %s:%d: want action package test, got %q", path, n, sc.Text())
		}
		rec := runRecord{}
		switch fields[0] {
		case "pass", "fail":
			rec.status = ran
		case "skip":
			rec.status = skipped
		case "excluded":
			rec = runRecord{status: excluded, reason: strings.Join(fields[3:], " ")}
		default:
			return nil, fmt.Errorf("ran file %s:%d: unknown action %q", path, n, fields[0])
		}
		key := fields[1] + " " + fields[2]
		if rec.status > got[key].status {
			got[key] = rec
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ran file %s: %w", path, err)
	}
	return got, nil
}
