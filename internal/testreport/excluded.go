package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// testName is a line of `go test -list` that names a test (not the package's result line).
var testName = regexp.MustCompile(`^(Test|Example|Fuzz|Benchmark)\S*$`)

// readExcluded reads the output of `go test -list PATTERN PKGS` for the tests a run leaves
// out with `-skip PATTERN`: go test reports nothing about those, so without the list they
// would be missing from the skip report. Each is listed with reason. go test prints a
// package's test names, then its "ok  <package>" line.
func readExcluded(path, reason string) ([]skip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("excluded tests: %w", err)
	}
	defer f.Close()
	list, err := parseList(f, reason)
	if err != nil {
		return nil, fmt.Errorf("excluded tests %s: %w", path, err)
	}
	return list, nil
}

func parseList(r io.Reader, reason string) ([]skip, error) {
	var out, pending []skip
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		switch {
		case line == "":
		case testName.MatchString(line):
			pending = append(pending, skip{test: line, reason: reason, excluded: true})
		case fields[0] == "ok" && len(fields) > 1:
			for _, s := range pending {
				s.pkg = fields[1]
				out = append(out, s)
			}
			pending = nil
		case fields[0] == "?":
			// A package without test files.
		default:
			return nil, fmt.Errorf("not a go test -list line: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("tests without their package's ok line: %d", len(pending))
	}
	return out, nil
}
