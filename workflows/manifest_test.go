package workflows_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// manifestName is the file beside the recorded histories that lists each one's SHA-256, in
// sha256sum's format ("<hex>  <name>"), so `sha256sum -c MANIFEST` checks them too.
const manifestName = "MANIFEST"

// addToManifestCmd is how a new recorded history gets its manifest line.
const addToManifestCmd = "go test ./workflows/ -run TestRecordedHistoriesMatchTheManifest -update-manifest"

var updateManifest = flag.Bool("update-manifest", false,
	"add a "+manifestName+" line for each new recorded history; never changes or removes a line")

// TestRecordedHistoriesMatchTheManifest fails when a recorded history is modified, removed or
// added without a manifest line: a history is evidence of what running workflows did, so
// editing one in place would let a change pass the replay tests that real runs would fail.
// With -update-manifest it adds the lines of new files, and still fails on any other change,
// or on a history changed since the base commit (TestRecordedHistoriesMatchTheBase).
func TestRecordedHistoriesMatchTheManifest(t *testing.T) {
	// A history whose line was deleted would pass for a new one: -update-manifest first
	// checks that every history recorded at the base commit is unchanged.
	if *updateManifest && !t.Run("base", func(t *testing.T) { requireHistoriesMatchBase(t, historiesDir) }) {
		t.Fatalf("%s not updated: a recorded history differs from the base commit", manifestName)
	}
	added, err := checkManifest(historiesDir, *updateManifest)
	require.NoError(t, err)
	for _, name := range added {
		t.Logf("added %s to %s", name, filepath.Join(historiesDir, manifestName))
	}
}

// checkManifest compares the files of dir with its manifest. A modified or removed file is an
// error; so is a new one, unless add is set, in which case its line is appended and its name
// returned. Nothing is written when any listed file differs.
func checkManifest(dir string, add bool) ([]string, error) {
	listed, err := readManifest(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read history directory: %w", err)
	}
	var problems, unlisted []string
	present := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || e.Name() == manifestName {
			continue
		}
		present[e.Name()] = true
		sum, err := fileDigest(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		want, ok := listed[e.Name()]
		switch {
		case !ok:
			unlisted = append(unlisted, e.Name())
		case want != sum:
			problems = append(problems, fmt.Sprintf("%s is modified (sha256 %s, manifest %s): a recorded history is never changed; restore it from git and record the new shape under a new name",
				e.Name(), sum, want))
		}
	}
	for name := range listed {
		if !present[name] {
			problems = append(problems, fmt.Sprintf("%s is listed in %s but missing: a recorded history is never removed; restore it", name, manifestName))
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		return nil, fmt.Errorf("recorded histories in %s differ from %s:\n%s", dir, manifestName, strings.Join(problems, "\n"))
	}
	if len(unlisted) == 0 {
		return nil, nil
	}
	if !add {
		return nil, fmt.Errorf("%s: new recorded histories without a %s line; add them with `%s`", strings.Join(unlisted, ", "), manifestName, addToManifestCmd)
	}
	return unlisted, appendManifest(dir, listed, unlisted)
}

// readManifest reads the manifest at path: file name to hex SHA-256.
func readManifest(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read history manifest: %w", err)
	}
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 2*sha256.Size || name == "" {
			return nil, fmt.Errorf("%s:%d: want \"<sha256 hex>  <file name>\", got %q", path, n, sc.Text())
		}
		if _, dup := listed[name]; dup {
			return nil, fmt.Errorf("%s:%d: %s is listed twice", path, n, name)
		}
		listed[name] = sum
	}
	return listed, sc.Err()
}

// appendManifest rewrites the manifest with the lines of listed and of the new files, sorted
// by name; the digests already listed are the ones checkManifest just matched.
func appendManifest(dir string, listed map[string]string, added []string) error {
	all := make(map[string]string, len(listed)+len(added))
	for name, sum := range listed {
		all[name] = sum
	}
	for _, name := range added {
		sum, err := fileDigest(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		all[name] = sum
	}
	var buf bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(all)) {
		fmt.Fprintf(&buf, "%s  %s\n", all[name], name)
	}
	if err := os.WriteFile(filepath.Join(dir, manifestName), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write history manifest: %w", err)
	}
	return nil
}

// fileDigest is the hex SHA-256 of the file at path.
func fileDigest(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("digest recorded history: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// TestCheckManifestCatchesEveryChange: a modified, removed or unlisted file fails the check,
// naming the file; -update-manifest adds only new files' lines and refuses while a listed one
// differs, leaving the manifest as it was.
func TestCheckManifestCatchesEveryChange(t *testing.T) {
	newDir := func(t *testing.T) string {
		dir := t.TempDir()
		for name, body := range map[string]string{"a.json": "{}", "b.json": "[]"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, manifestName), nil, 0o600))
		added, err := checkManifest(dir, true)
		require.NoError(t, err)
		require.Equal(t, []string{"a.json", "b.json"}, added)
		_, err = checkManifest(dir, false)
		require.NoError(t, err, "a manifest just written matches")
		return dir
	}
	manifest := func(t *testing.T, dir string) string {
		b, err := os.ReadFile(filepath.Join(dir, manifestName))
		require.NoError(t, err)
		return string(b)
	}

	t.Run("modified", func(t *testing.T) {
		dir := newDir(t)
		before := manifest(t, dir)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a.json"), []byte("{ }"), 0o600))
		for _, add := range []bool{false, true} {
			_, err := checkManifest(dir, add)
			require.ErrorContains(t, err, "a.json is modified", "add=%v", add)
		}
		require.Equal(t, before, manifest(t, dir), "a refused update writes nothing")
	})
	t.Run("removed", func(t *testing.T) {
		dir := newDir(t)
		require.NoError(t, os.Remove(filepath.Join(dir, "b.json")))
		_, err := checkManifest(dir, true)
		require.ErrorContains(t, err, "b.json is listed in MANIFEST but missing")
	})
	t.Run("added", func(t *testing.T) {
		dir := newDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "c.json"), []byte("{}"), 0o600))
		_, err := checkManifest(dir, false)
		require.ErrorContains(t, err, "c.json: new recorded histories without a MANIFEST line; add them with `"+addToManifestCmd+"`")
		added, err := checkManifest(dir, true)
		require.NoError(t, err)
		require.Equal(t, []string{"c.json"}, added)
		sum, err := fileDigest(filepath.Join(dir, "c.json"))
		require.NoError(t, err)
		require.Contains(t, manifest(t, dir), sum+"  c.json\n")
		_, err = checkManifest(dir, false)
		require.NoError(t, err)
	})
	t.Run("malformed", func(t *testing.T) {
		dir := newDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, manifestName), []byte("abc a.json\n"), 0o600))
		_, err := checkManifest(dir, true)
		require.ErrorContains(t, err, "MANIFEST:1: want")
	})
}
