package freeport

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The port Get picks is left in TIME_WAIT, which keeps binds to port 0 off it, and a
// server that binds it by number still can.
func TestGetLeavesThePortInTimeWaitAndBindable(t *testing.T) {
	port, err := Get()
	require.NoError(t, err)
	if runtime.GOOS == "linux" {
		assert.True(t, inTimeWait(t, port), "port %d has no TIME_WAIT socket in /proc/net/tcp", port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err, "a listener with SO_REUSEADDR binds the picked port")
	require.NoError(t, l.Close())
}

func TestFromStaysInItsRange(t *testing.T) {
	port, err := From(21000)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, port, 21000)
	assert.Less(t, port, 21000+4000+2000)
}

// inTimeWait reads /proc/net/tcp for a socket on 127.0.0.1:port in state 06 (TIME_WAIT).
func inTimeWait(t *testing.T, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	local := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == local && f[3] == "06" {
			return true
		}
	}
	return false
}
