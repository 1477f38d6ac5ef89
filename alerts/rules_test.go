// Package alerts holds the Prometheus rules for retry-scheduler (retry-scheduler.rules.yml)
// and their promtool unit tests; this test checks them without and, when promtool is on the
// PATH (Debian's prometheus package has it), with promtool.
package alerts

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/retry-scheduler/retry-scheduler/internal/promql"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

const (
	rulesFile = "retry-scheduler.rules.yml"
	// runbooks is the document every alert's runbook_url points into, at runbookBase.
	runbooks    = "../docs/runbooks.md"
	runbookBase = "https://github.com/retry-scheduler/retry-scheduler/blob/main/docs/runbooks.md#"
)

// thresholdPrefix names the recorded constants the tunable alerts compare against.
const thresholdPrefix = "retry_scheduler:threshold:"

var thresholdValue = regexp.MustCompile(`^vector\([0-9]+(\.[0-9]+)?\)$`)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exported are the series the service exports that the rules may use (internal/metrics/README.md).
var exported = map[string]bool{
	"dead_letters_total": true, "bridge_deliveries_total": true, "retry_lateness_seconds_bucket": true,
	"dead_letter_oldest_age_seconds": true, "dead_letter_depth": true, "depth_poll_last_success_timestamp_seconds": true,
	"retry_queue_depth": true, "retry_due": true, "retries_exhausted_total": true, "retries_scheduled_total": true,
	"retries_executed_total": true, "depth_poll_errors_total": true, "dead_letter_publish_failures_total": true,
	"breaker_state": true, "retries_held": true, "breaker_transitions_total": true, "bridge_consuming": true,
	"bridge_intake_limited": true, "bridge_engine_lag_errors_total": true,
	"metrics_queue_label_overflow_total": true, "reports_set_aside_total": true,
}

// sdkSeries are the Temporal SDK's series the process exports through tally (internal/metrics/README.md,
// temporal_*), with the SDK's names and labels.
var sdkSeries = map[string]bool{
	"temporal_worker_start_total":                                     true,
	"temporal_workflow_task_execution_failed_total":                   true,
	"temporal_workflow_task_schedule_to_start_latency_seconds_bucket": true,
}

// external are series the process does not export: Prometheus's own, and RabbitMQ's
// Prometheus plugin's (per-object metrics).
var external = map[string]bool{
	"up": true, "rabbitmq_queue_messages_ready": true,
}

