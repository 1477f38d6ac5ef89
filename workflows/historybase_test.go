package workflows_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

// historyBaseEnv names the commit the recorded histories are compared with (a branch, a tag
// or a hash: CI sets it to the pull request's base). Unset, the base is the merge base of HEAD
// with main (origin/main where there is no local main), else HEAD itself.
const historyBaseEnv = "HISTORY_BASE"

// baseBranches are the branches whose merge base with HEAD is the base, the first that exists.
var baseBranches = []string{"main", "origin/main"}

// errNoRepository is returned when the recorded histories are not in a git work tree with a
// commit (a source tarball, git not installed): there is no base to compare them with.
var errNoRepository = errors.New("no git repository with a commit holds the recorded histories")

// TestRecordedHistoriesMatchTheBase fails when a history recorded at the base commit is
// modified or removed in the working tree, whatever the MANIFEST says: a manifest line can be
// rewritten with the file (-update-manifest adds one for a file whose line was deleted), the
// commit the change starts from cannot. Without git or a repository it is skipped with the
// reason (a failure under CI=true).
func TestRecordedHistoriesMatchTheBase(t *testing.T) {
	requireHistoriesMatchBase(t, historiesDir)
}

// requireHistoriesMatchBase fails t when a file of dir at the base commit is modified or
// missing, and skips it (Missing) when there is no repository to compare with.
func requireHistoriesMatchBase(t *testing.T, dir string) {
	t.Helper()
	repo, err := openRepo(dir)
	if errors.Is(err, errNoRepository) {
		testenv.Missing(t, "cannot compare the recorded histories with their base commit: %v", err)
	}
	require.NoError(t, err)
	base, err := historyBase(repo, os.Getenv)
	require.NoError(t, err)
	problems, err := changedSinceBase(repo, base)
	require.NoError(t, err)
	require.Empty(t, problems, "recorded histories differ from the base commit %s (%s names another)", short(base), historyBaseEnv)
	problems, err = changedSinceAdded(repo)
	require.NoError(t, err)
	require.Empty(t, problems, "recorded histories differ from the commits that added them")
	t.Logf("the recorded histories of %s match the base commit %s and the commits that added them", dir, short(base))
}

// changedSinceAdded compares each file of the repository's directory at HEAD (the MANIFEST
// aside) with the version the commit that last added it holds, and says which differ: an
// edit committed on main, where HEAD is the base, is caught too, whatever the MANIFEST says.
func changedSinceAdded(g gitRepo) ([]string, error) {
	files, err := filesAt(g, "HEAD")
	if err != nil {
		return nil, err
	}
	added, err := addingCommits(g)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, f := range files {
		commit, ok := added[f.path]
		if !ok {
			continue
		}
		out, err := g.git("rev-parse", commit+":./"+f.path)
		if err != nil {
			return nil, fmt.Errorf("recorded history %s as added: %w", f.path, err)
		}
		if strings.TrimSpace(string(out)) != f.blob {
			problems = append(problems, fmt.Sprintf("%s differs from the version %s added, whatever %s says: a recorded history is never changed; restore it with `git checkout %s -- %s` and record the new shape under a new name",
				f.path, short(commit), manifestName, short(commit), g.prefix+f.path))
		}
	}
	slices.Sort(problems)
	return problems, nil
}

// addingCommits maps each file of the repository's directory to the latest commit of HEAD's
// history that added it at its path: a move adds it anew, and a path can have held an older
// shape of the file before it moved away and back.
func addingCommits(g gitRepo) (map[string]string, error) {
	out, err := g.git("log", "--diff-filter=A", "--relative", "--format=%x00%H", "--name-only", "HEAD", "--", ".")
	if err != nil {
		return nil, fmt.Errorf("list the commits that added the recorded histories: %w", err)
	}
	added := map[string]string{}
	for _, block := range strings.Split(string(out), "\x00")[1:] {
		lines := strings.Fields(block)
		if len(lines) == 0 {
			continue
		}
		for _, path := range lines[1:] {
			if _, seen := added[path]; !seen {
				added[path] = lines[0] // newest first: the latest add (a move adds it anew)
			}
		}
	}
	return added, nil
}

// gitRepo runs git in dir, a directory of a work tree; prefix is dir's path from the top of
// the work tree ("workflows/testdata/histories/"), for the messages' commands.
type gitRepo struct{ dir, prefix string }

