// Package jobs runs the operators' long actions (replay, purge, retry-matching and the bulk
// actions) as durable jobs: a Temporal workflow, JobWorkflow, that pages through the matching
// items at a rate, applies the action to each through the same code the ops API uses for one
// item, counts what it did, honours a replay's canary, and can be cancelled. The ops process
// only starts a job and reads it, so a job survives a restart of that process; its paging
// state lives in the workflow, so it survives a restart of the worker too.
package jobs

import (
	"context"
	"time"
)

// Names of the workflow, its query and its update.
const (
	WorkflowName = "JobWorkflow"
	// QueryProgress answers the job's Progress.
	QueryProgress = "progress"
	// UpdateCancel stops a running job after the batch in flight; its argument is a Cancel.
	UpdateCancel = "cancel"
	// IDPrefix starts every job's workflow ID: job/<kind>/<uuid>.
	IDPrefix = "job/"
)

// Kinds of job: the long actions' route words.
const (
	KindReplay        = "replay"
	KindPurge         = "purge"
	KindRetryMatching = "retry-matching"
	KindBulkRetry     = "bulk-retry"
	KindBulkSkip      = "bulk-skip"
	KindBulkResolve   = "bulk-resolve"
	KindBulkDiscard   = "bulk-discard"
)

// States of a job.
const (
	StateRunning   = "running"
	StateCompleted = "completed"
	StateCancelled = "cancelled"
	StateFailed    = "failed"
)

// Canary verdicts of a replay with a canary.
const (
	VerdictPending = "pending"
	VerdictPassed  = "passed"
	VerdictFailed  = "failed"
)

// Target is what a job does to each item: the action, who asks (name and tenant scope) and
// why, on items in one of the statuses Only (empty: any the action allows).
type Target struct {
	Action string   `json:"action"`
	Actor  string   `json:"actor"`
	Tenant string   `json:"tenant,omitempty"`
	Reason string   `json:"reason,omitempty"`
	Only   []string `json:"only,omitempty"`
}

// Canary is a replay's canary: replay N first, wait for their outcomes, go on only while
// fewer than MaxRatio of what was judged failed again; each replayed item has Timeout to
// settle (0: its quiet window and some slack, from the items).
type Canary struct {
	N        int           `json:"n"`
	MaxRatio float64       `json:"max_failure_ratio"`
	Timeout  time.Duration `json:"timeout,omitempty"`
}

// Input starts a job. Either Query (a visibility query, already scoped to the caller's
// tenant) or IDs selects the items.
type Input struct {
	Kind   string   `json:"kind"`
	Target Target   `json:"target"`
	Query  string   `json:"query,omitempty"`
	IDs    []string `json:"ids,omitempty"`
	// Filter is the request's filter, for display.
	Filter map[string]string `json:"filter,omitempty"`
	// Rate is how many items per second the job acts on.
	Rate   float64 `json:"rate"`
	Canary *Canary `json:"canary,omitempty"`
	// MaxHistory is the history length at which the job continues as new; 0: DefaultMaxHistory.
	MaxHistory int `json:"max_history,omitempty"`
	// SettleEvery is how often a canary replay reads its replayed items' outcomes; 0:
	// DefaultSettleEvery.
	SettleEvery time.Duration `json:"settle_every,omitempty"`
	// Carry is the state a run hands to the next when it continues as new.
	Carry *Carry `json:"carry,omitempty"`
}

// Carry is a job's working state across continue-as-new.
type Carry struct {
	Progress Progress `json:"progress"`
	// Buffer holds the ids of the current visibility page not acted on yet; Token fetches
	// the next page, and Listed says the last page was read.
	Buffer []string `json:"buffer,omitempty"`
	Token  []byte   `json:"token,omitempty"`
	Listed bool     `json:"listed,omitempty"`
	// Next is the index of the next of Input.IDs.
	Next int `json:"next,omitempty"`
	// Pending are replayed items whose outcome the canary awaits.
	Pending []Baseline `json:"pending,omitempty"`
	// Quiet is the longest quiet window of the items replayed.
	Quiet time.Duration `json:"quiet,omitempty"`
	// CanaryDone says the canary phase passed.
	CanaryDone bool `json:"canary_done,omitempty"`
	// Cancel is a cancel accepted by a run that then continued as new.
	Cancel *Cancel `json:"cancel,omitempty"`
}

// Cancel is the argument of UpdateCancel.
type Cancel struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
}

