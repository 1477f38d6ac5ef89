package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's pass, fail or skip
}

// skip is a skipped test and the lines it logged (t.Skip's message among them), or a test
// the run excluded (-skip), with the reason it was excluded.
type skip struct {
	pkg, test, reason string
	excluded          bool
}

// result is what the stream said.
type result struct {
	failed   bool
	skips    []skip
	coverage map[string]float64 // by package, from its "coverage: N% of statements" line
	timings  []timing           // top-level tests that passed or failed, in the order they ended
	ran      []ranTest          // top-level tests that passed, failed or skipped, in that order
}

// timing is how long a top-level test took.
type timing struct {
	pkg, test string
	seconds   float64
}

var coverageLine = regexp.MustCompile(`coverage: ([0-9.]+)% of statements`)

// read writes the plain output of the stream to out and collects the result. A line
// that is not JSON (go test's own errors) is written as it is.
func read(in io.Reader, out io.Writer) (result, error) {
	r := result{coverage: map[string]float64{}}
	logs := map[string][]string{} // by package and test: the test's output so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				packageOutput(out, &r, e)
			} else if !progressLine(e.Output) {
				logs[key] = append(logs[key], e.Output)
			}
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			r.failed = true
		case "fail":
			r.failed = true
			r.noteTiming(e)
			r.noteRan(e)
			if e.Test != "" {
				fmt.Fprint(out, strings.Join(logs[key], ""))
			}
			delete(logs, key)
		case "skip":
			if e.Test != "" {
				r.skips = append(r.skips, skip{pkg: e.Package, test: e.Test, reason: skipReason(logs[key])})
			}
			r.noteRan(e)
			delete(logs, key)
		case "pass":
			r.noteTiming(e)
			r.noteRan(e)
			delete(logs, key)
		}
	}
	return r, sc.Err()
}

// packageOutput writes a package-level line as plain go test does (without the test
// binary's bare PASS and coverage lines, which the "ok" line repeats) and notes the
// package's coverage.
func packageOutput(out io.Writer, r *result, e event) {
	if m := coverageLine.FindStringSubmatch(e.Output); m != nil {
		if pct, err := strconv.ParseFloat(m[1], 64); err == nil {
			r.coverage[e.Package] = pct
		}
	}
	if e.Output == "PASS\n" || strings.HasPrefix(e.Output, "coverage: ") || progressLine(e.Output) {
		return
	}
	fmt.Fprint(out, e.Output)
}

// progressLine is a line of the verbose run that plain go test does not show.
func progressLine(s string) bool {
	t := strings.TrimSpace(s)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// skipReason is what a skipped test logged, on one line.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " / ")
}

// noteTiming keeps how long a top-level test took (subtests are inside their parent's time).
func (r *result) noteTiming(e event) {
	if e.Test == "" || strings.Contains(e.Test, "/") {
		return
	}
	r.timings = append(r.timings, timing{pkg: e.Package, test: e.Test, seconds: e.Elapsed})
}

// noteRan keeps what became of a top-level test, for the tests-not-run summary (a subtest is
// its parent's).
func (r *result) noteRan(e event) {
	if e.Test == "" || strings.Contains(e.Test, "/") {
		return
	}
	r.ran = append(r.ran, ranTest{action: e.Action, pkg: e.Package, test: e.Test})
}