// git runs git with args in the repository's directory and returns its standard output.
func (g gitRepo) git(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = g.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// revision resolves rev to a commit hash.
func (g gitRepo) revision(rev string) (string, error) {
	out, err := g.git("rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", rev, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// openRepo is the repository whose work tree holds dir; errNoRepository when git is not
// installed, dir is in no work tree, or the repository has no commit yet.
func openRepo(dir string) (gitRepo, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return gitRepo{}, fmt.Errorf("%w: %v", errNoRepository, err)
	}
	g := gitRepo{dir: dir}
	out, err := g.git("rev-parse", "--show-prefix")
	if err != nil {
		return gitRepo{}, fmt.Errorf("%w: %v", errNoRepository, err)
	}
	g.prefix = strings.TrimSpace(string(out))
	if _, err := g.revision("HEAD"); err != nil {
		return gitRepo{}, fmt.Errorf("%w: %v", errNoRepository, err)
	}
	return g, nil
}

// historyBase is the commit to compare the histories with: $HISTORY_BASE (an error when it
// names no commit), else the merge base of HEAD with the first of baseBranches that exists,
// else HEAD (the working tree's uncommitted edits are then what is compared).
func historyBase(g gitRepo, getenv func(string) string) (string, error) {
	if rev := getenv(historyBaseEnv); rev != "" {
		base, err := g.revision(rev)
		if err != nil {
			return "", fmt.Errorf("%s: %w", historyBaseEnv, err)
		}
		return base, nil
	}
	for _, branch := range baseBranches {
		if _, err := g.revision(branch); err != nil {
			continue
		}
		out, err := g.git("merge-base", "HEAD", branch)
		if err != nil {
			return "", fmt.Errorf("merge base of HEAD and %s: %w", branch, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	return g.revision("HEAD")
}

// baseFile is one file of the histories directory at the base: its path relative to the
// directory and its blob's hash.
type baseFile struct{ path, blob string }

// changedSinceBase compares each file of the repository's directory at commit base (the
// MANIFEST aside, which gains lines) with the working tree's, and says which are modified or
// missing, sorted by name; none when they all match.
func changedSinceBase(g gitRepo, base string) ([]string, error) {
	files, err := filesAt(g, base)
	if err != nil {
		return nil, err
	}
	var problems, present []string
	want := map[string]string{}
	for _, f := range files {
		_, err := os.Stat(filepath.Join(g.dir, f.path))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			problems = append(problems, fmt.Sprintf("%s is missing: it was recorded at %s, and a recorded history is never removed; restore it with `git checkout %s -- %s`",
				f.path, short(base), short(base), g.prefix+f.path))
		case err != nil:
			return nil, fmt.Errorf("recorded history %s: %w", f.path, err)
		default:
			present = append(present, f.path)
			want[f.path] = f.blob
		}
	}
	got, err := blobHashes(g, present)
	if err != nil {
		return nil, err
	}
	for i, path := range present {
		if got[i] != want[path] {
			problems = append(problems, fmt.Sprintf("%s is modified since %s, whatever %s says: a recorded history is never changed; restore it with `git checkout %s -- %s` and record the new shape under a new name",
				path, short(base), manifestName, short(base), g.prefix+path))
		}
	}
	slices.Sort(problems)
	return problems, nil
}

// filesAt lists the files of the repository's directory at commit base, recursively, with
// their blobs' hashes; none when the directory did not exist then.
func filesAt(g gitRepo, base string) ([]baseFile, error) {
	out, err := g.git("ls-tree", "-r", "-z", base, "--", ".")
	if err != nil {
		return nil, fmt.Errorf("list the recorded histories at %s: %w", short(base), err)
	}
	var files []baseFile
	for _, entry := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if entry == "" {
			continue
		}
		// "<mode> <type> <hash>\t<path>"
		meta, path, ok := strings.Cut(entry, "\t")
		fields := strings.Fields(meta)
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("list the recorded histories at %s: unexpected git ls-tree entry %q", short(base), entry)
		}
		if fields[1] != "blob" || path == manifestName {
			continue
		}
		files = append(files, baseFile{path: path, blob: fields[2]})
	}
	return files, nil
}

// blobHashes are the git blob hashes of the working tree's files at paths (relative to the
// repository's directory), in order: their bytes as they are, without git's filters, as the
// replay tests read them.
func blobHashes(g gitRepo, paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out, err := g.git(append([]string{"hash-object", "--no-filters", "--"}, paths...)...)
	if err != nil {
		return nil, fmt.Errorf("hash the recorded histories: %w", err)
	}
	hashes := strings.Fields(string(out))
	if len(hashes) != len(paths) {
		return nil, fmt.Errorf("hash the recorded histories: %d hashes for %d files", len(hashes), len(paths))
	}
	return hashes, nil
}

// short is a commit hash as messages show it.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// gitFixture is a git repository in a temporary directory, main its first branch, whose
// testdata/histories directory stands for the recorded histories.
type gitFixture struct {
	t   *testing.T
	top string
	dir string
}

func newGitFixture(t *testing.T, branch string) *gitFixture {
	t.Helper()
	testenv.LookPath(t, "git", "install git")
	f := &gitFixture{t: t, top: t.TempDir()}
	f.dir = filepath.Join(f.top, "testdata", "histories")
	require.NoError(t, os.MkdirAll(f.dir, 0o755))
	f.git("init", "-q", "-b", branch)
	return f
}

// git runs git in the work tree's top, alone with the fixture's configuration: the user's
// (a signing key, hooks) is not read.
func (f *gitFixture) git(args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = f.top
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(f.t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

func (f *gitFixture) write(name, body string) {
	f.t.Helper()
	require.NoError(f.t, os.WriteFile(filepath.Join(f.dir, name), []byte(body), 0o644))
}

// commit commits the whole work tree and returns the commit's hash.
func (f *gitFixture) commit(msg string) string {
	f.t.Helper()
	f.git("add", "-A")
	f.git("commit", "-q", "-m", msg)
	return f.git("rev-parse", "HEAD")
}

// recorded commits a.json and b.json with the MANIFEST that -update-manifest writes for them,
// and returns the commit.
func (f *gitFixture) recorded() string {
	f.t.Helper()
	f.write("a.json", `{"events":[1]}`)
	f.write("b.json", `{"events":[2]}`)
	require.NoError(f.t, os.WriteFile(filepath.Join(f.dir, manifestName), nil, 0o644))
	added, err := checkManifest(f.dir, true)
	require.NoError(f.t, err)
	require.Equal(f.t, []string{"a.json", "b.json"}, added)
	return f.commit("record a and b")
}

// dropManifestLine deletes name's line from the MANIFEST, as one would to have
// -update-manifest take an edited history for a new one.
func (f *gitFixture) dropManifestLine(name string) {
	f.t.Helper()
	path := filepath.Join(f.dir, manifestName)
	b, err := os.ReadFile(path)
	require.NoError(f.t, err)
	var kept []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(line, "  "+name+"\n") {
			kept = append(kept, line)
		}
	}
	require.NoError(f.t, os.WriteFile(path, []byte(strings.Join(kept, "")), 0o644))
}

// problemsSinceAdded compares the fixture's histories at HEAD with the commits that added them.
func (f *gitFixture) problemsSinceAdded() []string {
	f.t.Helper()
	repo, err := openRepo(f.dir)
	require.NoError(f.t, err)
	problems, err := changedSinceAdded(repo)
	require.NoError(f.t, err)
	return problems
}

// problemsSince compares the fixture's histories with the base that historyBase picks under
// the environment env.
func (f *gitFixture) problemsSince(env map[string]string) []string {
	f.t.Helper()
	repo, err := openRepo(f.dir)
	require.NoError(f.t, err)
	require.Equal(f.t, "testdata/histories/", repo.prefix)
	base, err := historyBase(repo, func(k string) string { return env[k] })
	require.NoError(f.t, err)
	problems, err := changedSinceBase(repo, base)
	require.NoError(f.t, err)
	return problems
}

// An edited history whose MANIFEST line was deleted and written again by -update-manifest
// passes the manifest check, and fails the comparison with the base: uncommitted, committed
// on a branch, or committed on main with HISTORY_BASE naming the commit before.
func TestBaseComparisonCatchesAnEditTheManifestTookIn(t *testing.T) {
	editAndUpdateManifest := func(f *gitFixture) {
		f.write("a.json", `{"events":[1,1]}`)
		_, err := checkManifest(f.dir, true)
		require.ErrorContains(t, err, "a.json is modified", "the manifest alone catches the edit")
		f.dropManifestLine("a.json")
		added, err := checkManifest(f.dir, true)
		require.NoError(t, err)
		require.Equal(t, []string{"a.json"}, added, "-update-manifest takes the edited history for a new one")
		_, err = checkManifest(f.dir, false)
		require.NoError(t, err, "the manifest check passes now")
	}
	modified := func(t *testing.T, problems []string, base string) {
		t.Helper()
		require.Len(t, problems, 1, "%q", problems)
		require.Contains(t, problems[0], "a.json is modified since "+short(base))
		require.Contains(t, problems[0], "git checkout "+short(base)+" -- testdata/histories/a.json")
	}

	t.Run("uncommitted", func(t *testing.T) {
		f := newGitFixture(t, "main")
		base := f.recorded()
		require.Empty(t, f.problemsSince(nil), "an untouched tree matches")
		editAndUpdateManifest(f)
		modified(t, f.problemsSince(nil), base)
	})
	t.Run("committed on a branch", func(t *testing.T) {
		f := newGitFixture(t, "main")
		base := f.recorded()
		f.git("checkout", "-q", "-b", "feature")
		editAndUpdateManifest(f)
		f.commit("edit a")
		modified(t, f.problemsSince(nil), base)
	})
	t.Run("committed on main, base given", func(t *testing.T) {
		f := newGitFixture(t, "main")
		base := f.recorded()
		editAndUpdateManifest(f)
		f.commit("edit a")
		require.Empty(t, f.problemsSince(nil), "on main the base is HEAD")
		modified(t, f.problemsSince(map[string]string{historyBaseEnv: base}), base)
		problems := f.problemsSinceAdded()
		require.Len(t, problems, 1, "%q", problems)
		require.Contains(t, problems[0], "a.json differs from the version "+short(base)+" added")
	})
	t.Run("untouched since added", func(t *testing.T) {
		f := newGitFixture(t, "main")
		f.recorded()
		f.write("c.json", `{"events":[3]}`)
		f.commit("record c")
		require.Empty(t, f.problemsSinceAdded())
	})
}

// A history removed with its MANIFEST line is missing against the base; a new history, and the
// MANIFEST's new lines, are no change to it.
func TestBaseComparisonCatchesARemovalAndTakesAnAddition(t *testing.T) {
	f := newGitFixture(t, "main")
	base := f.recorded()
	f.write("c.json", `{"events":[3]}`)
	added, err := checkManifest(f.dir, true)
	require.NoError(t, err)
	require.Equal(t, []string{"c.json"}, added)
	require.Empty(t, f.problemsSince(nil), "an added history and its manifest line")

	require.NoError(t, os.Remove(filepath.Join(f.dir, "b.json")))
	f.dropManifestLine("b.json")
	_, err = checkManifest(f.dir, false)
	require.NoError(t, err, "the manifest no longer lists it")
	problems := f.problemsSince(nil)
	require.Len(t, problems, 1, "%q", problems)
	require.Contains(t, problems[0], "b.json is missing: it was recorded at "+short(base))
}

// The base is HISTORY_BASE when set (an error when it names no commit), else the merge base
// with main, else (no main) HEAD.
func TestHistoryBaseIsTheGivenCommitTheMergeBaseOrHEAD(t *testing.T) {
	f := newGitFixture(t, "main")
	first := f.recorded()
	f.git("checkout", "-q", "-b", "feature")
	f.write("c.json", "{}")
	head := f.commit("add c")
	repo, err := openRepo(f.dir)
	require.NoError(t, err)
	env := func(base string) func(string) string {
		return func(k string) string { return map[string]string{historyBaseEnv: base}[k] }
	}

	got, err := historyBase(repo, env(""))
	require.NoError(t, err)
	require.Equal(t, first, got, "on a branch: the merge base with main")
	got, err = historyBase(repo, env("feature"))
	require.NoError(t, err)
	require.Equal(t, head, got, "HISTORY_BASE names the base")
	_, err = historyBase(repo, env("no-such-commit"))
	require.ErrorContains(t, err, historyBaseEnv+": resolve \"no-such-commit\"")

	f.git("branch", "-q", "-m", "main", "trunk")
	got, err = historyBase(repo, env(""))
	require.NoError(t, err)
	require.Equal(t, head, got, "without main: HEAD")
}

// Outside a work tree, and in a repository without a commit, there is nothing to compare with:
// errNoRepository, which the test turns into a skip (a failure under CI=true).
func TestOpenRepoWithoutACommitToCompareWith(t *testing.T) {
	testenv.LookPath(t, "git", "install git")
	dir := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	_, err := openRepo(dir)
	require.ErrorIs(t, err, errNoRepository, "not a repository")

	f := newGitFixture(t, "main")
	_, err = openRepo(f.dir)
	require.ErrorIs(t, err, errNoRepository, "no commit yet")
}
