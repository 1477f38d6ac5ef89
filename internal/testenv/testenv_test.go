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

// Every true spelling counts as CI, so that a CI service writing CI=1 or CI=TRUE never lets
// skips pass; anything else is not CI.
func TestIsTrue(t *testing.T) {
	for _, v := range []string{"true", "1", "TRUE", "True", "t", " true "} {
		assert.True(t, IsTrue(v), "%q", v)
	}
	for _, v := range []string{"", "false", "0", "yes", "no"} {
		assert.False(t, IsTrue(v), "%q", v)
	}
}
