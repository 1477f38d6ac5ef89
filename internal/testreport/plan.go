package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// goTestDir is a package directory as go test takes it: ./dir, or . for the root.
func goTestDir(dir string) string {
	if dir == "." {
		return "."
	}
	return "./" + dir
}

// printFuzzTargets writes one line per Fuzz target of the tree that compiles here: its
// package's directory, the -tags flag its file needs (-tags= for none) and its name, for
// `make fuzz`, which runs each with those tags. go test -list '^Fuzz' without tags would miss
// those of files with a build constraint.
func printFuzzTargets(out io.Writer, tr tree) {
	for _, t := range tr.funcs {
		if !strings.HasPrefix(t.name, "Fuzz") || !t.buildable {
			continue
		}
		fmt.Fprintf(out, "%s -tags=%s %s\n", goTestDir(t.dir), strings.Join(t.tags, ","), t.name)
	}
}

// printTaggedPackages writes, for the tier that runs go test with the tags (a comma-separated
// list), each package that has a test file compiled only with some of those tags, a tab, and
// a -skip pattern of the package's tests compiled without tags (empty when it has none): the
// unit tier, `go test ./...`, ran those. So the tier runs everything else of the package,
// whatever its name (Fuzz targets' seed corpora too), and the unit tests once. Each package is
// a go test of its own, as -skip names tests, not packages.
func printTaggedPackages(out io.Writer, tr tree, tags string) error {
	want := strings.Split(tags, ",")
	tagged := map[string]bool{}
	untagged := map[string]bool{} // by file: the unit tier compiles it
	for _, f := range tr.files {
		withTags, err := builtWith(f.path, want)
		if err != nil {
			return err
		}
		without, err := builtWith(f.path, nil)
		if err != nil {
			return err
		}
		if withTags && !without {
			tagged[f.dir] = true
		}
		untagged[f.file] = without
	}
	unit := map[string][]string{}
	for _, t := range tr.funcs {
		if tagged[t.dir] && untagged[t.file] {
			unit[t.dir] = append(unit[t.dir], regexp.QuoteMeta(t.name))
		}
	}
	dirs := make([]string, 0, len(tagged))
	for d := range tagged {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		skip := ""
		if names := unit[d]; len(names) > 0 {
			slices.Sort(names)
			skip = "^(" + strings.Join(names, "|") + ")$"
		}
		fmt.Fprintf(out, "%s\t%s\n", goTestDir(d), skip)
	}
	return nil
}
