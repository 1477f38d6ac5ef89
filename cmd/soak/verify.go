package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// outcome is what Temporal says about a message at the end: the latest run's status.
type outcome struct {
	Status     string // a workflows.Status, or "no-workflow", "failed", "terminated", ...
	RetryCount int
	Sequence   int
	Err        string
}

// live says whether the message is still on its way (neither ended nor parked).
func (o outcome) live() bool {
	switch workflows.Status(o.Status) {
	case workflows.StatusScheduled, workflows.StatusRepublishing, workflows.StatusAwaitingOutcome, workflows.StatusHeld:
		return true
	}
	return o.Status == "unknown"
}

// fetchOutcome asks Temporal for the latest run of the message's workflow: the result of a
// closed run, the state query of an open one (dead messages stay open, parked).
func fetchOutcome(ctx context.Context, c client.Client, wid string) outcome {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return outcome{Status: "no-workflow"}
		}
		return outcome{Status: "unknown", Err: err.Error()}
	}
	switch st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus(); st {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		var r workflows.Result
		if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &r); err != nil {
			return outcome{Status: "unknown", Err: err.Error()}
		}
		return outcome{Status: string(r.Status), RetryCount: r.RetryCount, Sequence: r.Sequence}
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryState)
		if err != nil {
			return outcome{Status: "unknown", Err: err.Error()}
		}
		var s workflows.State
		if err := v.Get(&s); err != nil {
			return outcome{Status: "unknown", Err: err.Error()}
		}
		return outcome{Status: string(s.Status), RetryCount: s.RetryCount, Sequence: s.Sequence}
	default:
		return outcome{Status: st.String()}
	}
}

// fetchOutcomes asks for every id with some concurrency; ids still live (or unknown) are
// asked again until none is or the deadline passes.
func fetchOutcomes(ctx context.Context, c client.Client, ids []string, deadline time.Time, logf func(string, ...any)) map[string]outcome {
	out := make(map[string]outcome, len(ids))
	todo := ids
	for round := 1; ; round++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, id := range todo {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				o := fetchOutcome(ctx, c, id)
				mu.Lock()
				out[id] = o
				mu.Unlock()
			}()
		}
		wg.Wait()
		var again []string
		for _, id := range todo {
			if out[id].live() {
				again = append(again, id)
			}
		}
		if len(again) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return out
		}
		logf("verify round %d: %d of %d messages still in flight; asking again", round, len(again), len(ids))
		todo = again
		if !sleep(ctx, 5*time.Second) {
			return out
		}
	}
}

// runsPerWorkflow counts the runs of every workflow ID in the namespace (the dev server
// holds only this soak's workflows): more than one means a report came after a run ended.
func runsPerWorkflow(ctx context.Context, c client.Client, namespace string) (map[string]int, error) {
	runs := map[string]int{}
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, PageSize: 1000, NextPageToken: token,
		})
		if err != nil {
			return runs, err
		}
		for _, e := range resp.GetExecutions() {
			runs[e.GetExecution().GetWorkflowId()]++
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return runs, nil
		}
	}
}

