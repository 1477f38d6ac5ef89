package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The release builds (the Makefile's LDFLAGS, the Dockerfile's go build) stamp the version
// and revision that the built binary prints: a stamp naming a package or variable that does
// not exist is silently ignored by the linker, and the image would say "dev".
func TestReleaseBuildsStampTheBinary(t *testing.T) {
	for _, tc := range []struct{ file, version, revision string }{
		{"Makefile", "$(VERSION)", "$(REVISION)"},
		{"Dockerfile", "${VERSION}", "${REVISION}"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", tc.file))
			require.NoError(t, err)
			stamps := regexp.MustCompile(`-X \S+=\S+`).FindAllString(string(b), -1)
			require.Len(t, stamps, 2, "%s: the -X stamps of version and revision", tc.file)
			flags := strings.Join(stamps, " ")
			flags = strings.ReplaceAll(flags, tc.version, "v9.8.7-stamped")
			flags = strings.ReplaceAll(flags, tc.revision, "0123456789abcdef0123456789abcdef01234567")

			bin := filepath.Join(t.TempDir(), "retry-scheduler")
			cmd := exec.Command("go", "build", "-ldflags", flags, "-o", bin, ".")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "go build -ldflags %q: %s", flags, out)
			out, err = exec.Command(bin, "-version").CombinedOutput()
			require.NoError(t, err, "%s -version: %s", bin, out)
			require.Contains(t, string(out), "v9.8.7-stamped", "-version printed %q", out)
			require.Contains(t, string(out), "0123456789ab", "-version printed %q", out)
		})
	}
}
