package grafana

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/testenv"

	"github.com/retry-scheduler/retry-scheduler/internal/promql"
)

const dashboardFile = "retry-scheduler.json"

// The variable every query goes through, so that the dashboard works on any Prometheus.
var datasourceRef = ref{Type: "prometheus", UID: "${datasource}"}

// dashboard is the part of Grafana's JSON model this repository writes; decoding is strict,
// so a misspelt key fails. Panel details Grafana owns (fieldConfig, options) stay raw.
type dashboard struct {
	Annotations   json.RawMessage `json:"annotations"`
	Description   string          `json:"description"`
	Editable      bool            `json:"editable"`
	GraphTooltip  int             `json:"graphTooltip"`
	Links         []link          `json:"links"`
	Panels        []panel         `json:"panels"`
	Refresh       string          `json:"refresh"`
	SchemaVersion int             `json:"schemaVersion"`
	Tags          []string        `json:"tags"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Time       struct{ From, To string } `json:"time"`
	Timepicker json.RawMessage           `json:"timepicker"`
	Timezone   string                    `json:"timezone"`
	Title      string                    `json:"title"`
	UID        string                    `json:"uid"`
	Version    int                       `json:"version"`
}

type ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type link struct {
	Title       string `json:"title"`
	Type        string `json:"type"`
	Icon        string `json:"icon"`
	Tooltip     string `json:"tooltip"`
	URL         string `json:"url"`
	TargetBlank bool   `json:"targetBlank"`
}

type panel struct {
	ID          int                      `json:"id"`
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	Collapsed   bool                     `json:"collapsed"`
	Datasource  *ref                     `json:"datasource"`
	GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
	FieldConfig json.RawMessage          `json:"fieldConfig"`
	Options     json.RawMessage          `json:"options"`
	Targets     []target                 `json:"targets"`
	Panels      []panel                  `json:"panels"`
}

type target struct {
	Datasource   *ref   `json:"datasource"`
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Range        bool   `json:"range"`
	EditorMode   string `json:"editorMode"`
}

type variable struct {
	Name        string          `json:"name"`
	Label       string          `json:"label"`
	Type        string          `json:"type"`
	Datasource  *ref            `json:"datasource"`
	Definition  string          `json:"definition"`
	Query       json.RawMessage `json:"query"`
	Current     json.RawMessage `json:"current"`
	Hide        int             `json:"hide"`
	IncludeAll  bool            `json:"includeAll"`
	Multi       bool            `json:"multi"`
	Options     json.RawMessage `json:"options"`
	Refresh     int             `json:"refresh"`
	Regex       string          `json:"regex"`
	Sort        int             `json:"sort"`
	AllValue    string          `json:"allValue"`
	SkipURLSync bool            `json:"skipUrlSync"`
}

func load(t *testing.T) ([]byte, dashboard) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&d), "%s does not decode strictly", dashboardFile)
	return b, d
}

// all returns the panels with the rows' nested panels, in order.
func all(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, all(p.Panels)...)
	}
	return out
}

func TestDashboardModel(t *testing.T) {
	_, d := load(t)
	assert.Equal(t, "retry-scheduler", d.UID, "a fixed uid keeps links and provisioning stable")
	assert.NotEmpty(t, d.Title)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36, "datasource references as objects need schema 36 or later")

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		require.NotContains(t, vars, v.Name, "variable %s twice", v.Name)
		vars[v.Name] = v
	}
	if ds, ok := vars["datasource"]; assert.True(t, ok, "no datasource variable") {
		assert.Equal(t, "datasource", ds.Type)
		assert.Equal(t, "prometheus", string(bytes.Trim(ds.Query, `"`)), "the datasource variable lists Prometheus data sources")
	}
	for _, name := range []string{"job", "namespace", "queue"} {
		v, ok := vars[name]
		if !assert.True(t, ok, "no %s variable", name) {
			continue
		}
		assert.Equal(t, "query", v.Type, name)
		assert.Equal(t, &datasourceRef, v.Datasource, "variable %s queries the chosen data source", name)
		assert.True(t, v.Multi && v.IncludeAll, "variable %s: multi-value with All", name)
		assert.Empty(t, v.AllValue, "variable %s: All is the values found, not .*, which would take in other services' series", name)
	}

	ids := map[int]string{}
	for _, p := range all(d.Panels) {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d is used by %q and %q", p.ID, other, p.Title)
		}
		ids[p.ID] = p.Title
		assert.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
		assert.True(t, p.GridPos.W > 0 && p.GridPos.H > 0 && p.GridPos.X >= 0 && p.GridPos.X+p.GridPos.W <= 24,
			"panel %d (%s): gridPos %+v outside the 24-column grid", p.ID, p.Title, p.GridPos)
		if p.Type == "row" {
			assert.Empty(t, p.Targets, "row %q has queries", p.Title)
			continue
		}
		assert.Equal(t, &datasourceRef, p.Datasource, "panel %d (%s): datasource", p.ID, p.Title)
		assert.NotEmpty(t, p.Description, "panel %d (%s): say what it shows", p.ID, p.Title)
		require.NotEmpty(t, p.Targets, "panel %d (%s) has no query", p.ID, p.Title)
		refIDs := map[string]bool{}
		for _, tg := range p.Targets {
			where := p.Title + " " + tg.RefID
			assert.False(t, refIDs[tg.RefID], "%s: refId twice", where)
			refIDs[tg.RefID] = true
			if tg.Datasource != nil {
				assert.Equal(t, datasourceRef, *tg.Datasource, "%s: datasource", where)
			}
			checkExpr(t, where, tg.Expr)
		}
	}
}

