package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// slowestTraced is how many of a step's latest messages get a timeline in the JSON.
const slowestTraced = 5

// latest returns up to n sequence numbers that came back, latest first, with their send time
// and first arrival.
func (t *tracker) latest(n int) []traced {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []traced
	for seq, arrivals := range t.got {
		sentAt, ok := t.sent[seq]
		if !ok || len(arrivals) == 0 {
			continue
		}
		out = append(out, traced{seq: seq, sent: sentAt, arrived: arrivals[0].at, late: arrivals[0].at.Sub(sentAt.Add(t.delay))})
	}
	slices.SortFunc(out, func(a, b traced) int { return int(b.late - a.late) })
	return out[:min(n, len(out))]
}

// traced is one message whose workflow history is laid out against its send time.
type traced struct {
	seq           int
	sent, arrived time.Time
	late          time.Duration
}

// timelines says, for the given messages, when each step of their workflow happened relative
// to the send: where a late retry spent its time (ingress, the timer, a workflow task queued
// on the server, the republish) is read off the history, not guessed.
func timelines(ctx context.Context, tc client.Client, original, name string, msgs []traced) []string {
	var out []string
	for _, m := range msgs {
		id := message.WorkflowID(original, name+"-"+strconv.Itoa(m.seq))
		line, err := timeline(ctx, tc, id, m)
		if err != nil {
			line = fmt.Sprintf("seq %d late %s: history of %s: %v", m.seq, m.late.Round(time.Millisecond), id, err)
		}
		out = append(out, line)
	}
	return out
}

func timeline(ctx context.Context, tc client.Client, id string, m traced) (string, error) {
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	parts := []string{fmt.Sprintf("seq %d late %dms:", m.seq, m.late.Milliseconds())}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return "", err
		}
		name, ok := timelineEvents[ev.GetEventType()]
		if !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s +%d", name, ev.GetEventTime().AsTime().Sub(m.sent).Milliseconds()))
		if ev.GetEventType() == enumspb.EVENT_TYPE_MARKER_RECORDED {
			break // the republish (a local activity's marker): the rest is the quiet window
		}
	}
	parts = append(parts, fmt.Sprintf("arrived +%d (ms after send)", m.arrived.Sub(m.sent).Milliseconds()))
	return strings.Join(parts, " "), nil
}

// timelineEvents are the history events a retry's lateness is made of, with short names.
var timelineEvents = map[enumspb.EventType]string{
	enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "started",
	enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:    "task-scheduled",
	enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:      "task-started",
	enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:    "task-completed",
	enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:    "task-TIMED-OUT",
	enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:       "task-FAILED",
	enumspb.EVENT_TYPE_TIMER_STARTED:              "timer-started",
	enumspb.EVENT_TYPE_TIMER_FIRED:                "timer-fired",
	enumspb.EVENT_TYPE_MARKER_RECORDED:            "marker",
}
