package main

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// testFunc is a Test or Fuzz function of a *_test.go file of the tree.
type testFunc struct {
	pkg  string // import path, as go test -json names it (an external _test package too)
	dir  string // the package's directory, relative to the module root, with slashes ("." for the root)
	name string
	file string // relative to the module root, with slashes
	// tags is the smallest set of build tags with which the file is compiled on this
	// machine's GOOS/GOARCH (none for a file without constraints); buildable is false when no
	// set of the tags its //go:build line names compiles it here (another GOOS, say).
	tags      []string
	buildable bool
}

// key names the test as go test -json does: package and name.
func (t testFunc) key() string { return t.pkg + " " + t.name }

// tree is what scanTree found: every test file and every test function.
type tree struct {
	files []testFile
	funcs []testFunc
}

// testFile is a *_test.go file of the tree.
type testFile struct {
	pkg, dir, file string
	path           string // as the scan found it, for builtWith
	tags           []string
	buildable      bool
}

// scanTree finds every *_test.go file of the module at root and their Test and Fuzz
// functions, whatever their build constraints, as `go test ./...` would see them with the
// right tags: directories named testdata or vendor, or starting with "." or "_", are skipped
// as the go tool skips them, and so are nested modules (a directory with its own go.mod) and
// node_modules (npm's, not this module's). A test function is what go test runs: TestXxx(t
// *testing.T) or FuzzXxx(f *testing.F), Xxx not starting with a lower-case letter.
func scanTree(root string) (tree, error) {
	var t tree
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return t, err
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		file, funcs, err := scanFile(path, filepath.ToSlash(rel), module)
		if err != nil {
			return err
		}
		t.files = append(t.files, file)
		t.funcs = append(t.funcs, funcs...)
		return nil
	})
	if err != nil {
		return t, err
	}
	slices.SortFunc(t.funcs, func(a, b testFunc) int { return strings.Compare(a.key(), b.key()) })
	return t, nil
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+"?([^\s"]+)"?\s*$`)

// modulePath is the module path of a go.mod file.
func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	m := moduleLine.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s: no module line", gomod)
	}
	return string(m[1]), nil
}

// scanFile returns a test file and its test functions; rel is its path from the module root.
func scanFile(path, rel, module string) (testFile, []testFunc, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return testFile{}, nil, err
	}
	tags, buildable, err := fileTags(path, f)
	if err != nil {
		return testFile{}, nil, err
	}
	dir := pathDir(rel)
	pkg := module
	if dir != "." {
		pkg = module + "/" + dir
	}
	file := testFile{pkg: pkg, dir: dir, file: rel, path: path, tags: tags, buildable: buildable}
	var out []testFunc
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil {
			continue
		}
		name := fn.Name.Name
		if (isTest(name, "Test") && takes(fn, "T")) || (isTest(name, "Fuzz") && takes(fn, "F")) {
			out = append(out, testFunc{pkg: pkg, dir: dir, name: name, file: rel, tags: tags, buildable: buildable})
		}
	}
	return file, out, nil
}

// pathDir is the directory of a slash-separated relative path, "." at the root.
func pathDir(rel string) string {
	if i := strings.LastIndex(rel, "/"); i >= 0 {
		return rel[:i]
	}
	return "."
}

// isTest is cmd/go's rule: name is prefix, or prefix followed by anything but a lower-case
// letter (TestMain is a test when it takes a *testing.T; Testify is none).
func isTest(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	if len(name) == len(prefix) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(name[len(prefix):])
	return !unicode.IsLower(r)
}

// takes reports whether fn's one parameter is a *testing.<typ> (testing imported under any
// name, or dot-imported), and fn returns nothing.
func takes(fn *ast.FuncDecl, typ string) bool {
	p := fn.Type.Params
	if p == nil || len(p.List) != 1 || len(p.List[0].Names) > 1 || fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
		return false
	}
	star, ok := p.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	switch x := star.X.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == typ
	case *ast.Ident:
		return x.Name == typ
	}
	return false
}

// notTags are the names a //go:build line may use that are not build tags one passes with
// -tags: the GOOS and GOARCH values, and the tool's own. go/build answers for them.
var notTags = map[string]bool{"cgo": true, "gc": true, "gccgo": true, "unix": true}

func init() {
	for _, s := range strings.Fields(`aix android darwin dragonfly freebsd hurd illumos ios js
		linux nacl netbsd openbsd plan9 solaris wasip1 windows zos
		386 amd64 amd64p32 arm armbe arm64 arm64be loong64 mips mipsle mips64 mips64le
		mips64p32 mips64p32le ppc ppc64 ppc64le riscv riscv64 s390 s390x sparc sparc64 wasm`) {
		notTags[s] = true
	}
}

// maxTags bounds the tags of one //go:build line that fileTags tries in combination.
const maxTags = 8

// fileTags is the smallest set of the tags the file's //go:build line names with which
// go/build compiles the file on this GOOS/GOARCH (nil when it needs none), or buildable
// false when none does. The name's _GOOS/_GOARCH suffix counts too.
func fileTags(path string, f *ast.File) (tags []string, buildable bool, err error) {
	var names []string
	for _, group := range f.Comments {
		if group.Pos() >= f.Package {
			break
		}
		for _, c := range group.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return nil, false, fmt.Errorf("%s: %w", path, err)
			}
			names = append(names, exprTags(expr)...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > maxTags {
		return nil, false, fmt.Errorf("%s: more than %d build tags in its //go:build line", path, maxTags)
	}
	// Every subset of names, smallest first (then in order of the names).
	subsets := make([][]string, 0, 1<<len(names))
	for mask := 0; mask < 1<<len(names); mask++ {
		var s []string
		for i, n := range names {
			if mask&(1<<i) != 0 {
				s = append(s, n)
			}
		}
		subsets = append(subsets, s)
	}
	slices.SortStableFunc(subsets, func(a, b []string) int { return len(a) - len(b) })
	for _, s := range subsets {
		ok, err := builtWith(path, s)
		if err != nil {
			return nil, false, err
		}
		if ok {
			return s, true, nil
		}
	}
	return nil, false, nil
}

// builtWith reports whether go build -tags (the tags, comma-separated) compiles the file on
// this GOOS/GOARCH: its //go:build line and its name's _GOOS/_GOARCH suffix.
func builtWith(path string, tags []string) (bool, error) {
	ctx := build.Default
	ctx.BuildTags = tags
	dir, base := filepath.Split(path)
	return ctx.MatchFile(dir, base)
}

// exprTags are the build tags (not GOOS, GOARCH, go1.N...) an expression names.
func exprTags(x constraint.Expr) []string {
	switch x := x.(type) {
	case *constraint.TagExpr:
		if notTags[x.Tag] || strings.HasPrefix(x.Tag, "go1.") || strings.HasPrefix(x.Tag, "goexperiment.") {
			return nil
		}
		return []string{x.Tag}
	case *constraint.NotExpr:
		return exprTags(x.X)
	case *constraint.AndExpr:
		return append(exprTags(x.X), exprTags(x.Y)...)
	case *constraint.OrExpr:
		return append(exprTags(x.X), exprTags(x.Y)...)
	}
	return nil
}