// checkExpr: the expression reads, names metrics, and every selector is filtered by the job
// variable (the Temporal SDK's also by the namespace variable).
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	names, err := promql.MetricNames(expr)
	if !assert.NoError(t, err, where) {
		return
	}
	assert.NotEmpty(t, names, "%s: %q names no metric", where, expr)
	for _, n := range names {
		sel := regexp.MustCompile(`(^|[^a-zA-Z0-9_:])` + regexp.QuoteMeta(n) + `\b\s*(\{[^}]*\})?`)
		for _, m := range sel.FindAllStringSubmatch(expr, -1) {
			assert.Contains(t, m[2], `job=~"$job"`, "%s: selector %q is not filtered by job", where, strings.TrimSpace(m[0]))
			if strings.HasPrefix(n, "temporal_") {
				assert.Contains(t, m[2], `namespace=~"$namespace"`, "%s: selector %q is not filtered by namespace", where, strings.TrimSpace(m[0]))
			}
		}
	}
	if strings.Contains(expr, "histogram_quantile(") {
		assert.Regexp(t, `_bucket\{`, expr, "%s: histogram_quantile over a histogram's buckets", where)
		assert.Regexp(t, `by \([^)]*\ble\)`, expr, "%s: histogram_quantile keeps le", where)
	}
	assert.NotContains(t, expr, "[5m]", "%s: use $__rate_interval, which follows the scrape interval", where)
}

// The dashboard covers what an operator watches, and queries only documented series.
func TestDashboardQueriesDocumentedSeries(t *testing.T) {
	b, _ := load(t)
	names, err := QueriedMetrics(b)
	require.NoError(t, err)
	for _, want := range []string{
		"retry_due", "retry_queue_depth", "retries_scheduled_total", "retries_executed_total", "retries_exhausted_total",
		"retry_lateness_seconds_bucket",
		"dead_letter_depth", "dead_letter_oldest_age_seconds", "dead_letters_total",
		"bridge_deliveries_total", "bridge_consuming",
		"breaker_state", "retries_held",
		"temporal_workflow_task_schedule_to_start_latency_seconds_bucket",
		"temporal_workflow_task_execution_latency_seconds_bucket",
		"temporal_workflow_task_execution_failed_total",
		"retry_scheduler_build_info", // the job variable
	} {
		assert.Contains(t, names, want)
	}

	documented := documentedSeries(t)
	for _, n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && documented[b] {
				base = b
			}
		}
		if !documented[base] && !strings.HasPrefix(n, "temporal_") { // the README's temporal_* row
			t.Errorf("%s is queried but not listed in internal/metrics/README.md", n)
		}
	}
}

// documentedSeries are the names in the first column of internal/metrics/README.md's series table.
func documentedSeries(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../internal/metrics/README.md")
	require.NoError(t, err)
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_:]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		names[m[1]] = true
	}
	require.NotEmpty(t, names, "no series table in internal/metrics/README.md")
	return names
}

