// Command testreport reads `go test -json` on stdin and writes what a plain `go test`
// would (package results, the output of failed tests), then a list of every skipped test
// with its reason, and enforces the coverage gate. `make test` pipes each test tier
// through it, so that CI's log says which tests did not run and why.
//
//	go test -json -cover -coverprofile=cover.out ./... | go run ./internal/testreport \
//	    -coverprofile cover.out -min-coverage github.com/retry-scheduler/retry-scheduler/workflows=85
//
// With -coverage-gates, every package that reports a coverage must have a line in the file:
// a gate, or "off" (a tool, a test helper), so that a new package is not left ungated.
//
// A run that leaves tests out with -skip names them with -excluded, a file of `go test -list`
// for the same pattern, and -excluded-reason: they are listed among the skipped tests, as
// excluded, and do not fail the run under CI (leaving them out is the run's decision).
//
// It exits 1 when a test or a build failed, when a package named by -min-coverage is below
// its minimum (or reported no coverage), or, with -fail-on-skip (the default under CI),
// when any test skipped.
//
// With -ran-file (default $TESTREPORT_RAN_FILE, which `make test` sets for all its tiers) it
// appends each top-level test of the stream and what became of it (pass, fail, skip), and
// the tests -excluded names, with the reason, to that file. Then, at the end of make test,
//
//	go run ./internal/testreport -not-run -ran-file FILE
//
// scans every *_test.go file of the tree (any build tag) for its Test and Fuzz functions and
// lists those no tier ran; those outside-make-test.txt declares as run only outside make
// test, and those a run excluded on purpose and no other ran, each with its reason. With
// -fail-on-not-run (the default under CI) a test not run fails it; a stale line of
// outside-make-test.txt (no such test, or a test that ran) fails it always.
//
// Two more modes serve the Makefile's test selection, from the same scan: -fuzz-targets
// lists each Fuzz target with the -tags its file needs (make fuzz, fuzz-short), and
// -tagged-packages TAGS lists the packages that have test files built only with TAGS, each
// with a -skip pattern of its tests the unit tier ran (make test-integration).
//
// CI is true for any value but an empty one, false or 0 (testenv.IsTrue).
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

