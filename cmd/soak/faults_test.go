package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

func TestClusterFlagSetsTheShapeUnlessGiven(t *testing.T) {
	o, err := parseFlags([]string{"-cluster", "-workers", "3"})
	require.NoError(t, err)
	assert.Equal(t, devserver.EnginePostgres, o.engine)
	assert.Equal(t, 2, o.temporalHosts)
	assert.Equal(t, 3, o.rabbitNodes)
	assert.Equal(t, 2, o.bridges)
	assert.Equal(t, 3, o.workers, "a flag given explicitly wins")

	o, err = parseFlags(nil)
	require.NoError(t, err)
	assert.Equal(t, 1, o.temporalHosts)
	assert.Equal(t, 1, o.rabbitNodes)
	assert.Equal(t, 1, o.bridges)
}

func TestShapeFlagsAreChecked(t *testing.T) {
	for _, args := range [][]string{
		{"-rabbit-nodes", "2"},
		{"-temporal-hosts", "2"}, // the dev server's file is one process's
		{"-bridges", "0"},
		{"-cluster", "-faults", "rabbit-restart"},
		{"-cluster", "-faults", "temporal-restart"},
		{"-faults", "rabbit-node-kill"},
		{"-faults", "temporal-host-kill"},
	} {
		_, err := parseFlags(args)
		assert.Error(t, err, "%v", args)
	}
}

func TestAllFaultsFollowTheShape(t *testing.T) {
	for _, c := range []struct {
		name                       string
		rabbitNodes, temporalHosts int
		in, out                    []string
	}{
		{"single", 1, 1, []string{faultRabbitRestart, faultTemporalRestart}, []string{faultRabbitNodeKill, faultTemporalHostKill}},
		{"cluster", 3, 2, []string{faultRabbitNodeKill, faultTemporalHostKill}, []string{faultRabbitRestart, faultTemporalRestart}},
	} {
		kinds, err := options{faults: "all", rabbitNodes: c.rabbitNodes, temporalHosts: c.temporalHosts}.faultKinds()
		require.NoError(t, err, c.name)
		for _, k := range c.in {
			assert.Contains(t, kinds, k, c.name)
		}
		for _, k := range c.out {
			assert.NotContains(t, kinds, k, c.name)
		}
	}
}

func TestClusterScheduleKillsNodesAndHosts(t *testing.T) {
	kinds, err := options{faults: "all", rabbitNodes: 3, temporalHosts: 2}.faultKinds()
	require.NoError(t, err)
	list := schedule(kinds, 24, 1)
	count := func(k string) int {
		return len(slices.DeleteFunc(slices.Clone(list), func(x string) bool { return x != k }))
	}
	assert.Equal(t, 2, count(faultTemporalHostKill))
	assert.Equal(t, 2, count(faultRabbitNodeKill))
	assert.Equal(t, 0, count(faultTemporalRestart))
	assert.Equal(t, 0, count(faultRabbitRestart))
	assert.Equal(t, 24, count(faultTemporalHostKill)+count(faultBridgeKill)+count(faultWorkerKill), "-kills counts the service's and Temporal's processes")
}