// Temporal's own SDK dashboard is one click away: the one for the Go SDK's tally metrics,
// whose names (_total, _seconds) are the ones this service exports.
func TestDashboardLinksTemporalSDKDashboard(t *testing.T) {
	_, d := load(t)
	var urls []string
	for _, l := range d.Links {
		urls = append(urls, l.URL)
	}
	assert.Contains(t, urls, "https://github.com/temporalio/dashboards/blob/HEAD/sdk/temporal-go-java-sdks-tally.json")
}

// With promtool: every query is PromQL Prometheus parses, once Grafana's variables are
// replaced by values (each becomes a recording rule of a file promtool checks).
func TestDashboardExprsParseWithPromtool(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make promtool, or apt-get install prometheus")
	_, d := load(t)
	grafanaVars := strings.NewReplacer("$__rate_interval", "1m", "$job", ".*", "$namespace", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range all(d.Panels) {
		for _, tg := range p.Targets {
			expr, err := json.Marshal(grafanaVars.Replace(tg.Expr)) // a JSON string is a YAML string
			require.NoError(t, err)
			fmt.Fprintf(&rules, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, tg.RefID, expr)
			n++
		}
	}
	require.Positive(t, n)
	file := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	require.NoError(t, os.WriteFile(file, []byte(rules.String()), 0o600))
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	assert.NoError(t, err, "promtool check rules on the dashboard's queries:\n%s", out)
	assert.Contains(t, string(out), fmt.Sprintf("SUCCESS: %d rules found", n))
}

func TestQueriedMetricsReadsVariablesAndNestedPanels(t *testing.T) {
	got, err := QueriedMetrics([]byte(`{
		"panels": [
			{"id": 1, "type": "row", "panels": [{"id": 2, "targets": [{"refId": "A", "expr": "rate(b_total[1m])"}]}]},
			{"id": 3, "targets": [{"refId": "A", "expr": "a"}, {"refId": "B", "expr": "rate(b_total[1m])"}]}
		],
		"templating": {"list": [
			{"name": "ds", "type": "datasource", "query": "prometheus"},
			{"name": "job", "type": "query", "query": "label_values(c_info{x=\"y\"}, job)"},
			{"name": "ns", "type": "query", "query": {"query": "query_result(max by (namespace) (d))"}},
			{"name": "any", "type": "query", "query": "label_values(job)"}
		]}
	}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b_total", "c_info", "d"}, got)

	_, err = QueriedMetrics([]byte(`{"templating": {"list": [{"name": "v", "type": "query", "query": "metrics(a_.*)"}]}}`))
	assert.ErrorContains(t, err, "variable v")
	_, err = QueriedMetrics([]byte(`{"panels": [{"id": 1, "title": "T", "targets": [{"refId": "A", "expr": "sum(a"}]}]}`))
	assert.ErrorContains(t, err, "panel 1 (T) target A")
}

// The per-queue panels follow the queue variable; the stat panels show what an operator checks
// first; the dead-letter publish failures a critical alert watches have their panel.
func TestDashboardQueueFilterAndStats(t *testing.T) {
	_, d := load(t)
	perQueue := []string{"retries_scheduled_total", "retries_executed_total", "retries_exhausted_total", "breaker_state", "retries_held"}
	stats := map[string]bool{}
	publishFailures := false
	for _, p := range all(d.Panels) {
		for _, tg := range p.Targets {
			for _, m := range perQueue {
				for _, sel := range regexp.MustCompile(regexp.QuoteMeta(m)+`\{[^}]*\}`).FindAllString(tg.Expr, -1) {
					assert.Contains(t, sel, `queue=~"$queue"`, "%s %s: %s is per queue but not filtered by the queue variable", p.Title, tg.RefID, m)
				}
			}
			if p.Type == "stat" {
				names, err := promql.MetricNames(tg.Expr)
				require.NoError(t, err)
				for _, n := range names {
					stats[n] = true
				}
			}
			if strings.Contains(tg.Expr, "dead_letter_publish_failures_total") && p.Type == "timeseries" {
				publishFailures = true
			}
		}
	}
	for _, n := range []string{"dead_letter_depth", "dead_letter_oldest_age_seconds", "retry_due", "bridge_consuming"} {
		assert.True(t, stats[n], "no stat panel of %s", n)
	}
	assert.True(t, publishFailures, "no panel of dead_letter_publish_failures_total")
}