// figures are the soak's counts, after Jepsen's lost / duplicated / unexpected: a run
// passes with nothing lost and nothing unexpected; duplicates with the same key are allowed.
type figures struct {
	Messages       int `json:"messages"`
	Published      int `json:"published"`
	ExpectDelivery int `json:"expected_delivered"`
	ExpectDead     int `json:"expected_dead"`

	Delivered    int `json:"delivered"`     // latest run delivered and the consumer took the message
	DeadLettered int `json:"dead_lettered"` // an envelope reached the dead-letter queue
	Parked       int `json:"parked"`        // latest run is dead, waiting for an operator

	Lost                    int `json:"lost"`
	LostInFlight            int `json:"lost_in_flight_at_deadline"`
	LostDeliveredNotTaken   int `json:"lost_delivered_but_never_taken"`
	LostNoWorkflow          int `json:"lost_no_workflow"`
	LostDeadNoEnvelope      int `json:"lost_dead_without_envelope"`
	LostOther               int `json:"lost_other"`
	WrongOutcome            int `json:"wrong_outcome"`
	OverDelivered           int `json:"delivered_more_than_attempts"`
	KeyMismatch             int `json:"duplicates_without_same_key"`
	IncompleteDeadLetters   int `json:"dead_letters_without_full_history"`
	SplitHistoryDeadLetters int `json:"dead_letters_history_split_across_runs"`
	BeyondMax               int `json:"attempts_beyond_max"`
	CorruptPayload          int `json:"payload_changed"`
	Strangers               int `json:"unknown_ids"`
	Unexpected              int `json:"unexpected"`
	// Hostile are the bad reports mixed into the traffic: each must be dead-lettered once.
	Hostile hostileFigures `json:"hostile"`

	Deliveries           int `json:"deliveries"`
	DuplicateDeliveries  int `json:"duplicate_deliveries_same_key"`
	MessagesWithDups     int `json:"messages_with_duplicates"`
	DuplicateEnvelopes   int `json:"duplicate_envelopes_same_dlq_id"`
	FailureReports       int `json:"failure_reports"`
	MultiRunMessages     int `json:"messages_with_more_than_one_run"`
	ProcessKills         int `json:"process_kills"`
	WorkerKills          int `json:"worker_kills"`
	BridgeKills          int `json:"bridge_kills"`
	TemporalKills        int `json:"temporal_kills"`
	RabbitNodeKills      int `json:"rabbitmq_node_kills"`
	Faults               int `json:"faults"`
	FaultErrors          int `json:"fault_errors"`
	DeliveredAfterRetry1 int `json:"delivered_after_1_retry"`
	DeliveredAfterRetry2 int `json:"delivered_after_2_retries"`
	DeliveredAfterRetry3 int `json:"delivered_after_3_retries"`
}

// problem is one message that counts against the soak, for the JSON and the log.
type problem struct {
	MessageID string `json:"message_id"`
	Check     string `json:"check"`
	Detail    string `json:"detail"`
}

