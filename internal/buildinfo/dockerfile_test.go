package buildinfo

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The image builds with the Go go.mod names, exactly: a golang:1.26 tag drifts to whatever
// 1.26.x is newest when the image is built, and GOTOOLCHAIN=local there refuses a Go older
// than go.mod's.
func TestDockerfileGoMatchesGoMod(t *testing.T) {
	want := goModGo(t, "../../go.mod")
	froms := regexp.MustCompile(`(?im)^\s*FROM\s+(?:--\S+\s+)*golang:(\S+)`).FindAllStringSubmatch(readFile(t, "../../Dockerfile"), -1)
	require.NotEmpty(t, froms, "Dockerfile: no FROM golang:<tag>")
	for _, m := range froms {
		tag := m[1]
		assert.True(t, tag == want || strings.HasPrefix(tag, want+"-"),
			"Dockerfile builds with golang:%s; go.mod wants Go %s (golang:%s or golang:%s-<variant>)", tag, want, want, want)
	}
}

// The image stamps this package's variables, so that a renamed variable does not silently
// leave the image reporting "dev".
func TestDockerfileStampsBuildInfo(t *testing.T) {
	df := readFile(t, "../../Dockerfile")
	for _, x := range []string{"-X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.version=${VERSION}", "-X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.revision=${REVISION}"} {
		assert.Contains(t, df, x)
	}
	assert.Contains(t, df, "\nLABEL org.opencontainers.image.title=\"retry-scheduler\"\n")
}

// .git stays out of the build context: it is not needed (the revision is a build argument)
// and would invalidate the COPY layer on every commit.
func TestDockerignoreExcludesGit(t *testing.T) {
	excluded := false
	for _, line := range strings.Split(readFile(t, "../../.dockerignore"), "\n") {
		switch strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "/"), "/") {
		case ".git":
			excluded = true
		case "!.git":
			excluded = false
		}
	}
	assert.True(t, excluded, ".dockerignore does not exclude .git")
}

// goModGo is the Go version go.mod asks for: its toolchain line, else its go line.
func goModGo(t *testing.T, path string) string {
	t.Helper()
	var goLine, toolchain string
	sc := bufio.NewScanner(strings.NewReader(readFile(t, path)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "go":
			goLine = f[1]
		case "toolchain":
			toolchain = strings.TrimPrefix(f[1], "go")
		}
	}
	require.NotEmpty(t, goLine, "%s: no go line", path)
	if toolchain != "" && toolchain != "default" {
		return toolchain
	}
	return goLine
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
