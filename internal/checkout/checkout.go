// Package checkout names the git commit a tool runs from, so that a figure it records can be
// tied to the code that produced it.
package checkout

import (
	"os/exec"
	"strings"
)

// Describe is the commit of the checkout in the working directory and whether tracked files
// differ from it; "unknown" when git cannot tell (no git, not a checkout).
func Describe() (commit string, dirty bool) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), err == nil && len(strings.TrimSpace(string(status))) > 0
}
