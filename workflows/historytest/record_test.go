package historytest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A history file that exists is left as it was: the second write fails with ErrExists.
func TestWriteNewRefusesAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "delivered.json")
	require.NoError(t, writeNew(path, []byte("first")))

	err := writeNew(path, []byte("second"))
	require.ErrorIs(t, err, ErrExists)
	require.ErrorContains(t, err, path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "first", string(b), "the recorded history must be unchanged")
}

// Without RECORD_HISTORIES nothing is recorded and no server is asked.
func TestRecordWithoutTheVariableDoesNothing(t *testing.T) {
	t.Setenv(RecordEnv, "")
	path, err := Record(t.Context(), nil, "id", "name")
	require.NoError(t, err)
	require.Empty(t, path)
}

// Without RECORD_HISTORIES RecordRun records nothing either, whatever run it names.
func TestRecordRunWithoutTheVariableDoesNothing(t *testing.T) {
	t.Setenv(RecordEnv, "")
	path, err := RecordRun(t.Context(), nil, "id", "run", "name")
	require.NoError(t, err)
	require.Empty(t, path)
}
