package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The Temporal server's persistence counters, labelled by operation (and service, namespace):
// every call to the history/task store, and every call to the visibility store.
const (
	metricPersistence = "persistence_requests"
	metricVisibility  = "visibility_persistence_requests"
)

// topPersistenceOps is how many persistence operations a step lists by name.
const topPersistenceOps = 8

// The server's timeout counters (history's timer queue), labelled by operation: a workflow
// task's are those of the operations naming WorkflowTaskTimeout
// (TimerActiveTaskWorkflowTaskTimeout, …SpeculativeWorkflowTaskTimeout). A sticky queue's
// task that waited past its schedule-to-start timeout counts under the first; one a worker
// took and did not complete in time under the second.
const (
	metricScheduleToStartTimeout = "schedule_to_start_timeout"
	metricStartToCloseTimeout    = "start_to_close_timeout"
	workflowTaskTimeoutOperation = "WorkflowTaskTimeout"
)

// metricsSample is one scrape of the server's /metrics: the persistence counters summed by
// operation over their other labels, and the workflow-task timeouts by timeout counter.
type metricsSample struct {
	persistence map[string]float64
	visibility  map[string]float64
	taskTimeout map[string]float64
}

// scrapedFamily says whether parseMetrics reads a metric family (a counter's name with or
// without an exporter's _total suffix, for the timeout counters).
func scrapedFamily(name string) bool {
	switch strings.TrimSuffix(name, "_total") {
	case metricScheduleToStartTimeout, metricStartToCloseTimeout:
		return true
	}
	return name == metricPersistence || name == metricVisibility
}

// parseMetrics reads the two persistence counters and the timeout counters out of a
// Prometheus text exposition. Only their lines are parsed, so that an odd line of another
// family cannot spoil the sample.
func parseMetrics(r io.Reader) (metricsSample, error) {
	var kept bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if scrapedFamily(familyOf(line)) {
			kept.WriteString(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return metricsSample{}, fmt.Errorf("read metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return metricsSample{}, fmt.Errorf("parse metrics: %w", err)
	}
	out := metricsSample{persistence: map[string]float64{}, visibility: map[string]float64{}, taskTimeout: map[string]float64{}}
	for name, into := range map[string]map[string]float64{metricPersistence: out.persistence, metricVisibility: out.visibility} {
		for _, m := range fams[name].GetMetric() {
			into[operationOf(m)] += valueOf(m)
		}
	}
	for _, name := range []string{metricScheduleToStartTimeout, metricStartToCloseTimeout} {
		for _, family := range []string{name, name + "_total"} {
			for _, m := range fams[family].GetMetric() {
				if strings.Contains(operationOf(m), workflowTaskTimeoutOperation) {
					out.taskTimeout[name] += valueOf(m)
				}
			}
		}
	}
	return out, nil
}

// operationOf is a sample's operation label ("?" without one).
func operationOf(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "operation" {
			return l.GetValue()
		}
	}
	return "?"
}

// valueOf is a counter's (or an untyped sample's) value.
func valueOf(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// familyOf is the metric family a line of the text format belongs to: the sample's name, or
// the name a # HELP or # TYPE line describes ("" for other comments and blank lines).
func familyOf(line string) string {
	if rest, ok := strings.CutPrefix(line, "# "); ok {
		f := strings.Fields(rest)
		if len(f) >= 2 && (f[0] == "HELP" || f[0] == "TYPE") {
			return f[1]
		}
		return ""
	}
	if i := strings.IndexAny(line, "{ "); i > 0 {
		return line[:i]
	}
	return ""
}

// scrapeMetrics reads the server's /metrics.
func scrapeMetrics(ctx context.Context, url string) (metricsSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return metricsSample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return metricsSample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metricsSample{}, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	s, err := parseMetrics(resp.Body)
	if err != nil {
		return s, fmt.Errorf("scrape %s: %w", url, err)
	}
	return s, nil
}

// visibilityWrite says whether a visibility operation writes: every one but the reads
// (List…, Count…, Get…, Scan…). The writes a workflow causes are RecordWorkflowExecutionStarted,
// UpsertWorkflowExecution, RecordWorkflowExecutionClosed and, at retention, DeleteWorkflowExecution.
func visibilityWrite(op string) bool {
	for _, read := range []string{"List", "Count", "Get", "Scan"} {
		if strings.HasPrefix(op, read) {
			return false
		}
	}
	return true
}

// opCount is one operation's requests over a step.
type opCount struct {
	Operation string  `json:"operation"`
	Count     float64 `json:"count"`
	PerRetry  float64 `json:"per_retry"`
	Write     bool    `json:"write,omitempty"`
}

// engineWork is what the Temporal server did for a step, per completed retry: its database
// calls (from its metrics, idle work included) and the shape of a sample of the step's
// workflow histories.
type engineWork struct {
	// Retries is what the per-retry figures divide by: completed retries (republishes for the
	// mixed phase, probe workflows for the ceiling).
	Retries int `json:"retries"`
	// PersistenceRequests is the persistence_requests counter's growth, every operation.
	PersistenceRequests float64   `json:"persistence_requests"`
	PersistencePerRetry float64   `json:"persistence_requests_per_retry"`
	TopPersistence      []opCount `json:"persistence_top_operations,omitempty"`
	// VisibilityWrites is visibility_persistence_requests' growth over its write operations.
	VisibilityWrites         float64   `json:"visibility_writes"`
	VisibilityWritesPerRetry float64   `json:"visibility_writes_per_retry"`
	Visibility               []opCount `json:"visibility_operations,omitempty"`
	// WorkflowTaskTimeouts are the workflow tasks the server timed out over the step (its
	// timeout counters' growth): an overloaded engine's sticky-queue tasks time out and go
	// again through the normal queue, two more history events and a replay each.
	WorkflowTaskTimeouts *taskTimeouts `json:"workflow_task_timeouts,omitempty"`
	// History is the mean shape of a sample of the step's workflow histories.
	History *historySummary `json:"history,omitempty"`
	// Errors say what could not be measured (a scrape or a history that failed).
	Errors []string `json:"errors,omitempty"`
}

// delta fills w's request figures from two scrapes, for retries completed retries.
func (w *engineWork) delta(before, after metricsSample, retries int) {
	w.Retries = retries
	per := func(v float64) float64 {
		if retries == 0 {
			return 0
		}
		return round(v / float64(retries))
	}
	ops := diff(before.persistence, after.persistence)
	for _, o := range ops {
		w.PersistenceRequests += o.Count
	}
	for i := range ops {
		ops[i].PerRetry = per(ops[i].Count)
	}
	w.TopPersistence = ops[:min(topPersistenceOps, len(ops))]
	w.PersistencePerRetry = per(w.PersistenceRequests)

	w.Visibility = diff(before.visibility, after.visibility)
	for i, o := range w.Visibility {
		w.Visibility[i].PerRetry = per(o.Count)
		if visibilityWrite(o.Operation) {
			w.Visibility[i].Write = true
			w.VisibilityWrites += o.Count
		}
	}
	w.VisibilityWritesPerRetry = per(w.VisibilityWrites)

	grown := map[string]float64{}
	for _, o := range diff(before.taskTimeout, after.taskTimeout) {
		grown[o.Operation] = o.Count
	}
	w.WorkflowTaskTimeouts = &taskTimeouts{
		ScheduleToStart: grown[metricScheduleToStartTimeout], StartToClose: grown[metricStartToCloseTimeout],
	}
}

// taskTimeouts counts a step's workflow-task timeouts by kind.
type taskTimeouts struct {
	// ScheduleToStart are tasks that waited on a sticky queue past its schedule-to-start
	// timeout (WORKFLOW_STICKY_TIMEOUT), then went to the normal queue.
	ScheduleToStart float64 `json:"schedule_to_start"`
	// StartToClose are tasks a worker took and did not complete in time.
	StartToClose float64 `json:"start_to_close"`
}

// total is every workflow-task timeout.
func (t *taskTimeouts) total() float64 { return t.ScheduleToStart + t.StartToClose }

// diff is each operation's growth from before to after, largest first (ties by name); a
// counter that went down (a restarted server) counts from zero.
func diff(before, after map[string]float64) []opCount {
	var out []opCount
	for op, v := range after {
		d := v - before[op]
		if d < 0 {
			d = v
		}
		if d > 0 {
			out = append(out, opCount{Operation: op, Count: d})
		}
	}
	slices.SortFunc(out, func(a, b opCount) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Operation, b.Operation)
	})
	return out
}

