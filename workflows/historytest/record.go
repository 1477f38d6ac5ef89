// Package historytest records workflow histories from a real server for the replay tests
// (workflows/testdata/histories). It is imported only by tests.
package historytest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
)

// RecordEnv names the directory a test run writes its histories into; unset, nothing is
// recorded.
const RecordEnv = "RECORD_HISTORIES"

// ErrExists is returned when the history file is already there: a recorded history is never
// replaced, since one that a change stops replaying is what the change must keep working.
// Record into an empty directory and add the new file under its own name.
var ErrExists = errors.New("recorded histories are never re-recorded; record into an empty directory and add the new one under its own name")

// Record writes the history of workflow id (its latest run) to $RECORD_HISTORIES/<name>.json
// and returns the path; without the variable it does nothing and returns "". It refuses to
// overwrite an existing file (ErrExists), checked and created in one step so that two
// recorders cannot both write it.
func Record(ctx context.Context, c client.Client, id, name string) (string, error) {
	return RecordRun(ctx, c, id, "", name)
}

// RecordRun is Record for run runID of workflow id ("" is its latest run): a run that
// continued as new is recorded by its own run ID, since the latest run is the one it started.
func RecordRun(ctx context.Context, c client.Client, id, runID, name string) (string, error) {
	dir := os.Getenv(RecordEnv)
	if dir == "" {
		return "", nil
	}
	h := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, runID, false, 0)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return "", fmt.Errorf("read history of %s (run %q): %w", id, runID, err)
		}
		h.Events = append(h.Events, e)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encode history of %s (run %q): %w", id, runID, err)
	}
	path := filepath.Join(dir, name+".json")
	if err := writeNew(path, b); err != nil {
		return "", err
	}
	return path, nil
}

// writeNew creates path with b, failing with ErrExists when it is already there.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("record %s: %w", path, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("record history: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("record %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record %s: %w", path, err)
	}
	return nil
}