// CanaryStatus is a canary replay's progress and verdict.
type CanaryStatus struct {
	N               int     `json:"n"`
	MaxFailureRatio float64 `json:"max_failure_ratio"`
	Timeout         string  `json:"timeout,omitempty"`
	// Verdict is pending until the canary's outcomes are judged, then passed or failed (a
	// failure ratio crossed later fails it too).
	Verdict string `json:"verdict"`
	// Delivered, Failed and Unknown judge what was replayed; Pending are still settling.
	Delivered int `json:"delivered"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
	Pending   int `json:"pending"`
}

// Progress is a job as the API shows it: the progress query's answer and the workflow's
// result.
type Progress struct {
	ID     string            `json:"id"`
	Kind   string            `json:"kind"`
	Action string            `json:"action"`
	State  string            `json:"state"`
	Actor  string            `json:"actor"`
	Tenant string            `json:"tenant,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Filter map[string]string `json:"filter,omitempty"`
	Rate   float64           `json:"rate"`
	// Total is how many items matched when the job started (-1 unknown); Done were acted
	// on, Failed refused or errored, Remaining are left (0 once the job ended).
	Total     int64 `json:"total"`
	Done      int   `json:"done"`
	Failed    int   `json:"failed"`
	Remaining int64 `json:"remaining"`
	// Errors says why some failed items failed (at most MaxErrors).
	Errors map[string]string `json:"errors,omitempty"`
	Canary *CanaryStatus     `json:"canary,omitempty"`
	// Stopped says why the job stopped before the end (a canary, a cancel).
	Stopped string `json:"stopped,omitempty"`
	// ProgressUnknown, set by the ops API only, says why the counts are not the job's: its
	// workflow did not answer (no worker polls, or none has started it yet), so what is shown
	// comes from the job's memo and Done, Failed, Total and Remaining are not known.
	ProgressUnknown string `json:"progress_unknown,omitempty"`
	// ProgressAsOf, set by the ops API only, says that the job's workflow did not answer this
	// read in time (a batch kept it busy on a loaded server): the counts are its last answer
	// to this ops process, at this time.
	ProgressAsOf *time.Time `json:"progress_as_of,omitempty"`
	CancelledBy  string     `json:"cancelled_by,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	// Runs counts the workflow runs (continue-as-new) the job took.
	Runs int `json:"runs"`
	// Outcomes, on a bulk retry, counts how the items sent the retry fared so far. The ops API
	// reads them from the items when it shows the job: the workflow does not keep them.
	Outcomes *OutcomeCounts `json:"outcomes,omitempty"`
}

// OutcomeCounts counts the outcomes of retried items, one count each: Succeeded were
// delivered (their quiet window passed without a new failure report), FailedAgain reported
// a new failure and are retried again, Dead went to dead, Closed were closed otherwise
// meanwhile (resolved, discarded), Pending have not settled yet.
type OutcomeCounts struct {
	Succeeded   int `json:"succeeded"`
	FailedAgain int `json:"failed_again"`
	Dead        int `json:"dead"`
	Closed      int `json:"closed"`
	Pending     int `json:"pending"`
}

// MaxErrors bounds the errors a job lists.
const MaxErrors = 100

// Baseline is what a replayed item looked like when its retry was sent: a newer attempt, or a
// later reset, tells what happened since.
type Baseline struct {
	ID       string    `json:"id"`
	Attempts int       `json:"attempts"`
	Resets   int       `json:"resets"`
	At       time.Time `json:"at"`
}

// Outcome of a replayed item.
type Outcome int

// Outcomes.
const (
	Pending Outcome = iota
	Delivered
	FailedAgain
)

// Applied is one item's result: Err is empty when the action was sent; Attempts, Resets
// and QuietWindow are the item as read before it (a canary's baseline).
type Applied struct {
	ID          string        `json:"id"`
	Err         string        `json:"err,omitempty"`
	Attempts    int           `json:"attempts,omitempty"`
	Resets      int           `json:"resets,omitempty"`
	QuietWindow time.Duration `json:"quiet_window,omitempty"`
	// Unsent marks a failure before anything was sent to the item (its state could not be
	// read): JobApply tries it once more. Kept within the activity, not recorded.
	Unsent bool `json:"-"`
}

// Items is what a job does to items: the ops API's own code for one item.
type Items interface {
	// Count counts the items matching query.
	Count(ctx context.Context, query string) (int64, error)
	// Page lists up to size ids matching query from token ("" first); next is nil on the last.
	Page(ctx context.Context, query string, token []byte, size int) (ids []string, next []byte, err error)
	// Apply sends t's action to id, as the API does for one item of a bulk action.
	Apply(ctx context.Context, t Target, id string) Applied
	// Outcome reads how a replayed item is doing.
	Outcome(ctx context.Context, b Baseline) Outcome
}