// engineMeter scrapes the server's metrics when a step starts (newEngineMeter) and again
// after its drain (stop), at the moments its CPU is read.
type engineMeter struct {
	url           string
	before, after metricsSample
	errs          []string
}

func newEngineMeter(ctx context.Context, url string) *engineMeter {
	m := &engineMeter{url: url}
	var err error
	if m.before, err = scrapeMetrics(ctx, url); err != nil {
		m.errs = append(m.errs, err.Error())
	}
	return m
}

// stop takes the second scrape: before the step's histories are read, which would count.
func (m *engineMeter) stop(ctx context.Context) {
	if len(m.errs) > 0 {
		return
	}
	var err error
	if m.after, err = scrapeMetrics(ctx, m.url); err != nil {
		m.errs = append(m.errs, err.Error())
	}
}

// work is the server's database work between the two scrapes, per retry.
func (m *engineMeter) work(retries int) *engineWork {
	w := &engineWork{Retries: retries, Errors: m.errs}
	if len(m.errs) == 0 {
		w.delta(m.before, m.after, retries)
	}
	return w
}

// addHistory reads the histories of the sampled workflows and puts their mean shape in w.
func (w *engineWork) addHistory(ctx context.Context, srv *server, sample []sampledWorkflow) {
	if len(sample) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tc, err := srv.Dial(ctx)
	if err != nil {
		w.Errors = append(w.Errors, "history: "+err.Error())
		return
	}
	defer tc.Close()
	errs := readShapes(ctx, tc, srv.Namespace, sample)
	w.History = summarizeShapes(sample)
	w.History.Errors = errs
}

// engineCell is the table's "ev/wft/vis" column: history events, completed workflow tasks
// and visibility writes per retry.
func engineCell(s step) string {
	e := s.Engine
	if e == nil {
		return "-"
	}
	ev, wft := "-", "-"
	if h := e.History; h != nil && h.Sampled > 0 {
		ev, wft = fmtF(h.PerRetry.Events), fmtF(h.PerRetry.WorkflowTasks)
	}
	vis := "-"
	if e.PersistenceRequests > 0 {
		vis = fmtF(e.VisibilityWritesPerRetry)
	}
	return ev + "/" + wft + "/" + vis
}

// dbOpsCell is the table's "db ops/retry" column: persistence requests per retry.
func dbOpsCell(s step) string {
	if s.Engine == nil || s.Engine.PersistenceRequests == 0 {
		return "-"
	}
	return fmtF(s.Engine.PersistencePerRetry)
}
