// Package breaker is the processes' side of the per-destination circuit breakers: the state
// itself lives in one BreakerWorkflow per destination (workflows), and this package keeps
// what every worker and bridge needs of it cheap.
//
//   - Counter counts republishes (worker) and failed republishes (bridge) per destination in
//     memory and reports them to the destination's breaker once per flush interval, one
//     signal per destination with something to report: no Temporal call per message.
//   - Gate lists the breakers that hold (open, half-open, paused) with one visibility query
//     per refresh interval, whatever the traffic, describes the breakers of the destinations
//     retries asked about lately (fresher than visibility), and answers Holds from memory.
//   - HeldLister lists a destination's held retries, oldest due first, for the breaker's
//     releases.
package breaker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Defaults of the processes' breaker settings (BREAKER_REFRESH, BREAKER_FLUSH).
const (
	// DefaultRefresh is how often a Gate reads the breakers: how late, at most, a worker
	// learns that the breaker of a destination its retries ask about opened.
	DefaultRefresh = 500 * time.Millisecond
	// DefaultFlush is how often a Counter reports its counts: a breaker judges by counts at
	// most this old.
	DefaultFlush = time.Second
)

// Signaller starts or signals a destination's breaker; a client.Client is one.
type Signaller interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID string, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
}

// Lister lists workflows by a visibility query; a client.Client is one.
type Lister interface {
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// listPageSize is the most executions one list call asks for (the SQL stores' default cap).
const listPageSize = 1000

// maxListPages bounds one listing, so that a store that keeps handing out page tokens cannot
// hold a refresh for ever.
const maxListPages = 1000

// listAll calls each with every execution query matches, page after page.
func listAll(ctx context.Context, l Lister, query string, each func(*workflowpb.WorkflowExecutionInfo) error) error {
	var token []byte
	for range maxListPages {
		resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: listPageSize, NextPageToken: token,
		})
		if err != nil {
			return fmt.Errorf("list %s: %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if err := each(e); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
	return fmt.Errorf("list %s: more than %d pages", query, maxListPages)
}

// keyword is the value of a Keyword search attribute of e; "" when unset or unreadable.
func keyword(e *workflowpb.WorkflowExecutionInfo, key temporal.SearchAttributeKeyKeyword) string {
	var v string
	if p := searchAttribute(e, key.GetName()); p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
	}
	return v
}

// datetime is the value of a Datetime search attribute of e; zero when unset or unreadable.
func datetime(e *workflowpb.WorkflowExecutionInfo, key temporal.SearchAttributeKeyTime) time.Time {
	var v time.Time
	if p := searchAttribute(e, key.GetName()); p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
	}
	return v
}

func searchAttribute(e *workflowpb.WorkflowExecutionInfo, name string) *commonpb.Payload {
	return e.GetSearchAttributes().GetIndexedFields()[name]
}

// queueOf is the destination a breaker workflow serves: its OriginalQueue search attribute
// (set with its state), else what its workflow ID names ("" for a hashed ID, which names none).
func queueOf(e *workflowpb.WorkflowExecutionInfo) string {
	if q := keyword(e, workflows.SAOriginalQueue); q != "" {
		return q
	}
	q, ok := strings.CutPrefix(e.GetExecution().GetWorkflowId(), message.BreakerWorkflowID(""))
	if !ok || strings.HasPrefix(q, hashedIDPrefix) {
		return ""
	}
	return q
}

// hashedIDPrefix starts what follows "breaker/" in the ID of a queue too long for its own.
const hashedIDPrefix = "sha256-"

// orDiscard is l, or a logger that discards for a component given none.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
