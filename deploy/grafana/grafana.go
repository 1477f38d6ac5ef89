// Package grafana holds the retry-scheduler Grafana dashboard (retry-scheduler.json) and reads
// the metric names its queries select, for its own test and the e2e test that finds each on a
// running service's /metrics.
package grafana

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/retry-scheduler/retry-scheduler/internal/promql"
)

// QueriedMetrics returns the metric names the dashboard's queries select, sorted and without
// duplicates: every panel target's expr (rows' nested panels included) and every query
// variable's query (label_values(<selector>, <label>) and query_result(<expr>)).
func QueriedMetrics(dashboardJSON []byte) ([]string, error) {
	var d struct {
		Panels     []panelQueries `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("decode dashboard: %w", err)
	}
	seen := map[string]bool{}
	add := func(where, expr string) error {
		names, err := promql.MetricNames(expr)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		for _, n := range names {
			seen[n] = true
		}
		return nil
	}
	var walk func(ps []panelQueries) error
	walk = func(ps []panelQueries) error {
		for _, p := range ps {
			for _, t := range p.Targets {
				if err := add(fmt.Sprintf("panel %d (%s) target %s", p.ID, p.Title, t.RefID), t.Expr); err != nil {
					return err
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		expr, err := variableExpr(q)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if err := add("variable "+v.Name, expr); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// panelQueries is what QueriedMetrics reads of a panel.
type panelQueries struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panelQueries `json:"panels"`
}

// variableQuery is a query variable's query: a string, or (Grafana 9 and later) an object
// whose query field is that string.
func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object with a query: %w", err)
	}
	return o.Query, nil
}

var (
	labelValuesCall = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	labelOnlyCall   = regexp.MustCompile(`^\s*label_values\(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	queryResultCall = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

// variableExpr is the PromQL inside a Prometheus query variable's query.
func variableExpr(q string) (string, error) {
	switch {
	case labelOnlyCall.MatchString(q):
		return "", nil // every series: no metric named
	case labelValuesCall.MatchString(q):
		return labelValuesCall.FindStringSubmatch(q)[1], nil
	case queryResultCall.MatchString(q):
		return queryResultCall.FindStringSubmatch(q)[1], nil
	}
	return "", fmt.Errorf("query %q: want label_values(...) or query_result(...)", q)
}
