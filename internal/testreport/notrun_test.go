package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture is a module of test files, testdata/tree: tests without tags, with the integration
// tag, with integration and processes or temporalhosts, an external test package, a file of
// another GOOS, and what is not a test (TestMain, Testify, a method, a benchmark, an example,
// files under testdata, _hidden and .dot, a nested module).
const fixture = "testdata/tree"

func scanFixture(t *testing.T) tree {
	t.Helper()
	tr, err := scanTree(fixture)
	require.NoError(t, err)
	return tr
}

// listed is a test function as the assertions below write it.
func listed(tr tree) []string {
	var out []string
	for _, f := range tr.funcs {
		out = append(out, fmt.Sprintf("%s %s %s tags=%s buildable=%v", f.pkg, f.name, f.file, strings.Join(f.tags, ","), f.buildable))
	}
	return out
}

func TestScanFindsEveryTestAndFuzzFunctionWhateverItsTags(t *testing.T) {
	tr := scanFixture(t)
	assert.Equal(t, []string{
		"example.com/m TestRoot root_test.go tags= buildable=true",
		"example.com/m/a FuzzA a/a_test.go tags= buildable=true",
		"example.com/m/a FuzzIntegration a/a_integration_test.go tags=integration buildable=true",
		"example.com/m/a TestA a/a_test.go tags= buildable=true",
		"example.com/m/a TestExternal a/ext_test.go tags= buildable=true",
		"example.com/m/a TestIntegrationA a/a_integration_test.go tags=integration buildable=true",
		"example.com/m/a TestOnPlan9 a/a_plan9_test.go tags= buildable=false",
		"example.com/m/a TestUnitOnly a/unit_only_test.go tags= buildable=true",
		"example.com/m/a Test_underscore a/a_test.go tags= buildable=true",
		"example.com/m/e2e TestAcrossProcesses e2e/processes_test.go tags=integration,processes buildable=true",
		"example.com/m/e2e TestAcrossProcessesWithKills e2e/processes_test.go tags=integration,processes buildable=true",
		"example.com/m/e2e TestEndToEnd e2e/e2e_test.go tags=integration buildable=true",
		"example.com/m/e2e TestHostLoss e2e/hosts_test.go tags=integration,temporalhosts buildable=true",
	}, listed(tr))
	assert.Len(t, tr.files, 9, "every *_test.go file, with or without tests, outside testdata, _hidden, .dot and the nested module")
}

func TestIsTestIsGoTestsRule(t *testing.T) {
	for name, want := range map[string]bool{
		"Test": true, "TestA": true, "Test_a": true, "Test1": true, "TestÄ": true,
		"Testify": false, "Tes": false, "test": false, "xTest": false, "Testé": false,
	} {
		assert.Equal(t, want, isTest(name, "Test"), name)
	}
}

// The smallest set of tags that compiles the file: GOOS and GOARCH names and go1.N are no
// tags; a file no set compiles here is not buildable.
func TestFileTags(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		build, name string
		tags        []string
		buildable   bool
	}{
		{"", "x_test.go", nil, true},
		{"//go:build integration", "x_test.go", []string{"integration"}, true},
		{"//go:build integration && !processes", "x_test.go", []string{"integration"}, true},
		{"//go:build integration && processes", "x_test.go", []string{"integration", "processes"}, true},
		{"//go:build (integration || foo) && " + runtime.GOOS, "x_test.go", []string{"foo"}, true},
		{"//go:build go1.1 && !plan9", "x_test.go", nil, true},
		{"//go:build plan9 && integration", "x_test.go", nil, false},
		{"", "x_plan9_test.go", nil, false},
		{"// +build ignore\n\n//go:build ignore", "x_test.go", []string{"ignore"}, true},
	} {
		sub := filepath.Join(dir, fmt.Sprint(i))
		require.NoError(t, os.MkdirAll(sub, 0o755))
		path := filepath.Join(sub, tc.name)
		require.NoError(t, os.WriteFile(path, []byte(tc.build+"\n\npackage x\n"), 0o644))
		file, _, err := scanFile(path, tc.name, "m")
		require.NoError(t, err, tc.build)
		assert.Equal(t, tc.tags, file.tags, tc.build)
		assert.Equal(t, tc.buildable, file.buildable, tc.build)
	}

	path := filepath.Join(dir, "many_test.go")
	require.NoError(t, os.WriteFile(path, []byte("//go:build a && b && c && d && e && f && g && h && i\n\npackage x\n"), 0o644))
	_, _, err := scanFile(path, "many_test.go", "m")
	assert.ErrorContains(t, err, "more than 8 build tags")
	require.NoError(t, os.WriteFile(path, []byte("//go:build a &&\n\npackage x\n"), 0o644))
	_, _, err = scanFile(path, "many_test.go", "m")
	assert.Error(t, err, "a //go:build line that does not parse")
	require.NoError(t, os.WriteFile(path, []byte("package x\nfunc {"), 0o644))
	_, _, err = scanFile(path, "many_test.go", "m")
	assert.Error(t, err, "a file that does not parse")
}

