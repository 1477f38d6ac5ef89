package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The helper's outcome is seen from outside: this test binary runs itself with one
// subtest, and the verdict is in the child's verbose output.
func TestMissingSkipsOutsideCIAndFailsUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		LookPath(t, "no-such-program-7f3a", "install it")
		t.Error("LookPath returned for a missing program")
		return
	}
	run := func(ci string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingSkipsOutsideCIAndFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+ci)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	out := run("")
	assert.Contains(t, out, "--- SKIP: TestMissingSkipsOutsideCIAndFailsUnderCI")
	assert.Contains(t, out, "no-such-program-7f3a not on PATH (install it) (CI=true fails instead)")
	out = run("true")
	assert.Contains(t, out, "--- FAIL: TestMissingSkipsOutsideCIAndFailsUnderCI")
	assert.Contains(t, out, "prerequisite missing under CI=true")
}

func TestLookPathFindsAProgram(t *testing.T) {
	p := LookPath(t, "sh", "")
	require.NotEmpty(t, p)
	assert.True(t, strings.HasSuffix(p, "/sh"))
}

// ciValues are values of CI and whether they mean CI: anything but empty, false or 0 (any
// case, white space around it ignored), so that a CI service writing CI=yes, CI=on or a
// build number never lets skips pass.
var ciValues = map[string]bool{
	"true": true, "1": true, "TRUE": true, "True": true, "t": true, " true ": true,
	"yes": true, "on": true, "Y": true, "42": true, "no": true, "off": true, "00": true, "falsey": true,
	"": false, " ": false, "false": false, "FALSE": false, "False": false, "0": false, " 0 ": false, "\tfalse\n": false,
}

func TestIsTrue(t *testing.T) {
	for v, want := range ciValues {
		assert.Equal(t, want, IsTrue(v), "%q", v)
	}
}

// The Makefile's recipes read $CI with its shell function ci_true (CI_TRUE): it agrees with
// IsTrue on every value.
func TestMakefileReadsCIAsIsTrueDoes(t *testing.T) {
	bash := LookPath(t, "bash", "apt-get install -y bash")
	b, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	var def string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CI_TRUE = "); ok {
			def = strings.ReplaceAll(v, "$$", "$")
		}
	}
	require.NotEmpty(t, def, "the Makefile defines CI_TRUE")
	for v, want := range ciValues {
		cmd := exec.Command(bash, "-c", def+"; ci_true")
		cmd.Env = append(os.Environ(), "CI="+v)
		err := cmd.Run()
		assert.Equal(t, want, err == nil, "CI=%q: %v", v, err)
	}
	cmd := exec.Command(bash, "-c", def+"; ci_true")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CI=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	assert.Error(t, cmd.Run(), "CI unset")
}
