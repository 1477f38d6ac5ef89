// Package promql reads the metric names out of PromQL expressions, without a PromQL parser: the
// dashboard's and the alert rules' tests check each name against what the service exports.
package promql

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var (
	// Removed before names are looked for, in this order: string literals (label values,
	// regexps), label matchers, range and subquery brackets, the label lists of by, without,
	// on, ignoring, group_left and group_right, and Grafana's variables.
	stringLiteral  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	labelMatchers  = regexp.MustCompile(`\{[^{}]*\}`)
	rangeBrackets  = regexp.MustCompile(`\[[^\[\]]*\]`)
	labelList      = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	grafanaVar     = regexp.MustCompile(`\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*|\[\[[^\]]*\]\]`)
	identifier     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true,
	}
)

// MetricNames returns the metric names a PromQL expression selects, in order of appearance
// and without duplicates: identifiers that are not functions or aggregations (followed by
// "("), keywords, numbers or durations, label names or values. It refuses what it cannot
// read: a selector by __name__, and unbalanced brackets.
func MetricNames(expr string) ([]string, error) {
	if strings.Contains(expr, "__name__") {
		return nil, fmt.Errorf("expr %q: a selector by __name__ is not supported here; name the metric", expr)
	}
	if err := balanced(expr); err != nil {
		return nil, fmt.Errorf("expr %q: %w", expr, err)
	}
	s := stringLiteral.ReplaceAllString(expr, " ")
	s = labelMatchers.ReplaceAllString(s, " ")
	s = rangeBrackets.ReplaceAllString(s, " ")
	s = labelList.ReplaceAllString(s, " ")
	s = grafanaVar.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(s[loc[0]-1])) {
			continue // the unit of a duration (5m) or the exponent of a number (1e3)
		}
		if next := strings.TrimLeft(s[loc[1]:], " \t\r\n"); strings.HasPrefix(next, "(") {
			continue // a function or an aggregation
		}
		if promqlKeywords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// balanced checks that (), {} and [] nest properly outside string literals.
func balanced(expr string) error {
	s := stringLiteral.ReplaceAllString(expr, `""`)
	var open []rune
	pairs := map[rune]rune{')': '(', '}': '{', ']': '['}
	for _, r := range s {
		switch r {
		case '(', '{', '[':
			open = append(open, r)
		case ')', '}', ']':
			if len(open) == 0 || open[len(open)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			open = open[:len(open)-1]
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("unclosed %q", open[len(open)-1])
	}
	return nil
}