func main() {
	fs := flag.NewFlagSet("testreport", flag.ExitOnError)
	profile := fs.String("coverprofile", "", "coverage profile of the run, for the total")
	var gates gateFlag
	fs.Var(&gates, "min-coverage", "package=percent: fail when the package's coverage is below (repeatable, or comma-separated); total=percent gates the total")
	gatesFile := fs.String("coverage-gates", "", "file of gates, one package=percent (or package=off) a line, # comments: every package with statements must have one")
	excluded := fs.String("excluded", "", "output of go test -list PATTERN for the tests the run excludes with -skip PATTERN")
	excludedReason := fs.String("excluded-reason", "", "why the -excluded tests are left out")
	slowest := fs.Int("slowest", 10, "list the N slowest top-level tests (0: none)")
	failOnSkip := fs.Bool("fail-on-skip", testenv.CI(), "fail when any test skipped (default: under CI)")
	ranFile := fs.String("ran-file", os.Getenv(ranFileEnv), "append the stream's top-level tests and what became of them to this file; with -not-run, read it (default $"+ranFileEnv+")")
	notRun := fs.Bool("not-run", false, "instead of reading a stream: list the tests of the tree that no run of -ran-file ran")
	failOnNotRun := fs.Bool("fail-on-not-run", testenv.CI(), "with -not-run: fail when a test did not run (default: under CI)")
	root := fs.String("root", ".", "the module's root, for -not-run, -fuzz-targets and -tagged-packages")
	outsideFile := fs.String("outside", "internal/testreport/outside-make-test.txt", "with -not-run: the tests that run only outside make test, on purpose (relative to -root)")
	fuzzTargets := fs.Bool("fuzz-targets", false, "instead of reading a stream: list each Fuzz target of the tree: package directory, -tags=its file's tags, name")
	taggedPackages := fs.String("tagged-packages", "", "instead of reading a stream: list each package with test files built only with these tags (comma-separated), a tab, and a -skip pattern of its tests built without tags")
	_ = fs.Parse(os.Args[1:])
	switch {
	case *notRun:
		os.Exit(mainNotRun(*root, *ranFile, *outsideFile, *failOnNotRun))
	case *fuzzTargets || *taggedPackages != "":
		tr, err := scanTree(*root)
		if err == nil && *fuzzTargets {
			printFuzzTargets(os.Stdout, tr)
		} else if err == nil {
			err = printTaggedPackages(os.Stdout, tr, *taggedPackages)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	if *gatesFile != "" {
		if err := gates.readFile(*gatesFile); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	o := options{profile: *profile, gates: gates, failOnSkip: *failOnSkip, everyPackage: *gatesFile != "", slowest: *slowest, ranFile: *ranFile}
	if *excluded != "" {
		list, err := readExcluded(*excluded, *excludedReason)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		o.excluded = list
	}
	os.Exit(run(os.Stdin, os.Stdout, o))
}

type options struct {
	profile    string
	gates      gateFlag
	failOnSkip bool
	// everyPackage fails a package with statements that has no gate (nor an "off" one), so
	// that a new package cannot slip past the gates file.
	everyPackage bool
	// excluded are the tests the run left out (-skip), each with its reason.
	excluded []skip
	// slowest is how many of the slowest top-level tests to list, so that CI's log says
	// where a tier's time goes.
	slowest int
	// ranFile, if set, gets the stream's top-level tests appended (appendRan), for -not-run.
	ranFile string
}

// mainNotRun is -not-run: the exit code.
func mainNotRun(root, ranFile, outsideFile string, failOnNotRun bool) int {
	if ranFile == "" {
		fmt.Fprintln(os.Stderr, "testreport: -not-run needs -ran-file (or $"+ranFileEnv+")")
		return 2
	}
	runs, err := readRan(ranFile)
	if err == nil && len(runs) == 0 {
		err = fmt.Errorf("ran file %s: no test ran: did the tiers run with $%s set?", ranFile, ranFileEnv)
	}
	var tr tree
	if err == nil {
		tr, err = scanTree(root)
	}
	var outs []outside
	if err == nil {
		if !filepath.IsAbs(outsideFile) {
			outsideFile = filepath.Join(root, outsideFile)
		}
		outs, err = readOutside(outsideFile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		return 2
	}
	return reportNotRun(os.Stdout, tr, runs, notRunOptions{outside: outs, outsideFile: outsideFile, failOnNotRun: failOnNotRun})
}

// run reports the stream and returns the exit code.
func run(in io.Reader, out io.Writer, o options) int {
	r, err := read(in, out)
	if err != nil {
		fmt.Fprintln(out, "testreport:", err)
		return 1
	}
	ok := !r.failed
	if o.ranFile != "" {
		tests := r.ran
		for _, x := range o.excluded {
			tests = append(tests, ranTest{action: "excluded", pkg: x.pkg, test: x.test, reason: x.reason})
		}
		if err := appendRan(o.ranFile, tests); err != nil {
			fmt.Fprintln(out, "testreport:", err)
			ok = false
		}
	}
	printSkips(out, append(r.skips, o.excluded...))
	printSlowest(out, r.timings, o.slowest)
	if len(r.skips) > 0 && o.failOnSkip {
		fmt.Fprintf(out, "FAIL: %d skipped tests under CI=true: every prerequisite is installed there (make tools)\n", len(r.skips))
		ok = false
	}
	if !checkCoverage(out, r.coverage, o.gates) {
		ok = false
	}
	if o.everyPackage && !checkEveryPackageGated(out, r.coverage, o.gates) {
		ok = false
	}
	if !checkTotal(out, o.profile, o.gates) {
		ok = false
	}
	if !ok {
		return 1
	}
	return 0
}

// printSkips lists the skipped tests, those the run excluded last.
func printSkips(out io.Writer, skips []skip) {
	if len(skips) == 0 {
		fmt.Fprintln(out, "== skipped tests: none")
		return
	}
	excluded := 0
	for _, s := range skips {
		if s.excluded {
			excluded++
		}
	}
	if excluded > 0 {
		fmt.Fprintf(out, "== skipped tests: %d (%d excluded by the run)\n", len(skips), excluded)
	} else {
		fmt.Fprintf(out, "== skipped tests: %d\n", len(skips))
	}
	for _, s := range skips {
		reason := s.reason
		if reason == "" {
			reason = "(no reason given)"
		}
		word := "SKIP"
		if s.excluded {
			word = "EXCLUDED"
		}
		fmt.Fprintf(out, "  %s %s %s: %s\n", word, s.pkg, s.test, reason)
	}
}

// printSlowest lists the n slowest top-level tests, slowest first, and what all of them took.
func printSlowest(out io.Writer, timings []timing, n int) {
	if n <= 0 || len(timings) == 0 {
		return
	}
	sorted := slices.Clone(timings)
	slices.SortStableFunc(sorted, func(a, b timing) int { return cmp.Compare(b.seconds, a.seconds) })
	total := 0.0
	for _, t := range sorted {
		total += t.seconds
	}
	n = min(n, len(sorted))
	fmt.Fprintf(out, "== slowest tests: %d of %d, which took %.1f s in all\n", n, len(sorted), total)
	for _, t := range sorted[:n] {
		fmt.Fprintf(out, "  %7.1f s  %s %s\n", t.seconds, t.pkg, t.test)
	}
}

// checkCoverage prints each gated package's coverage and reports whether all pass.
func checkCoverage(out io.Writer, got map[string]float64, gates gateFlag) bool {
	ok := true
	for _, g := range gates {
		pct, found := got[g.pkg]
		switch {
		case g.pkg == totalGate, g.off: // checkTotal's; not gated
		case !found:
			fmt.Fprintf(out, "FAIL: coverage: %s reported no coverage (gate %.0f%%)\n", g.pkg, g.min)
			ok = false
		case pct < g.min:
			fmt.Fprintf(out, "FAIL: coverage: %s %.1f%% is below the gate of %.0f%%\n", g.pkg, pct, g.min)
			ok = false
		default:
			fmt.Fprintf(out, "== coverage: %s %.1f%% (gate %.0f%%)\n", g.pkg, pct, g.min)
		}
	}
	return ok
}

// checkEveryPackageGated reports whether every package that reported a coverage has a gate,
// naming those that do not.
func checkEveryPackageGated(out io.Writer, got map[string]float64, gates gateFlag) bool {
	gated := map[string]bool{}
	for _, g := range gates {
		gated[g.pkg] = true
	}
	var missing []string
	for pkg := range got {
		if !gated[pkg] {
			missing = append(missing, pkg)
		}
	}
	slices.Sort(missing)
	for _, pkg := range missing {
		fmt.Fprintf(out, "FAIL: coverage: %s %.1f%% has no gate: add it to the gates file (package=percent, or package=off for a tool)\n", pkg, got[pkg])
	}
	return len(missing) == 0
}

// checkTotal prints the total coverage of the profile, if any, and reports whether it meets
// the total gate, if any.
func checkTotal(out io.Writer, profile string, gates gateFlag) bool {
	min, gated := -1.0, false
	for _, g := range gates {
		if g.pkg == totalGate && !g.off {
			min, gated = g.min, true
		}
	}
	if profile == "" {
		if gated {
			fmt.Fprintf(out, "FAIL: coverage: a total gate of %.0f%% needs -coverprofile\n", min)
		}
		return !gated
	}
	total, err := totalCoverage(profile)
	switch {
	case err != nil:
		fmt.Fprintln(out, "testreport:", err)
		return false
	case total < min:
		fmt.Fprintf(out, "FAIL: coverage: total %.1f%% is below the gate of %.0f%%\n", total, min)
		return false
	case gated:
		fmt.Fprintf(out, "== coverage: total %.1f%% of statements (gate %.0f%%)\n", total, min)
	default:
		fmt.Fprintf(out, "== coverage: total %.1f%% of statements\n", total)
	}
	return true
}

// totalGate is the name of the gate on the total coverage, every package of the run together.
const totalGate = "total"

// gate is one -min-coverage: a package (or totalGate) and its minimum percentage.
type gate struct {
	pkg string
	min float64
	// off: the package is known and deliberately not gated (a tool, a test helper).
	off bool
}

type gateFlag []gate

func (g *gateFlag) String() string {
	parts := make([]string, len(*g))
	for i, x := range *g {
		parts[i] = fmt.Sprintf("%s=%g", x.pkg, x.min)
		if x.off {
			parts[i] = x.pkg + "=off"
		}
	}
	return strings.Join(parts, ",")
}

func (g *gateFlag) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return nil // no gate: make passes an empty COVERAGE_GATES
	}
	for _, part := range strings.Split(v, ",") {
		pkg, pct, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && pkg != "" && pct == "off" {
			*g = append(*g, gate{pkg: pkg, off: true})
			continue
		}
		min, err := strconv.ParseFloat(pct, 64)
		if !ok || pkg == "" || err != nil || min < 0 || min > 100 {
			return fmt.Errorf("%q: want package=percent", part)
		}
		*g = append(*g, gate{pkg: pkg, min: min})
	}
	return nil
}

// readFile adds the gates of a file: one package=percent a line; blank lines and lines
// starting with # are skipped.
func (g *gateFlag) readFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("coverage gates: %w", err)
	}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := g.Set(line); err != nil {
			return fmt.Errorf("coverage gates %s:%d: %w", path, n+1, err)
		}
	}
	return nil
}
