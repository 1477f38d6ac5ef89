// Package testenv says what a test does when this machine lacks one of its prerequisites.
//
// A test that cannot run must say so: outside CI it skips with the reason (and the test
// run lists every skip with its reason at the end); under CI=true, where `make tools`
// installs every prerequisite (chromium, promtool, rabbitmqctl, the Temporal servers), a
// missing one is a failure, so that CI never passes on tests that did not run.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI: CI set to a true value (true, 1, TRUE, t...:
// strconv.ParseBool's), as CI services and .ci/run set it. Any other spelling of "yes" that
// let skips pass would let CI pass on tests that did not run.
func CI() bool { return IsTrue(os.Getenv("CI")) }

// IsTrue reports whether v is a true value for strconv.ParseBool.
func IsTrue(v string) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err == nil && b
}

// Missing ends the test for want of a prerequisite: a skip with the reason, or under
// CI=true a failure.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	reason := fmt.Sprintf(format, args...)
	if CI() {
		tb.Fatalf("prerequisite missing under CI=true (make tools installs it, or says how): %s", reason)
	}
	tb.Skip(reason + " (CI=true fails instead)")
}

// LookPath is exec.LookPath(name) for a program the test needs; without it, Missing with
// how to install it.
func LookPath(tb testing.TB, name, install string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, "%s not on PATH (%s)", name, install)
	}
	return p
}
