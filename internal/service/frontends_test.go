package service

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/resolver"
)

// recordingConn is a resolver.ClientConn that records the state it is given.
type recordingConn struct {
	resolver.ClientConn
	state resolver.State
	err   error
}

func (c *recordingConn) UpdateState(s resolver.State) error {
	c.state = s
	return c.err
}

// The resolver gives every frontend, in order, one endpoint each; a state the connection
// refuses fails the build.
func TestFrontendsResolveToEveryAddress(t *testing.T) {
	f := frontends{"10.0.0.1:7233", "10.0.0.2:7233"}
	assert.Equal(t, frontendsScheme+":///10.0.0.1:7233", f.target())
	cc := &recordingConn{}
	_, err := f.Build(resolver.Target{}, cc, resolver.BuildOptions{})
	require.NoError(t, err)
	require.Len(t, cc.state.Endpoints, 2)
	for i, e := range cc.state.Endpoints {
		assert.Equal(t, []resolver.Address{{Addr: f[i]}}, e.Addresses)
	}

	_, err = f.Build(resolver.Target{}, &recordingConn{err: errors.New("bad state")}, resolver.BuildOptions{})
	assert.EqualError(t, err, "bad state")
}
