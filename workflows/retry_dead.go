package workflows

import (
	"strconv"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// toDead publishes the dead-letter envelope and parks the message for an operator.
func (r *retryRun) toDead(cause, detail string) {
	s := &r.state
	now := workflow.Now(r.ctx)
	r.endHold()
	s.Status = StatusDead
	s.DeadReason, s.DeadDetail, s.DeadAt = cause, detail, now
	s.NextRetryAt = time.Time{}
	dlqID := s.DeadLetterID()
	if s.Poison != nil && cause == s.Poison.Kind {
		// The bridge published this delivery's envelope, with the full bytes, before it
		// started or signalled the run.
		if s.Poison.EnvelopeError != "" {
			r.event("dead-letter-failed", "", "the broker refused the bridge's dead-letter envelope "+s.Poison.DLQID+": "+s.Poison.EnvelopeError)
		} else {
			r.event("note", "", "dead-letter envelope "+s.Poison.DLQID+" published by the bridge to "+s.DeadLetterQueue)
		}
	} else {
		env := r.envelope(now)
		var acts *activities.Activities
		err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(r.ctx, deadLetterOptions), acts.DeadLetter,
			activities.DeadLetterInput{Queue: s.DeadLetterQueue, Envelope: env}).Get(r.ctx, nil)
		if err != nil {
			// The message stays parked and visible (status dead) even when the envelope could not be
			// published, so nothing is silently dropped; the event tells the operator why.
			r.event("dead-letter-failed", "", err.Error())
		}
	}
	if cause == policy.CauseExhausted {
		r.count(MetricRetriesExhausted)
	}
	workflow.GetLogger(r.ctx).Info("dead-lettered",
		"message_id", s.Message.MessageID, "attempt", s.RetryCount, "cause", cause, "outcome", "dead",
		"dead_letter_queue", s.DeadLetterQueue, "dlq_id", dlqID)
	r.upsert()
}

func (r *retryRun) envelope(now time.Time) message.Envelope {
	s := &r.state
	info := workflow.GetInfo(r.ctx)
	return message.Envelope{
		DLQID:              s.WorkflowID + "#" + strconv.Itoa(s.Resets),
		MessageID:          s.Message.MessageID,
		OriginalQueue:      s.Message.OriginalQueue,
		OriginalExchange:   s.Message.OriginalExchange,
		OriginalRoutingKey: s.Message.OriginalRoutingKey,
		ConsumerService:    s.Service,
		FailureCategory:    s.Category,
		DeadReason:         s.DeadReason,
		DeadDetail:         s.DeadDetail,
		Policy:             s.Policy.Name,
		RetryAttempts:      append([]message.Attempt(nil), s.Attempts...),
		TotalRetries:       s.RetryCount,
		FirstFailureAt:     s.FirstFailureAt,
		RoutedToDlqAt:      now,
		CorrelationID:      s.Message.CorrelationID,
		WorkflowID:         s.WorkflowID,
		RunID:              info.WorkflowExecution.RunID,
		OriginalMessage:    s.Message,
		Metadata: message.Metadata{
			TenantID:              s.TenantID,
			Producer:              s.Message.Producer,
			DLQTimestamp:          now,
			Service:               s.Service,
			ServiceVersion:        s.ServiceVersion,
			FirstAttemptTimestamp: s.FirstFailureAt,
			LastAttemptTimestamp:  s.LastFailureAt,
		},
	}
}

// DeadLetterID is the dlqId of the envelope of s's latest dead-lettering: the bridge's for a
// message parked as poison, else the workflow ID and how many times an operator retried it
// from dead.
func (s *State) DeadLetterID() string {
	if s.Poison != nil && s.DeadReason == s.Poison.Kind {
		return s.Poison.DLQID
	}
	return s.WorkflowID + "#" + strconv.Itoa(s.Resets)
}

