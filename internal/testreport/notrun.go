package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// outside is a line of the file of tests that run only outside make test, on purpose.
type outside struct {
	dir     string         // the package's directory from the module root, with slashes
	name    *regexp.Regexp // the whole test name must match
	pattern string         // as written
	reason  string
	line    int
}

// outsideLine is a line of the outside file: directory, pattern, reason (the rest).
var outsideLine = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\S.*)$`)

// readOutside reads the file of tests that run only outside make test: one a line, the
// package's directory from the module root, a regular expression the whole test name must
// match, then why (the target that runs them, and why make test does not); blank lines and
// lines starting with # are skipped.
func readOutside(path string) ([]outside, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tests outside make test: %w", err)
	}
	defer f.Close()
	var out []outside
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := outsideLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: want the package's directory, a test-name pattern and why, got %q", path, n, line)
		}
		re, err := regexp.Compile("^(?:" + m[2] + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		dir := strings.TrimSuffix(strings.TrimPrefix(m[1], "./"), "/")
		if dir == "" {
			dir = "."
		}
		out = append(out, outside{dir: dir, name: re, pattern: m[2], reason: m[3], line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// matches reports whether the line declares the test.
func (o outside) matches(t testFunc) bool { return o.dir == t.dir && o.name.MatchString(t.name) }

// notRunOptions are -not-run's inputs besides the tree and the runs.
type notRunOptions struct {
	outside     []outside
	outsideFile string // its name, in messages
	// failOnNotRun fails when a test of the tree ran in no run (the default under CI,
	// as skips fail there: every prerequisite is installed).
	failOnNotRun bool
}

// reportNotRun prints, for every Test and Fuzz function of the tree, those no run ran (each
// with why it may be: in no run's report, skipped, not built on this GOOS/GOARCH); those the
// outside file declares as run only outside make test, and those runs excluded on purpose
// (E2E_POSTGRES_SKIP) and none ran, each with its reason. It returns the exit code: 1 when a
// test did not run and o.failOnNotRun, or when a line of the outside file is stale (declares
// no test, or a test that ran).
func reportNotRun(out io.Writer, tr tree, runs map[string]runRecord, o notRunOptions) int {
	used := make([]bool, len(o.outside))
	var outsideTests, excludedTests, notRun, failures []string
	inTree := map[string]bool{}
	for _, t := range tr.funcs {
		inTree[t.key()] = true
		where := t.file
		if len(t.tags) > 0 {
			where += ", -tags " + strings.Join(t.tags, ",")
		}
		declared := -1
		for i, d := range o.outside {
			if d.matches(t) {
				declared, used[i] = i, true
				break
			}
		}
		rec := runs[t.key()]
		status := rec.status
		switch {
		case declared >= 0 && status == ran:
			failures = append(failures, fmt.Sprintf("FAIL: %s:%d declares %s %s as run only outside make test, but it ran: remove the line",
				o.outsideFile, o.outside[declared].line, t.pkg, t.name))
		case declared >= 0:
			outsideTests = append(outsideTests, fmt.Sprintf("  OUTSIDE %s %s (%s): %s", t.pkg, t.name, where, o.outside[declared].reason))
		case status == ran:
		case !t.buildable:
			notRun = append(notRun, fmt.Sprintf("  NOT RUN %s %s (%s): not built on %s/%s with any of its tags", t.pkg, t.name, where, runtime.GOOS, runtime.GOARCH))
		case status == skipped:
			notRun = append(notRun, fmt.Sprintf("  NOT RUN %s %s (%s): skipped (the tier's list of skipped tests says why), run by no other", t.pkg, t.name, where))
		case status == excluded:
			excludedTests = append(excludedTests, fmt.Sprintf("  EXCLUDED %s %s (%s): %s", t.pkg, t.name, where, rec.reason))
		default:
			notRun = append(notRun, fmt.Sprintf("  NOT RUN %s %s (%s): in no tier's report", t.pkg, t.name, where))
		}
	}
	for i, d := range o.outside {
		if !used[i] {
			failures = append(failures, fmt.Sprintf("FAIL: %s:%d: %s %s declares no test of the tree: remove the line, or fix it", o.outsideFile, d.line, d.dir, d.pattern))
		}
	}
	// A test a run reported that the scan did not find would mean the scan misses tests,
	// and so could miss tests that did not run. Examples are not scanned.
	var unknown []string
	for key := range runs {
		_, name, _ := strings.Cut(key, " ")
		if !inTree[key] && !strings.HasPrefix(name, "Example") {
			unknown = append(unknown, "  UNKNOWN "+key)
		}
	}
	slices.Sort(unknown)
	if len(notRun) > 0 && o.failOnNotRun {
		failures = append(failures, fmt.Sprintf("FAIL: %d tests ran in no tier, under CI: run each in a tier, or declare it in %s with why", len(notRun), o.outsideFile))
	}
	if len(unknown) > 0 && o.failOnNotRun {
		failures = append(failures, fmt.Sprintf("FAIL: %d tests that ran are unknown to testreport's scan of the tree", len(unknown)))
	}

	fmt.Fprintf(out, "== tests of the tree (Test and Fuzz functions of every *_test.go, any build tag): %d\n", len(tr.funcs))
	printList(out, fmt.Sprintf("== run only outside make test, on purpose (%s): %d", o.outsideFile, len(outsideTests)), outsideTests, false)
	printList(out, fmt.Sprintf("== excluded on purpose by a run (-skip, with its reason) and run by no other: %d", len(excludedTests)), excludedTests, false)
	printList(out, fmt.Sprintf("== reported by a run but not found by testreport's scan of the tree: %d (the scan misses tests: fix it)", len(unknown)), unknown, false)
	printList(out, fmt.Sprintf("== tests not run: %d", len(notRun)), notRun, true)
	for _, f := range failures {
		fmt.Fprintln(out, f)
	}
	if len(failures) > 0 {
		return 1
	}
	return 0
}

// printList prints the heading and the lines; an empty list only when always.
func printList(out io.Writer, heading string, lines []string, always bool) {
	if len(lines) == 0 && !always {
		return
	}
	fmt.Fprintln(out, heading)
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}
