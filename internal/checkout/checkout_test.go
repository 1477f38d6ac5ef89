package checkout

import (
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDescribeNamesTheCommit(t *testing.T) {
	commit, _ := Describe()
	if _, err := exec.Command("git", "rev-parse", "HEAD").Output(); err != nil {
		assert.Equal(t, "unknown", commit, "outside a checkout")
		return
	}
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{40}$`), commit)
}
