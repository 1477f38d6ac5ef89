package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stream as `go test -json -cover` writes it: one package passing with a skip, one
// failing.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"    a_test.go:9: chatter\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK"}
{"Action":"run","Package":"m/a","Test":"TestTool"}
{"Action":"output","Package":"m/a","Test":"TestTool","Output":"=== RUN   TestTool\n"}
{"Action":"output","Package":"m/a","Test":"TestTool","Output":"    a_test.go:12: promtool not on PATH\n"}
{"Action":"output","Package":"m/a","Test":"TestTool","Output":"--- SKIP: TestTool (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestTool"}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"coverage: 90.0% of statements\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.01s\tcoverage: 90.0% of statements\n"}
{"Action":"pass","Package":"m/a"}
{"Action":"output","Package":"m/b","Output":"\tm/b\t\tcoverage: 0.0% of statements\n"}
{"Action":"skip","Package":"m/b"}
{"Action":"run","Package":"m/c","Test":"TestBad"}
{"Action":"output","Package":"m/c","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"m/c","Test":"TestBad","Output":"    c_test.go:5: want 1, got 2\n"}
{"Action":"output","Package":"m/c","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"m/c","Test":"TestBad"}
{"Action":"output","Package":"m/c","Output":"FAIL\n"}
{"Action":"output","Package":"m/c","Output":"FAIL\tm/c\t0.01s\n"}
{"Action":"fail","Package":"m/c"}
`

func TestPlainOutputSkipsAndFailure(t *testing.T) {
	var out strings.Builder
	code := run(strings.NewReader(stream), &out, options{})
	assert.Equal(t, 1, code, "a test failed")
	got := out.String()
	assert.Contains(t, got, "ok  \tm/a\t0.01s\tcoverage: 90.0% of statements\n")
	assert.Contains(t, got, "    c_test.go:5: want 1, got 2\n--- FAIL: TestBad (0.00s)\n")
	assert.Contains(t, got, "FAIL\tm/c\t0.01s\n")
	assert.Contains(t, got, "== skipped tests: 1\n  SKIP m/a TestTool: a_test.go:12: promtool not on PATH\n")
	assert.NotContains(t, got, "chatter", "a passing test's output stays quiet, as in plain go test")
	assert.NotContains(t, got, "=== RUN")
	assert.NotContains(t, got, "PASS\n")
	assert.Equal(t, 1, strings.Count(got, "coverage: 90.0%"), "the test binary's coverage line is not repeated")
}

// passing is the stream without the failing package.
func passing() string { return stream[:strings.Index(stream, `{"Action":"run","Package":"m/c"`)] }

func TestSkipsFailTheRunWhenAsked(t *testing.T) {
	var out strings.Builder
	assert.Equal(t, 0, run(strings.NewReader(passing()), &out, options{}))
	out.Reset()
	assert.Equal(t, 1, run(strings.NewReader(passing()), &out, options{failOnSkip: true}))
	assert.Contains(t, out.String(), "FAIL: 1 skipped tests under CI=true")
}

func TestCoverageGate(t *testing.T) {
	for _, tc := range []struct {
		gate string
		code int
		says string
	}{
		{"m/a=85", 0, "== coverage: m/a 90.0% (gate 85%)"},
		{"m/a=95", 1, "FAIL: coverage: m/a 90.0% is below the gate of 95%"},
		{"m/a=85,m/b=10", 1, "FAIL: coverage: m/b 0.0% is below the gate of 10%"},
		{"m/z=85", 1, "FAIL: coverage: m/z reported no coverage"},
	} {
		var g gateFlag
		require.NoError(t, g.Set(tc.gate))
		var out strings.Builder
		assert.Equal(t, tc.code, run(strings.NewReader(passing()), &out, options{gates: g}), tc.gate)
		assert.Contains(t, out.String(), tc.says, tc.gate)
	}
	var g gateFlag
	assert.NoError(t, g.Set(""))
	assert.Empty(t, g)
	assert.Error(t, g.Set("m/a"))
	assert.Error(t, g.Set("m/a=101"))
	assert.Error(t, g.Set("=5"))
}

func TestTotalCoverage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cover.out")
	// Three blocks (2, 3 and 5 statements); the second listed twice, covered once.
	require.NoError(t, os.WriteFile(p, []byte(`mode: atomic
m/a/a.go:1.1,2.2 2 1
m/a/a.go:3.1,4.2 3 0
m/a/a.go:3.1,4.2 3 4
m/b/b.go:1.1,9.2 5 0
`), 0o644))
	total, err := totalCoverage(p)
	require.NoError(t, err)
	assert.InDelta(t, 50.0, total, 0.001)

	var out strings.Builder
	assert.Equal(t, 0, run(strings.NewReader(passing()), &out, options{profile: p}))
	assert.Contains(t, out.String(), "== coverage: total 50.0% of statements\n")

	require.NoError(t, os.WriteFile(p, []byte("mode: set\nnonsense\n"), 0o644))
	_, err = totalCoverage(p)
	assert.Error(t, err)
}

func TestNonJSONLinesPassThrough(t *testing.T) {
	var out strings.Builder
	run(strings.NewReader("go: downloading x v1\n"+passing()), &out, options{})
	assert.True(t, strings.HasPrefix(out.String(), "go: downloading x v1\n"))
}

// list is `go test -list` of two packages, for the tests a run excludes with -skip.
const list = `TestSlow
TestSlower
ok  	m/e2e	0.012s
?   	m/none	[no test files]
TestOther
ok  	m/a	(cached)
`

func TestExcludedTestsAreListedWithTheirReason(t *testing.T) {
	p := filepath.Join(t.TempDir(), "excluded")
	require.NoError(t, os.WriteFile(p, []byte(list), 0o644))
	excluded, err := readExcluded(p, "run on the dev server only")
	require.NoError(t, err)

	var out strings.Builder
	code := run(strings.NewReader(passing()), &out, options{excluded: excluded, failOnSkip: false})

	assert.Equal(t, 0, code)
	assert.Contains(t, out.String(), "== skipped tests: 4 (3 excluded by the run)\n"+
		"  SKIP m/a TestTool: a_test.go:12: promtool not on PATH\n"+
		"  EXCLUDED m/e2e TestSlow: run on the dev server only\n"+
		"  EXCLUDED m/e2e TestSlower: run on the dev server only\n"+
		"  EXCLUDED m/a TestOther: run on the dev server only\n")
}

func TestExcludedTestsDoNotFailTheRunUnderCI(t *testing.T) {
	// The stream up to m/a's skipped test: a run with no skip of its own.
	clean := passing()[:strings.Index(passing(), `{"Action":"run","Package":"m/a","Test":"TestTool"}`)]
	excluded, err := parseList(strings.NewReader(list), "why")
	require.NoError(t, err)

	var out strings.Builder
	assert.Equal(t, 0, run(strings.NewReader(clean), &out, options{excluded: excluded, failOnSkip: true}))
	assert.Contains(t, out.String(), "== skipped tests: 3 (3 excluded by the run)\n")
}

func TestExcludedListRejectsWhatIsNotAList(t *testing.T) {
	for _, bad := range []string{
		"TestA\nFAIL\tm/e2e [build failed]\n",
		"TestA\n",
		"# m/e2e\ne2e/x_test.go:1: syntax error\n",
	} {
		_, err := parseList(strings.NewReader(bad), "why")
		assert.Error(t, err, bad)
	}
	_, err := readExcluded(filepath.Join(t.TempDir(), "missing"), "why")
	assert.Error(t, err)
}

func TestTotalGate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cover.out")
	// 2 of 4 statements covered: 50 %.
	require.NoError(t, os.WriteFile(p, []byte("mode: atomic\nm/a/a.go:1.1,2.2 2 1\nm/a/a.go:3.1,4.2 2 0\n"), 0o644))
	for _, tc := range []struct {
		gate, profile string
		code          int
		says          string
	}{
		{"total=50", p, 0, "== coverage: total 50.0% of statements (gate 50%)\n"},
		{"total=51", p, 1, "FAIL: coverage: total 50.0% is below the gate of 51%\n"},
		{"total=10", "", 1, "FAIL: coverage: a total gate of 10% needs -coverprofile\n"},
	} {
		var g gateFlag
		require.NoError(t, g.Set(tc.gate))
		var out strings.Builder
		assert.Equal(t, tc.code, run(strings.NewReader(passing()), &out, options{profile: tc.profile, gates: g}), tc.gate)
		assert.Contains(t, out.String(), tc.says, tc.gate)
		assert.NotContains(t, out.String(), "total reported no coverage", "total is no package")
	}
}

func TestGatesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gates")
	require.NoError(t, os.WriteFile(p, []byte("# ratchet\nm/a=85\n\n  m/b=10  \ntotal=40\n"), 0o644))
	var g gateFlag
	require.NoError(t, g.readFile(p))
	assert.Equal(t, gateFlag{{pkg: "m/a", min: 85}, {pkg: "m/b", min: 10}, {pkg: "total", min: 40}}, g)

	require.NoError(t, os.WriteFile(p, []byte("m/a=85\nm/b\n"), 0o644))
	err := g.readFile(p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), ":2:", "the error names the line")
	assert.Error(t, g.readFile(filepath.Join(t.TempDir(), "missing")))
}

func TestEveryPackageNeedsAGateOrOff(t *testing.T) {
	// passing() reports coverage for m/a (90 %) and m/b (0 %, no test files).
	var g gateFlag
	require.NoError(t, g.Set("m/a=85"))
	var out strings.Builder
	assert.Equal(t, 1, run(strings.NewReader(passing()), &out, options{gates: g, everyPackage: true}))
	assert.Contains(t, out.String(), "FAIL: coverage: m/b 0.0% has no gate")
	assert.NotContains(t, out.String(), "m/a 90.0% has no gate")

	require.NoError(t, g.Set("m/b=off"))
	out.Reset()
	assert.Equal(t, 0, run(strings.NewReader(passing()), &out, options{gates: g, everyPackage: true}), out.String())
	assert.NotContains(t, out.String(), "coverage: m/b", "an off package is neither gated nor reported")
	assert.Equal(t, "m/a=85,m/b=off", g.String())

	out.Reset()
	assert.Equal(t, 0, run(strings.NewReader(passing()), &out, options{gates: gateFlag{{pkg: "m/a", min: 85}}}),
		"without a gates file, ungated packages pass")
}

func TestSlowestTopLevelTestsAreListed(t *testing.T) {
	in := `{"Action":"pass","Package":"m/a","Test":"TestQuick","Elapsed":0.5}
{"Action":"pass","Package":"m/a","Test":"TestSlow/sub","Elapsed":30}
{"Action":"pass","Package":"m/a","Test":"TestSlow","Elapsed":31}
{"Action":"fail","Package":"m/b","Test":"TestMiddling","Elapsed":4.25}
{"Action":"skip","Package":"m/b","Test":"TestSkipped","Elapsed":99}
{"Action":"pass","Package":"m/a","Elapsed":40}
`
	var out strings.Builder
	run(strings.NewReader(in), &out, options{slowest: 2})
	assert.Contains(t, out.String(), "== slowest tests: 2 of 3, which took 35.8 s in all\n"+
		"     31.0 s  m/a TestSlow\n"+
		"      4.2 s  m/b TestMiddling\n", "top-level tests only, slowest first; skips and packages are not tests that ran")

	out.Reset()
	run(strings.NewReader(in), &out, options{})
	assert.NotContains(t, out.String(), "slowest", "0 lists none")
}
