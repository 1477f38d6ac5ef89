//go:build integration

package e2e

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"gopkg.in/yaml.v3"

	"github.com/retry-scheduler/retry-scheduler/deploy/grafana"
	"github.com/retry-scheduler/retry-scheduler/internal/promql"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Series the Grafana dashboard or the alert rules name that a short healthy run cannot
// show, each with the reason. The test fails if one of them shows up after all, so that
// the list stays true.
var notInAShortRun = map[string]string{
	// A CounterVec without children exports nothing: its first series appears with the
	// first dead-letter publish the broker does not confirm.
	"dead_letter_publish_failures_total": "only after a failed dead-letter publish",
}

// Series that come from elsewhere than the process: the alert rules' test lists them as
// external too.
var externalSeries = map[string]string{
	"up":                            "Prometheus's own, one per scrape target",
	"rabbitmq_queue_messages_ready": "RabbitMQ's Prometheus plugin (per-object metrics)",
}

// The dashboard (deploy/grafana) and the alert rules (alerts/) query series by name; after
// one message delivered after a retry, one exhausted, and one workflow task that fails, every
// name they use is on /metrics, with the labels their queries filter and group by.
func TestDashboardAndAlertSeriesAreOnMetrics(t *testing.T) {
	s := newStack(t)
	s.cfg.MetricsInterval = 200 * time.Millisecond
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil) // e2e-fast: a retry 300 ms after each failure
	metricsURL := "http://" + s.cfg.HTTPAddr + "/metrics"

	s.failExAgain(orders, 1)
	dead := s.consume(s.dlq, nil)

	s.publishRetry(message.RetryMessage{MessageID: "ok-1", OriginalPayload: []byte("o"), OriginalQueue: orders, ErrorReason: "503"})
	s.publishRetry(message.RetryMessage{MessageID: "ex-1", OriginalPayload: []byte("e"), OriginalQueue: orders,
		ErrorReason: "503 #1", HTTPStatus: 503, MaxRetries: 1})

	// A workflow type no worker registered: its workflow task fails (failure_reason
	// WorkflowError), which brings the failure counter the non-determinism alert reads.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	unknownID := s.prefix + "-unknown-type"
	_, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: unknownID, TaskQueue: s.cfg.TaskQueue, WorkflowRunTimeout: 5 * time.Minute}, "NoSuchWorkflow")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_ = s.tc.TerminateWorkflow(ctx, unknownID, "", "test over")
	})

	require.Equal(t, "exhausted", envelopeOf(t, dead.next(t, patience)).DeadReason)
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(message.WorkflowID(orders, "ok-1"), patience).Status)

	want := queriedSeries(t)
	t.Logf("series the dashboard and the alert rules query: %s", strings.Join(want, " "))

	// Labelled series the queries filter or group by: the alerts' label names and values
	// as the SDK spells them, the dashboard's variables, the breaker of orders.
	labelled := []string{
		series("temporal_worker_start_total", "worker_type", "WorkflowWorker", "namespace", s.temporal.Namespace, "task_queue", s.cfg.TaskQueue),
		series("temporal_workflow_task_execution_failed_total", "failure_reason", "WorkflowError", "workflow_type", "NoSuchWorkflow", "task_queue", s.cfg.TaskQueue),
		series("temporal_workflow_task_schedule_to_start_latency_seconds_bucket", "workflow_type", workflows.RetryWorkflowName, "task_queue", s.cfg.TaskQueue),
		series("temporal_workflow_task_execution_latency_seconds_bucket", "workflow_type", workflows.RetryWorkflowName),
		series("breaker_state", "queue", orders, "state", "closed"),
		series("retries_held", "queue", orders),
		series("retries_executed_total", "queue", orders, "status", "success"),
		series("retries_exhausted_total", "queue", orders),
		series("dead_letters_total", "queue", s.dlq, "reason", "exhausted"),
	}

	// SDK metrics reach the registry through tally once a second, the depth gauges and the
	// breakers' on the next poll: scrape until everything is there, or patience runs out.
	var last scraped
	var missing []string
	deadline := time.Now().Add(patience)
	for {
		last, err = scrape(metricsURL)
		if err == nil {
			missing = missingSeries(last, want, labelled)
			if len(missing) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			require.NoError(t, err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	assert.Empty(t, missing, "queried by the dashboard or the alert rules, absent from /metrics")

	for name, why := range notInAShortRun {
		assert.Contains(t, want, name, "%s is listed as absent from a short run but nothing queries it", name)
		assert.False(t, has(last, name), "%s is on /metrics after all (listed as absent: %s): remove it from notInAShortRun", name, why)
	}
	assert.Equal(t, 1.0, last.value(series("bridge_consuming")), "the bridge consumes")
	assert.Equal(t, 1.0, last.value(series("retry_scheduler_build_info")), "the job variable's series")
	assert.Positive(t, last.value(series("temporal_workflow_task_execution_failed_total", "failure_reason", "WorkflowError", "workflow_type", "NoSuchWorkflow")))
	// A local activity republished the retries; the service starts no regular activity, so
	// the SDK has no activity schedule-to-start series to show.
	assert.Positive(t, last.value(series("temporal_local_activity_execution_latency_seconds_count", "activity_type", "Republish")))
	assert.False(t, has(last, "temporal_activity_schedule_to_start_latency_seconds_bucket"), "a regular activity ran")
}

// queriedSeries are the metric names the dashboard and the alert rules use, sorted: not
// the rules' own recordings, not the series listed as external.
func queriedSeries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/retry-scheduler.json")
	require.NoError(t, err)
	names, err := grafana.QueriedMetrics(b)
	require.NoError(t, err)

	b, err = os.ReadFile("../alerts/retry-scheduler.rules.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &rules))
	recorded := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			ns, err := promql.MetricNames(r.Expr)
			require.NoError(t, err, r.Expr)
			names = append(names, ns...)
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if seen[n] || recorded[n] || externalSeries[n] != "" {
			continue
		}
		seen[n] = true
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// missingSeries lists the names in want that have no sample (a histogram's name counts when
// its _bucket, _sum or _count has one), except those listed as absent from a short run, and
// the labelled series keys with no matching sample.
func missingSeries(m scraped, want, labelled []string) []string {
	var missing []string
	for _, n := range want {
		if notInAShortRun[n] == "" && !has(m, n) {
			missing = append(missing, n)
		}
	}
	for _, key := range labelled {
		if !hasSeries(m, key) {
			missing = append(missing, key)
		}
	}
	return missing
}

// has reports whether the scrape has a sample of the metric name, or of a histogram's
// _bucket, _sum or _count series of that name.
func has(m scraped, name string) bool {
	for k := range m.samples {
		n, _, _ := strings.Cut(k, "{")
		if n == name || n == name+"_bucket" || n == name+"_sum" || n == name+"_count" {
			return true
		}
	}
	return false
}

// hasSeries reports whether a sample's labels include all of key's (see scraped.value).
func hasSeries(m scraped, key string) bool { return len(m.matching(key)) > 0 }
