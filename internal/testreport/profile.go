package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// totalCoverage is the share of statements covered in a coverage profile (go test
// -coverprofile), every package of the run together. A block listed more than once
// counts once, covered when any listing covered it.
func totalCoverage(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("coverage profile: %w", err)
	}
	defer f.Close()
	type block struct {
		stmts   int
		covered bool
	}
	blocks := map[string]block{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 && strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		// name.go:line.col,line.col numStmts count
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return 0, fmt.Errorf("coverage profile %s:%d: %q", path, n, line)
		}
		stmts, err1 := strconv.Atoi(fields[1])
		count, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("coverage profile %s:%d: %q", path, n, line)
		}
		b := blocks[fields[0]]
		b.stmts = stmts
		b.covered = b.covered || count > 0
		blocks[fields[0]] = b
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("coverage profile: %w", err)
	}
	var all, covered int
	for _, b := range blocks {
		all += b.stmts
		if b.covered {
			covered += b.stmts
		}
	}
	if all == 0 {
		return 0, fmt.Errorf("coverage profile %s: no statements", path)
	}
	return 100 * float64(covered) / float64(all), nil
}