func TestScanNeedsAModule(t *testing.T) {
	_, err := scanTree(t.TempDir())
	assert.Error(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("go 1.26\n"), 0o644))
	_, err = scanTree(dir)
	assert.ErrorContains(t, err, "no module line")
}

func TestFuzzTargetsWithTheTagsOfTheirFile(t *testing.T) {
	var out strings.Builder
	printFuzzTargets(&out, scanFixture(t))
	assert.Equal(t, "./a -tags= FuzzA\n./a -tags=integration FuzzIntegration\n", out.String())
}

// The integration tier: each package with a test file built only with the tags, and a -skip
// of its tests built without tags (the unit tier's); a tag set that leaves a file out
// (processes) does not bring in its package.
func TestTaggedPackagesSkipTheUnitTiersTests(t *testing.T) {
	tr := scanFixture(t)
	var out strings.Builder
	require.NoError(t, printTaggedPackages(&out, tr, "integration"))
	assert.Equal(t, "./a\t^(FuzzA|TestA|TestExternal|TestUnitOnly|Test_underscore)$\n./e2e\t\n", out.String())

	out.Reset()
	require.NoError(t, printTaggedPackages(&out, tr, "processes"))
	assert.Empty(t, out.String(), "processes alone builds no file")

	assert.Error(t, printTaggedPackages(&out, tree{files: []testFile{{dir: ".", file: "x_test.go", path: "missing/x_test.go"}}}, "integration"))
}

// A stream's top-level tests (subtests are their parent's) go to the ran file, one line each.
func TestRanFileGetsTheTopLevelTestsOfEachRun(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ran")
	in := `{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"pass","Package":"m/a","Test":"TestA/sub"}
{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":1}
{"Action":"skip","Package":"m/a","Test":"TestB"}
{"Action":"fail","Package":"m/a","Test":"TestC"}
{"Action":"skip","Package":"m/a","Test":"TestD"}
{"Action":"fail","Package":"m/a"}
`
	var out strings.Builder
	assert.Equal(t, 1, run(strings.NewReader(in), &out, options{ranFile: p}), "TestC failed")
	// A second run (the PostgreSQL pass): TestB passes; it excludes TestC, which the first
	// ran, TestD, which the first skipped, and TestE, which none runs.
	excl := []skip{{pkg: "m/a", test: "TestC", reason: "elsewhere", excluded: true}, {pkg: "m/a", test: "TestD", reason: "elsewhere", excluded: true},
		{pkg: "m/a", test: "TestE", reason: "not on\tPostgreSQL:  slow", excluded: true}}
	assert.Equal(t, 0, run(strings.NewReader(`{"Action":"pass","Package":"m/a","Test":"TestB"}`+"\n"), &out, options{ranFile: p, excluded: excl}))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "pass m/a TestA\nskip m/a TestB\nfail m/a TestC\nskip m/a TestD\npass m/a TestB\nexcluded m/a TestC elsewhere\nexcluded m/a TestD elsewhere\nexcluded m/a TestE not on PostgreSQL: slow\n", string(b))

	runs, err := readRan(p)
	require.NoError(t, err)
	assert.Equal(t, map[string]runRecord{
		"m/a TestA": {status: ran}, "m/a TestB": {status: ran}, "m/a TestC": {status: ran}, "m/a TestD": {status: skipped},
		"m/a TestE": {status: excluded, reason: "not on PostgreSQL: slow"},
	}, runs, "a test one run ran ran, whatever another did; one skipped and run by none did not, whatever the reason another excluded it")

	out.Reset()
	assert.Equal(t, 1, run(strings.NewReader(in), &out, options{ranFile: filepath.Join(p, "not-a-dir")}))
	assert.Contains(t, out.String(), "testreport: ran file:")

	for _, bad := range []string{"pass m/a\n", "ran m/a TestA\n", "pass m/a TestA why\n"} {
		require.NoError(t, os.WriteFile(p, []byte(bad), 0o644))
		_, err := readRan(p)
		assert.Error(t, err, bad)
	}
	_, err = readRan(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
}

