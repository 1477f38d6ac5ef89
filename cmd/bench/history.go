package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// historySample is how many workflows of a step have their histories read for the history
// shape, spread over the step.
const historySample = 20

// historyShape counts what one message's workflow cost the server, over all its runs: every
// history event is written and read back, every completed workflow task is a round trip
// through matching, every timer a timer task, every upsert a visibility write.
type historyShape struct {
	Runs          int
	Events        int
	WorkflowTasks int
	Timers        int
	Markers       int
	Upserts       int
}

// shapeOf counts the events of one run's history.
func shapeOf(events []*historypb.HistoryEvent) historyShape {
	h := historyShape{Runs: 1, Events: len(events)}
	for _, ev := range events {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			h.WorkflowTasks++
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			h.Timers++
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			h.Markers++
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			h.Upserts++
		}
	}
	return h
}

func (h *historyShape) add(o historyShape) {
	h.Runs += o.Runs
	h.Events += o.Events
	h.WorkflowTasks += o.WorkflowTasks
	h.Timers += o.Timers
	h.Markers += o.Markers
	h.Upserts += o.Upserts
}

// shapeFigures are a historyShape's counts divided by workflows or by retries.
type shapeFigures struct {
	Events        float64 `json:"events"`
	WorkflowTasks float64 `json:"workflow_tasks_completed"`
	Timers        float64 `json:"timers"`
	Markers       float64 `json:"markers"`
	Upserts       float64 `json:"search_attribute_upserts"`
}

func (h historyShape) per(n int) shapeFigures {
	if n == 0 {
		return shapeFigures{}
	}
	d := float64(n)
	return shapeFigures{
		Events: round(float64(h.Events) / d), WorkflowTasks: round(float64(h.WorkflowTasks) / d),
		Timers: round(float64(h.Timers) / d), Markers: round(float64(h.Markers) / d), Upserts: round(float64(h.Upserts) / d),
	}
}

// historySummary is the mean history shape over a sample of a step's workflows: per
// workflow (a message, all its runs) and per retry (republish).
type historySummary struct {
	Sampled     int          `json:"workflows_sampled"`
	Runs        float64      `json:"runs_per_workflow"`
	Retries     float64      `json:"retries_per_workflow"`
	PerWorkflow shapeFigures `json:"per_workflow"`
	PerRetry    shapeFigures `json:"per_retry"`
	// ByFate splits the mixed phase's sample by what the consumer did with the message.
	ByFate map[string]*historySummary `json:"by_fate,omitempty"`
	Errors []string                   `json:"errors,omitempty"`
}

// sampledWorkflow is one workflow whose histories are read: its ID, how many retries its
// message had and how many runs it is expected to have (a report after the quiet window
// starts a second run), and, for the mixed phase, the message's fate.
type sampledWorkflow struct {
	id      string
	retries int
	runs    int
	fate    string
	shape   historyShape
}

// summarizeShapes is the mean over the workflows whose histories were read; with fates,
// also per fate.
func summarizeShapes(ws []sampledWorkflow) *historySummary {
	var total historyShape
	var n, retries int
	fates := map[string][]sampledWorkflow{}
	for _, w := range ws {
		if w.shape.Runs == 0 {
			continue
		}
		total.add(w.shape)
		n++
		retries += w.retries
		if w.fate != "" {
			fates[w.fate] = append(fates[w.fate], w)
		}
	}
	s := &historySummary{Sampled: n, PerWorkflow: total.per(n), PerRetry: total.per(retries)}
	if n > 0 {
		s.Runs = round(float64(total.Runs) / float64(n))
		s.Retries = round(float64(retries) / float64(n))
	}
	if len(fates) > 1 {
		s.ByFate = map[string]*historySummary{}
		for f, fw := range fates {
			for i := range fw {
				fw[i].fate = ""
			}
			s.ByFate[f] = summarizeShapes(fw)
		}
	}
	return s
}

// readShapes reads the histories of ws (every run) and fills their shapes; what could not be
// read is returned, and leaves that workflow out of the means.
func readShapes(ctx context.Context, tc client.Client, namespace string, ws []sampledWorkflow) []string {
	var errs []string
	for i := range ws {
		if err := readShape(ctx, tc, namespace, &ws[i]); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", ws[i].id, err))
			ws[i].shape = historyShape{}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return errs
}

func readShape(ctx context.Context, tc client.Client, namespace string, w *sampledWorkflow) error {
	runs := []string{""} // the latest run
	if w.runs > 1 {
		var err error
		if runs, err = listRuns(ctx, tc, namespace, w.id, w.runs); err != nil {
			return err
		}
	}
	for _, run := range runs {
		var events []*historypb.HistoryEvent
		it := tc.GetWorkflowHistory(ctx, w.id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return fmt.Errorf("history of run %q: %w", run, err)
			}
			events = append(events, ev)
		}
		w.shape.add(shapeOf(events))
	}
	return nil
}

// listRuns returns the run IDs of a workflow ID, through visibility, which lags the
// histories: it asks again for up to ten seconds until it lists want runs.
func listRuns(ctx context.Context, tc client.Client, namespace, id string, want int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var runs []string
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, Query: fmt.Sprintf("WorkflowId = %q", id), PageSize: 100,
		})
		if err == nil {
			runs = runs[:0]
			for _, e := range resp.GetExecutions() {
				runs = append(runs, e.GetExecution().GetRunId())
			}
			if len(runs) >= want {
				return runs, nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, fmt.Errorf("list runs: %w", err)
			}
			return nil, fmt.Errorf("visibility listed %d runs of %d", len(runs), want)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// spread picks up to n of seqs (sorted first) evenly over their range: a sample that covers
// the start, the middle and the end of a step.
func spread(seqs []int, n int) []int {
	seqs = slices.Sorted(slices.Values(seqs))
	if len(seqs) <= n {
		return seqs
	}
	out := make([]int, n)
	for k := range n {
		out[k] = seqs[(2*k+1)*len(seqs)/(2*n)]
	}
	return out
}
