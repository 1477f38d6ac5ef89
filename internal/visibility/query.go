// Package visibility renders the list filters this service sends to Temporal visibility
// (ListWorkflow, CountWorkflow): the ops API's lists and bulk actions, the depth gauges' counts
// and the lookup of a message's earlier runs. Every value reaches a query through Literal, so
// there is one quoting rule, and conditions are built from typed fields, so a name is never
// pasted in as text.
package visibility

import (
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Field is a search attribute a condition filters on: one of the workflows package's keys
// (workflows.SAStatus, …) or one of Temporal's own attributes below.
type Field interface{ GetName() string }

// system is one of Temporal's own search attributes.
type system string

// GetName implements Field.
func (s system) GetName() string { return string(s) }

// Temporal's own search attributes.
var (
	WorkflowID      Field = system("WorkflowId")
	WorkflowType    Field = system("WorkflowType")
	TaskQueue       Field = system("TaskQueue")
	ExecutionStatus Field = system("ExecutionStatus")
	CloseTime       Field = system("CloseTime")
)

// Execution statuses, as visibility names them (ExecutionStatus = 'Running').
const (
	Running   = "Running"
	Completed = "Completed"
)

// RetryQueueStatuses are the retry queue's statuses: waiting for a retry (held ones too: due
// while their destination's breaker holds), or being retried right now. The ops API lists them
// by default and retry_queue_depth counts them; a dead letter is not in the retry queue.
var RetryQueueStatuses = []workflows.Status{workflows.StatusScheduled, workflows.StatusHeld, workflows.StatusRepublishing, workflows.StatusAwaitingOutcome}

// InRetryQueue reports whether s is one of RetryQueueStatuses.
func InRetryQueue(s workflows.Status) bool {
	for _, q := range RetryQueueStatuses {
		if s == q {
			return true
		}
	}
	return false
}

// Query is a list filter: conditions joined by AND, in the order they were added. The zero
// Query matches every execution. Methods return a new Query; a zero value (empty string, zero
// time, no statuses) adds no condition, so optional filters need no branches at the call site.
type Query struct{ conds []string }

// RetryWorkflows selects RetryWorkflows in one execution status (Running, Completed), of one
// task queue when taskQueue is set. Running matters to every view of live items: a closed
// workflow keeps the RetryStatus it had when it closed.
func RetryWorkflows(executionStatus, taskQueue string) Query {
	return Query{}.
		Equal(WorkflowType, workflows.RetryWorkflowName).
		Equal(ExecutionStatus, executionStatus).
		Equal(TaskQueue, taskQueue)
}

// RunsOf selects the runs of one workflow ID.
func RunsOf(workflowID string) Query { return Query{}.Equal(WorkflowID, workflowID) }

func (q Query) and(cond string) Query {
	conds := make([]string, len(q.conds), len(q.conds)+1)
	copy(conds, q.conds)
	return Query{conds: append(conds, cond)}
}

func (q Query) compare(f Field, op, literal string) Query {
	return q.and(f.GetName() + " " + op + " " + literal)
}

// Equal adds f = v.
func (q Query) Equal(f Field, v string) Query {
	if v == "" {
		return q
	}
	return q.compare(f, "=", Literal(v))
}

// NotEqual adds f != v.
func (q Query) NotEqual(f Field, v string) Query {
	if v == "" {
		return q
	}
	return q.compare(f, "!=", Literal(v))
}

// In adds f IN (vs…), written f = v for a single value.
func (q Query) In(f Field, vs ...string) Query {
	switch len(vs) {
	case 0:
		return q
	case 1:
		return q.Equal(f, vs[0])
	}
	lits := make([]string, len(vs))
	for i, v := range vs {
		lits[i] = Literal(v)
	}
	return q.compare(f, "IN", "("+strings.Join(lits, ", ")+")")
}

// Statuses adds RetryStatus IN (ss…): any of them.
func (q Query) Statuses(ss ...workflows.Status) Query {
	vs := make([]string, len(ss))
	for i, s := range ss {
		vs[i] = string(s)
	}
	return q.In(workflows.SAStatus, vs...)
}

// AtOrAfter adds f >= t.
func (q Query) AtOrAfter(f Field, t time.Time) Query {
	if t.IsZero() {
		return q
	}
	return q.compare(f, ">=", timeLiteral(t))
}

// Before adds f < t.
func (q Query) Before(f Field, t time.Time) Query {
	if t.IsZero() {
		return q
	}
	return q.compare(f, "<", timeLiteral(t))
}

// AtOrBeforeMilli adds f <= t, to t's millisecond, the precision visibility stores. See
// milliBound for why the bound is not t itself.
func (q Query) AtOrBeforeMilli(f Field, t time.Time) Query {
	if t.IsZero() {
		return q
	}
	return q.compare(f, "<=", Literal(milliBound(t)))
}

// String renders the query; the zero Query renders as "" (every execution).
func (q Query) String() string { return strings.Join(q.conds, " AND ") }

// timeLiteral renders t as visibility compares Datetime values: RFC 3339 in UTC.
func timeLiteral(t time.Time) string { return Literal(t.UTC().Format(time.RFC3339Nano)) }

// milliBound renders "at or before t's millisecond" for a Datetime comparison. The dev
// server's SQLite visibility stores Datetime attributes as text with exactly three fractional
// digits ("2025-01-05 00:00:00.500+00:00") and compares them as text with the query's time
// rendered with trailing zeros trimmed ("2025-01-05 00:00:00.5+00:00"), so a time whose
// milliseconds end in 0 compares wrongly ("<= 00:00:00.5" misses 00:00:00.500). Half a
// millisecond past t's millisecond always has four digits, so the text comparison agrees with
// the time comparison; on other stores it only moves the bound by 0.5 ms.
func milliBound(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Add(500 * time.Microsecond).Format(time.RFC3339Nano)
}