func writeOutside(t *testing.T, text string) []outside {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outside.txt")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	outs, err := readOutside(p)
	require.NoError(t, err)
	return outs
}

// fixtureRuns is what make test's tiers would report of the fixture: the unit tier, the
// integration tier (TestIntegrationA skipped there) and a PostgreSQL pass that excludes
// TestHostLoss, which no other runs.
func fixtureRuns() map[string]runRecord {
	r := func(s ranStatus) runRecord { return runRecord{status: s} }
	return map[string]runRecord{
		"example.com/m TestRoot":                r(ran),
		"example.com/m/a FuzzA":                 r(ran),
		"example.com/m/a TestA":                 r(ran),
		"example.com/m/a TestExternal":          r(ran),
		"example.com/m/a TestUnitOnly":          r(ran),
		"example.com/m/a Test_underscore":       r(ran),
		"example.com/m/a ExampleA":              r(ran), // examples are not scanned, nor unknown
		"example.com/m/a TestIntegrationA":      r(skipped),
		"example.com/m/e2e TestEndToEnd":        r(ran),
		"example.com/m/e2e TestHostLoss":        {status: excluded, reason: "not on PostgreSQL: slow"},
		"example.com/m/e2e TestAcrossProcesses": r(skipped),
	}
}

const fixtureOutside = `# comment

e2e  TestAcrossProcesses.*   make test-processes: too much for 2 cores
`

func TestNotRunListsWhatNoTierRanAndWhatRunsOutsideOnPurpose(t *testing.T) {
	tr := scanFixture(t)
	o := notRunOptions{outside: writeOutside(t, fixtureOutside), outsideFile: "outside.txt"}
	var out strings.Builder
	assert.Equal(t, 0, reportNotRun(&out, tr, fixtureRuns(), o), "outside CI, tests not run are listed, not failed")
	assert.Equal(t, `== tests of the tree (Test and Fuzz functions of every *_test.go, any build tag): 13
== run only outside make test, on purpose (outside.txt): 2
  OUTSIDE example.com/m/e2e TestAcrossProcesses (e2e/processes_test.go, -tags integration,processes): make test-processes: too much for 2 cores
  OUTSIDE example.com/m/e2e TestAcrossProcessesWithKills (e2e/processes_test.go, -tags integration,processes): make test-processes: too much for 2 cores
== excluded on purpose by a run (-skip, with its reason) and run by no other: 1
  EXCLUDED example.com/m/e2e TestHostLoss (e2e/hosts_test.go, -tags integration,temporalhosts): not on PostgreSQL: slow
== tests not run: 3
  NOT RUN example.com/m/a FuzzIntegration (a/a_integration_test.go, -tags integration): in no tier's report
  NOT RUN example.com/m/a TestIntegrationA (a/a_integration_test.go, -tags integration): skipped (the tier's list of skipped tests says why), run by no other
  NOT RUN example.com/m/a TestOnPlan9 (a/a_plan9_test.go): not built on `+runtime.GOOS+"/"+runtime.GOARCH+` with any of its tags
`, out.String())

	out.Reset()
	o.failOnNotRun = true
	assert.Equal(t, 1, reportNotRun(&out, tr, fixtureRuns(), o))
	assert.Contains(t, out.String(), "FAIL: 3 tests ran in no tier, under CI: run each in a tier, or declare it in outside.txt with why\n")

	runs := fixtureRuns()
	runs["example.com/m/a FuzzIntegration"] = runRecord{status: ran}
	runs["example.com/m/a TestIntegrationA"] = runRecord{status: ran}
	runs["example.com/m/e2e TestHostLoss"] = runRecord{status: ran}
	out.Reset()
	var buildable tree // without TestOnPlan9
	for _, f := range tr.funcs {
		if f.buildable {
			buildable.funcs = append(buildable.funcs, f)
		}
	}
	assert.Equal(t, 0, reportNotRun(&out, buildable, runs, o), out.String())
	assert.Contains(t, out.String(), "== tests not run: 0\n")
	assert.NotContains(t, out.String(), "FAIL")
	assert.NotContains(t, out.String(), "EXCLUDED", "a test one pass excludes and another runs ran")
}