// waitDead parks a dead message until an operator decides or the retention ends.
func (r *retryRun) waitDead() {
	s := &r.state
	timerCtx, cancel := workflow.WithCancel(r.ctx)
	defer cancel()
	sel := workflow.NewSelector(r.ctx)
	remaining := s.DeadAt.Add(r.retention).Sub(workflow.Now(r.ctx))
	sel.AddFuture(workflow.NewTimer(timerCtx, remaining), func(workflow.Future) {
		s.Status = StatusExpired
		r.event("expired", "", "retention of "+r.retention.String()+" ended")
		r.archiveExpired()
		// A metric is no command: runs in flight replay as before, and the SDK records
		// nothing while replaying, so each expiry counts once.
		r.count(MetricDeadLettersExpired)
		r.logClosed()
		r.upsert()
	})
	sel.AddReceive(r.reports, func(c workflow.ReceiveChannel, _ bool) {
		var rep message.FailureReport
		c.Receive(r.ctx, &rep)
		r.setAside(rep, SetAsideDead, "the message is dead; report kept as a note ("+describeReport(rep)+")")
	})
	r.addActionSignals(sel, r.retryNow, r.resolve, r.discard, r.skip)
	r.addActionUpdates(sel)
	sel.Select(r.ctx)
}

// archiveExpired hands the envelope of a message whose retention ended to the ArchiveExpired
// local activity, which publishes it to the archive queue when one is configured: the worker
// decides, so a setting changed after the message went dead still applies. The envelope is
// rebuilt from the state as it was dead-lettered (a poison delivery's under the bridge's
// dlqId, with the bytes the run kept). A failure is an event: the run closes as expired
// regardless, its history keeping the story.
func (r *retryRun) archiveExpired() {
	if !r.includes(changeArchiveOnExpiry) &&
		workflow.GetVersion(r.ctx, changeArchiveOnExpiry, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	s := &r.state
	env := r.envelope(s.DeadAt)
	env.DLQID = s.DeadLetterID()
	var acts *activities.Activities
	var res activities.ArchiveExpiredResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(r.ctx, deadLetterOptions), acts.ArchiveExpired,
		activities.ArchiveExpiredInput{Envelope: env}).Get(r.ctx, &res)
	switch {
	case err != nil:
		r.event("archive-failed", "", err.Error())
	case res.Queue != "":
		r.event("archived", "", "envelope "+env.DLQID+" archived to "+res.Queue)
	}
}

// poisonReport applies a report of a poison delivery that arrived while the run is live: a
// parked poison message that an operator retried came back from the ingress queue as poison
// again, so it is dead again. On any other run (PoisonWorkflowID keeps parked runs apart from
// reported ones, so only by an unlucky id) it is only noted: the bridge has dead-lettered the
// delivery itself. Runs from before parked poison never received such a report, so this
// needs no version.
func (r *retryRun) poisonReport(rep message.FailureReport) {
	s := &r.state
	if s.Poison != nil && s.Status == StatusAwaitingOutcome {
		r.poisoned(rep, workflow.Now(r.ctx))
		return
	}
	r.setAside(rep, SetAsidePoison, "a "+rep.Poison.Kind+" delivery for this message was dead-lettered by the bridge ("+
		rep.Poison.DLQID+") while "+string(s.Status)+": "+rep.Poison.Reason)
}

// poisoned parks a poison or oversize delivery as dead: one attempt with the decode error,
// dead reason poison or oversize. The bridge has published its envelope already.
func (r *retryRun) poisoned(rep message.FailureReport, now time.Time) {
	s := &r.state
	p := rep.Poison
	s.Poison = p
	if s.Resets > 0 {
		// The bytes that came back are the retried ones; the rest of the message stays.
		s.Message.Payload = rep.Message.Payload
	}
	s.Category = string(policy.Unknown)
	s.LastFailureAt = now
	s.Attempts = append(s.Attempts, message.Attempt{
		Attempt:   s.RetryCount + 1,
		Timestamp: now,
		Error:     p.Reason,
		Category:  s.Category,
	})
	r.toDead(p.Kind, p.Reason)
}