func TestRulesFile(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}

	anchors := runbookAnchors(t)
	records := map[string]bool{}
	alerts := map[string]string{} // name -> expr
	fors := map[string]string{}   // name -> for
	severities := map[string]string{}
	thresholds := map[string]string{} // recorded threshold -> its constant
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if (r.Record == "") == (r.Alert == "") {
				t.Errorf("group %s: a rule must have exactly one of record and alert: %+v", g.Name, r)
			}
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s%s: empty expr", r.Record, r.Alert)
			}
			// Every series the expression names is one the service exports (its own or the
			// SDK's), a recording rule above, or listed as external.
			names, err := promql.MetricNames(r.Expr)
			if err != nil {
				t.Errorf("%s%s: %v", r.Record, r.Alert, err)
			}
			for _, m := range names {
				if !exported[m] && !sdkSeries[m] && !external[m] && !records[m] {
					t.Errorf("%s%s: %s is neither exported, nor recorded above, nor listed as external", r.Record, r.Alert, m)
				}
			}
			if r.Record != "" {
				records[r.Record] = true
				if strings.HasPrefix(r.Record, thresholdPrefix) {
					if !thresholdValue.MatchString(strings.TrimSpace(r.Expr)) {
						t.Errorf("%s: expr %q, want a constant vector(N)", r.Record, r.Expr)
					}
					thresholds[r.Record] = strings.TrimSpace(r.Expr)
				}
				continue
			}
			severities[r.Alert] = r.Labels["severity"]
			alerts[r.Alert] = r.Expr
			fors[r.Alert] = r.For
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description", r.Alert)
			}
			checkRunbook(t, r.Alert, r.Annotations["runbook_url"], anchors)
		}
	}

	// The product's alert thresholds, and the lateness SLO.
	for name, want := range map[string]string{
		"RetrySchedulerDeadLetterInflowHigh": "> 10",
		"RetrySchedulerDeadLetterStale":      "> 48 * 3600",
		"RetrySchedulerDeadLetterDepthHigh":  "> 1000",
		"RetrySchedulerRetryLatenessHigh":    "> 5",
		// Any failure, sustained: an envelope the broker refuses is not on its queue.
		"RetrySchedulerDeadLetterPublishFailing": "> 0",
	} {
		expr, ok := alerts[name]
		if !ok {
			t.Errorf("alert %s missing", name)
			continue
		}
		if !strings.HasSuffix(strings.TrimSpace(expr), want) {
			t.Errorf("%s: expr %q does not end with %q", name, expr, want)
		}
	}
	// The service's availability and the worker fleet's health.
	for name, want := range map[string]struct{ contains, for_ string }{
		// A target that does not answer, or no workflow worker scraped at all.
		"RetrySchedulerDown": {`up{job=~".*retry-scheduler.*"} == 0`, "2m"},
		// The SDK's failure_reason for a replay that does not match the history.
		"RetrySchedulerNonDeterminism": {`failure_reason="NonDeterminismError"`, "0s"},
		// Workflow tasks wait more than a second for a worker.
		"RetrySchedulerWorkflowTaskBacklog": {"temporal_workflow_task_schedule_to_start_latency_seconds_bucket", "5m"},
		// Works without the broker's metrics.
		"RetrySchedulerBridgeNotConsuming": {"max(bridge_consuming) == 0", "5m"},
	} {
		expr, ok := alerts[name]
		if !ok {
			t.Errorf("alert %s missing", name)
			continue
		}
		if !strings.Contains(expr, want.contains) || fors[name] != want.for_ {
			t.Errorf("%s: expr %q for %q, want it to contain %q, for %s", name, expr, fors[name], want.contains, want.for_)
		}
	}
	if !strings.Contains(alerts["RetrySchedulerDown"], `absent(temporal_worker_start_total{job=~".*retry-scheduler.*", worker_type="WorkflowWorker"})`) {
		t.Errorf("RetrySchedulerDown: no absent() of the workflow workers")
	}
	if !strings.HasSuffix(strings.TrimSpace(alerts["RetrySchedulerWorkflowTaskBacklog"]), "> 1") {
		t.Errorf("RetrySchedulerWorkflowTaskBacklog: threshold is not 1s")
	}

	// A breaker that holds a destination's retries (open or half-open; paused is an
	// operator's choice) for longer than 15 minutes: its destination is down, which pages.
	if expr := alerts["RetrySchedulerBreakerOpen"]; !strings.Contains(expr, `breaker_state{state=~"open|half-open"}`) || fors["RetrySchedulerBreakerOpen"] != "15m" {
		t.Errorf("RetrySchedulerBreakerOpen: expr %q for %q, want open or half-open for 15m", expr, fors["RetrySchedulerBreakerOpen"])
	}
	if s := severities["RetrySchedulerBreakerOpen"]; s != "critical" {
		t.Errorf("RetrySchedulerBreakerOpen: severity %q, want critical", s)
	}

	// The tunable thresholds: each recorded once as a constant, with its default, and
	// compared against by its alert.
	for name, want := range map[string]struct{ threshold, value string }{
		"RetrySchedulerDeadLettersWaiting": {"retry_scheduler:threshold:dead_letters_waiting", "vector(50)"},
		"RetrySchedulerRetryRateHigh":      {"retry_scheduler:threshold:retries_per_second", "vector(5)"},
		"RetrySchedulerIngressBacklog":     {"retry_scheduler:threshold:ingress_backlog_messages", "vector(1000)"},
	} {
		if got := thresholds[want.threshold]; got != want.value {
			t.Errorf("threshold %s = %q, want %q", want.threshold, got, want.value)
		}
		if expr, ok := alerts[name]; !ok || !strings.HasSuffix(strings.TrimSpace(expr), " "+want.threshold) {
			t.Errorf("%s: expr %q does not compare against %s", name, expr, want.threshold)
		}
	}
	for name := range thresholds {
		used := false
		for _, expr := range alerts {
			used = used || strings.Contains(expr, name)
		}
		if !used {
			t.Errorf("threshold %s is no alert's", name)
		}
	}
}

// checkRunbook: an alert's runbook_url is runbookBase followed by the anchor of its own
// section of docs/runbooks.md (its name in lower case), which exists.
func checkRunbook(t *testing.T, alert, url string, anchors map[string]bool) {
	t.Helper()
	anchor, ok := strings.CutPrefix(url, runbookBase)
	switch {
	case url == "":
		t.Errorf("%s: no runbook_url annotation", alert)
	case !ok:
		t.Errorf("%s: runbook_url %q does not start with %s", alert, url, runbookBase)
	case anchor != strings.ToLower(alert):
		t.Errorf("%s: runbook_url anchor %q, want its own section %q", alert, anchor, strings.ToLower(alert))
	case !anchors[anchor]:
		t.Errorf("%s: runbook_url anchor %q is not a heading of %s", alert, anchor, runbooks)
	}
}

// runbookAnchors are the anchors GitHub gives the headings of docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		anchors[headingAnchor(strings.TrimLeft(line, "#"))] = true
	}
	return anchors
}

// headingAnchor is GitHub's anchor of a Markdown heading: lower case, punctuation dropped,
// spaces as hyphens.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every alert has a runbook section, and every section of the runbooks is an alert's.
func TestRunbooksCoverTheAlerts(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[strings.ToLower(r.Alert)] = true
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}
	doc, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok && !alerts[headingAnchor(h)] {
			t.Errorf("%s: section %q is no alert's", runbooks, h)
		}
	}
	if got := headingAnchor(" RetrySchedulerDown "); got != "retryschedulerdown" {
		t.Errorf("headingAnchor = %q", got)
	}
	if got := headingAnchor("Dead letters: what to do (2)"); got != "dead-letters-what-to-do-2" {
		t.Errorf("headingAnchor = %q", got)
	}
}

// With promtool: the file is valid PromQL and the rules' unit tests pass.
func TestRulesWithPromtool(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make tools, or apt-get install prometheus")
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", "retry-scheduler.rules.test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