// The outside file stays true: a line that declares no test, or a test that ran, fails the
// run under CI or not.
func TestNotRunFailsOnAStaleOutsideLine(t *testing.T) {
	tr := scanFixture(t)
	o := notRunOptions{outside: writeOutside(t, fixtureOutside+"a TestGone  was removed\ne2e TestEndToEnd  runs elsewhere\n"), outsideFile: "outside.txt"}
	var out strings.Builder
	assert.Equal(t, 1, reportNotRun(&out, tr, fixtureRuns(), o))
	assert.Contains(t, out.String(), "FAIL: outside.txt:4: a TestGone declares no test of the tree: remove the line, or fix it\n")
	assert.Contains(t, out.String(), "FAIL: outside.txt:5 declares example.com/m/e2e TestEndToEnd as run only outside make test, but it ran: remove the line\n")
}

// A test a run reported that the scan does not know means the scan misses tests: listed, and
// a failure under CI. Examples are not scanned.
func TestNotRunNamesTestsTheScanMissed(t *testing.T) {
	tr := scanFixture(t)
	runs := fixtureRuns()
	runs["example.com/m/z TestElsewhere"] = runRecord{status: ran}
	var out strings.Builder
	o := notRunOptions{outside: writeOutside(t, fixtureOutside), outsideFile: "outside.txt"}
	assert.Equal(t, 0, reportNotRun(&out, tr, runs, o))
	assert.Contains(t, out.String(), "== reported by a run but not found by testreport's scan of the tree: 1 (the scan misses tests: fix it)\n  UNKNOWN example.com/m/z TestElsewhere\n")
	assert.NotContains(t, out.String(), "ExampleA")
	o.failOnNotRun = true
	out.Reset()
	assert.Equal(t, 1, reportNotRun(&out, tr, runs, o))
	assert.Contains(t, out.String(), "FAIL: 1 tests that ran are unknown to testreport's scan of the tree\n")
}

func TestReadOutsideRejectsWhatIsNotALine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "outside.txt")
	for _, bad := range []string{"e2e TestX\n", "e2e Test( why\n"} {
		require.NoError(t, os.WriteFile(p, []byte(bad), 0o644))
		_, err := readOutside(p)
		assert.Error(t, err, bad)
	}
	_, err := readOutside(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)

	outs := writeOutside(t, "./e2e/  TestA|TestB   why,  with   spaces \n.  TestRoot  at the root\n")
	require.Len(t, outs, 2)
	assert.Equal(t, "e2e", outs[0].dir)
	assert.Equal(t, "why,  with   spaces", outs[0].reason, "the reason as written")
	assert.True(t, outs[0].matches(testFunc{dir: "e2e", name: "TestB"}))
	assert.False(t, outs[0].matches(testFunc{dir: "e2e", name: "TestBC"}), "the whole name must match")
	assert.False(t, outs[0].matches(testFunc{dir: "e2e/sub", name: "TestA"}))
	assert.Equal(t, ".", outs[1].dir)
}

// -not-run end to end on the fixture: the ran file, the scan, the outside file.
func TestMainNotRun(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ran")
	var b strings.Builder
	for key, r := range fixtureRuns() {
		action := map[ranStatus]string{ran: "pass", skipped: "skip", excluded: "excluded"}[r.status]
		fmt.Fprintf(&b, "%s %s %s\n", action, key, r.reason)
	}
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	outside := filepath.Join(dir, "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte(fixtureOutside), 0o644))

	assert.Equal(t, 0, mainNotRun(fixture, p, outside, false), "an absolute -outside is taken as it is")
	assert.Equal(t, 1, mainNotRun(fixture, p, outside, true), "3 tests did not run")
	assert.Equal(t, 2, mainNotRun(fixture, p, "outside.txt", false), "a relative -outside is under -root: the fixture has none")
	assert.Equal(t, 2, mainNotRun(fixture, "", outside, false), "no ran file")
	assert.Equal(t, 2, mainNotRun(fixture, filepath.Join(dir, "missing"), outside, false))
	assert.Equal(t, 2, mainNotRun(filepath.Join(dir, "no-module"), p, outside, false), "no module to scan")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	assert.Equal(t, 2, mainNotRun(fixture, p, outside, false), "an empty ran file: the tiers did not write it")
}

// The repository's own outside-make-test.txt reads, and each of its lines declares tests of
// the tree (make test's last step would fail on a stale line; the unit tier says so first).
func TestOutsideFileOfTheRepository(t *testing.T) {
	outs, err := readOutside("outside-make-test.txt")
	require.NoError(t, err)
	tr, err := scanTree("../..")
	require.NoError(t, err)
	for _, o := range outs {
		var declared []string
		for _, f := range tr.funcs {
			if o.matches(f) {
				declared = append(declared, f.name)
			}
		}
		assert.NotEmpty(t, declared, "line %d: %s %s", o.line, o.dir, o.pattern)
	}
}
