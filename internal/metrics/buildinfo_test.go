package metrics

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/buildinfo"
)

func TestRegistryExportsBuildInfo(t *testing.T) {
	f := families(t, NewRegistry())[BuildInfoName]
	require.NotNil(t, f, "%s not exported", BuildInfoName)
	require.Len(t, f.GetMetric(), 1)
	m := f.GetMetric()[0]
	assert.Equal(t, 1.0, m.GetGauge().GetValue())
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := buildinfo.Get()
	assert.Equal(t, map[string]string{"version": want.Version, "revision": want.Revision, "goversion": want.GoVersion}, labels)
}
