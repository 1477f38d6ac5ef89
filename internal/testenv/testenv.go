// Package testenv says what a test does when this machine lacks one of its prerequisites.
//
// A test that cannot run must say so: outside CI it skips with the reason (and the test
// run lists every skip with its reason at the end); under CI (CI=true, or any value but
// false or 0), where `make tools` installs every prerequisite (chromium, promtool,
// rabbitmqctl, the Temporal servers), a missing one is a failure, so that CI never passes
// on tests that did not run.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI: CI set to anything but false or 0 (IsTrue), as
// CI services and .ci/run set it (true, 1, yes, on, a build number...). Only an explicit
// false turns it off: a spelling of "yes" that let skips pass would let CI pass on tests
// that did not run. The Makefile's shell checks of $CI (CI_TRUE) read it the same way.
func CI() bool { return IsTrue(os.Getenv("CI")) }

// IsTrue reports whether v, without surrounding white space, is non-empty and neither
// false nor 0 (false in any case).
func IsTrue(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// Missing ends the test for want of a prerequisite: a skip with the reason, or under CI a
// failure.
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
