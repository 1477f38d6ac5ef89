package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGoInstallFromACheckout installs the service the way the README and CONTRIBUTING tell a
// newcomer to (`go install ./cmd/retry-scheduler` from the module's root, into GOBIN), and
// runs what it installed: the module path, the main's package and its imports must all
// resolve from a checkout with nothing built beforehand.
func TestGoInstallFromACheckout(t *testing.T) {
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", "./cmd/retry-scheduler")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go install: %s", out)

	bin := filepath.Join(gobin, "retry-scheduler")
	out, err = exec.Command(bin, "-version").CombinedOutput()
	require.NoError(t, err, "%s -version: %s", bin, out)
	require.True(t, strings.HasPrefix(string(out), "retry-scheduler "), "-version printed %q", out)
}