// judge counts the figures from the ledger and Temporal's outcomes.
func judge(l *ledger, outcomes map[string]outcome, runs map[string]int, wid func(*record) string, maxRetries int) (figures, []problem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var f figures
	var probs []problem
	bad := func(r *record, check, format string, args ...any) {
		probs = append(probs, problem{MessageID: r.id, Check: check, Detail: fmt.Sprintf(format, args...)})
	}
	f.Messages = len(l.order)
	f.Strangers = len(l.strange)
	for _, r := range l.order {
		if r.published {
			f.Published++
		}
		expectDead := r.failures > maxRetries
		expectRetries := min(r.failures, maxRetries)
		if expectDead {
			f.ExpectDead++
		} else {
			f.ExpectDelivery++
		}
		o := outcomes[wid(r)]
		if runs[wid(r)] > 1 {
			f.MultiRunMessages++
		}
		f.FailureReports += len(r.reported)

		keys := map[string]bool{}
		acceptedKeys := map[string]bool{}
		beyond, mismatch, corrupt := false, false, false
		for _, d := range r.deliveries {
			f.Deliveries++
			if d.Dup {
				f.DuplicateDeliveries++
			}
			keys[d.Key] = true
			if d.Accepted {
				acceptedKeys[d.Key] = true
			}
			if d.Count < 0 || d.Key != r.id+":"+strconv.Itoa(d.Count) {
				mismatch = true
			}
			if d.Count > maxRetries {
				beyond = true
			}
			if !d.BodyOK {
				corrupt = true
			}
		}
		if len(keys) < len(r.deliveries) {
			f.MessagesWithDups++
		}
		taken := len(acceptedKeys) > 0
		delivered := o.Status == string(workflows.StatusDelivered) && taken
		parked := o.Status == string(workflows.StatusDead)
		enveloped := len(r.envelopes) > 0
		switch {
		case delivered:
			f.Delivered++
			switch len(keys) {
			case 1:
				f.DeliveredAfterRetry1++
			case 2:
				f.DeliveredAfterRetry2++
			case 3:
				f.DeliveredAfterRetry3++
			}
		case parked && !enveloped:
			// The workflow dead-lettered it, so an envelope must be on the dead-letter queue:
			// without one, no operator sees it there.
			f.Lost++
			f.LostDeadNoEnvelope++
			bad(r, "lost", "workflow dead but no envelope reached the dead-letter queue (retry count %d)", o.RetryCount)
		case parked || enveloped:
		default:
			f.Lost++
			switch {
			case o.live():
				f.LostInFlight++
				bad(r, "lost", "still %s at the deadline (%s)", o.Status, o.Err)
			case o.Status == string(workflows.StatusDelivered):
				f.LostDeliveredNotTaken++
				bad(r, "lost", "workflow says delivered but the consumer never took it; deliveries %v, reported %v", keyList(r), sortedKeys(r.reported))
			case o.Status == "no-workflow":
				f.LostNoWorkflow++
				bad(r, "lost", "no workflow (published=%v)", r.published)
			default:
				f.LostOther++
				bad(r, "lost", "workflow %s %s", o.Status, o.Err)
			}
		}
		if enveloped {
			f.DeadLettered++
		}
		if parked {
			f.Parked++
		}
		if expectDead && delivered || !expectDead && (parked || enveloped) {
			f.WrongOutcome++
			bad(r, "wrong outcome", "planned %d failures (max %d) but status %s, taken %v, envelopes %d", r.failures, maxRetries, o.Status, taken, len(r.envelopes))
		}
		if len(keys) > expectRetries || len(acceptedKeys) > 1 {
			f.OverDelivered++
			bad(r, "delivered more than attempts", "planned %d retries, got keys %v", expectRetries, keyList(r))
		}
		if mismatch {
			f.KeyMismatch++
			bad(r, "key", "deliveries %v", keyList(r))
		}
		if beyond || o.RetryCount > maxRetries {
			f.BeyondMax++
			bad(r, "beyond max", "deliveries %v, workflow retry count %d", keyList(r), o.RetryCount)
		}
		if corrupt {
			f.CorruptPayload++
			bad(r, "payload", "a delivery's body differs from what was sent")
		}
		if enveloped {
			failures := 1 + len(r.reported)
			ids := map[string]bool{}
			incomplete, split := false, false
			for _, e := range r.envelopes {
				if ids[e.DLQID] {
					f.DuplicateEnvelopes++
				}
				ids[e.DLQID] = true
				if !consecutiveFromOne(e.Attempts, failures) || e.TotalRetries > maxRetries {
					incomplete = true
				}
				if len(e.Attempts) > 0 && e.Attempts[0] > 1 {
					split = true
				}
			}
			if len(ids) > 1 {
				incomplete = true
			}
			if incomplete {
				f.IncompleteDeadLetters++
				if split {
					f.SplitHistoryDeadLetters++
				}
				bad(r, "dead letter history", "failures reported %d; envelopes %s", failures, envList(r.envelopes))
			}
		}
	}
	hf, hprobs := judgeHostile(l)
	f.Hostile = hf
	probs = append(probs, hprobs...)
	f.Lost += hf.Missing
	f.Unexpected = f.WrongOutcome + f.OverDelivered + f.KeyMismatch + f.IncompleteDeadLetters + f.BeyondMax + f.CorruptPayload + f.Strangers + hf.Wrong
	for _, s := range l.strange {
		probs = append(probs, problem{Check: "unknown id", Detail: s})
	}
	return f, probs
}

// consecutiveFromOne says whether attempts is exactly 1..n.
func consecutiveFromOne(attempts []int, n int) bool {
	if len(attempts) != n {
		return false
	}
	for i, a := range attempts {
		if a != i+1 {
			return false
		}
	}
	return true
}

func keyList(r *record) []string {
	var out []string
	for _, d := range r.deliveries {
		s := d.Key
		switch {
		case d.Dup:
			s += "(dup)"
		case d.Accepted:
			s += "(taken)"
		default:
			s += "(failed)"
		}
		out = append(out, s)
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func envList(es []deadLetter) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("[%s attempts %v total %d reason %s] ", e.DLQID, e.Attempts, e.TotalRetries, e.DeadReason)
	}
	return s
}
