package workflows

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The operator updates that act on one item with more than an OperatorAction: a retry with
// an edited message (payload, headers, destination), and a snooze that moves the next retry.
// Runs from before them never received them, so they need no version gate.
const (
	// UpdateEditRetry carries an EditRetry: edit the message, then retry it now (from dead:
	// with the count reset, as retry-now). Its result is the new State.
	UpdateEditRetry = "update-edit-retry"
	// UpdateSnooze carries a Snooze: the next retry of a scheduled message, or the retry of
	// a dead one, is at Until. Its result is the new State.
	UpdateSnooze = "update-snooze"
)

// ErrTypeInvalidInput is the application error type of an operator update refused for what
// it asks (an edit of a denied header, a snooze into the past), not for the item's status.
const ErrTypeInvalidInput = "InvalidOperatorInput"

// Destination is where a retry goes: a queue through the default exchange, or an exchange
// with a routing key. Queue names the item's destination either way (its breaker, its
// metric series, the policy's destinations guard).
type Destination struct {
	Queue      string `json:"queue"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
}

func (d Destination) String() string {
	if d.Exchange == "" {
		return "queue " + d.Queue
	}
	return fmt.Sprintf("exchange %s with routing key %s (queue %s)", d.Exchange, d.RoutingKey, d.Queue)
}

// destinationOf is where m goes now.
func destinationOf(m message.Message) Destination {
	return Destination{Queue: m.OriginalQueue, Exchange: m.OriginalExchange, RoutingKey: m.OriginalRoutingKey}
}

// EditRetry is an operator's retry with the message edited first. Each part is replaced
// only when asked: the payload (ReplacePayload), the headers as a whole (ReplaceHeaders),
// the destination (non-nil). The ops API validates them against the deployment's limits
// and destinations guard; the workflow checks again what needs no configuration.
type EditRetry struct {
	OperatorAction
	ReplacePayload bool           `json:"replace_payload,omitempty"`
	Payload        []byte         `json:"payload,omitempty"`
	ReplaceHeaders bool           `json:"replace_headers,omitempty"`
	Headers        map[string]any `json:"headers,omitempty"`
	Destination    *Destination   `json:"destination,omitempty"`
}

// Snooze moves the next retry to Until: at most the dead-letter retention ahead.
type Snooze struct {
	OperatorAction
	Until time.Time `json:"until"`
}

// Edit is the record of one edit, kept in the state: who, when, why, and what changed (the
// replaced payload by its digest and size, never its bytes).
type Edit struct {
	At                time.Time              `json:"at"`
	Actor             string                 `json:"actor"`
	Reason            string                 `json:"reason,omitempty"`
	PayloadBefore     *message.PayloadDigest `json:"payload_before,omitempty"`
	PayloadAfter      *message.PayloadDigest `json:"payload_after,omitempty"`
	HeadersSet        []string               `json:"headers_set,omitempty"`
	HeadersRemoved    []string               `json:"headers_removed,omitempty"`
	DestinationBefore *Destination           `json:"destination_before,omitempty"`
	DestinationAfter  *Destination           `json:"destination_after,omitempty"`
}

// Summary says the edit in one line, for the item's events.
func (e Edit) Summary() string {
	var parts []string
	if e.PayloadAfter != nil {
		parts = append(parts, "payload "+e.PayloadBefore.String()+" → "+e.PayloadAfter.String())
	}
	if len(e.HeadersSet) > 0 {
		parts = append(parts, "headers set: "+strings.Join(e.HeadersSet, ", "))
	}
	if len(e.HeadersRemoved) > 0 {
		parts = append(parts, "headers removed: "+strings.Join(e.HeadersRemoved, ", "))
	}
	if e.DestinationAfter != nil {
		parts = append(parts, "destination "+e.DestinationBefore.String()+" → "+e.DestinationAfter.String())
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing changed")
	}
	s := strings.Join(parts, "; ")
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// EditRefusal says why edit e cannot be applied to the message in state s, and of which kind
// (ErrTypeIllegalAction or ErrTypeInvalidInput), or "" when it can.
func EditRefusal(e *EditRetry, s *State) (why, errType string) {
	if why := ActionRefusal(SignalRetryNow, s); why != "" {
		return "edit and " + why, ErrTypeIllegalAction
	}
	if !e.ReplacePayload && !e.ReplaceHeaders && e.Destination == nil {
		return "an edit replaces the payload, the headers or the destination: this one names none", ErrTypeInvalidInput
	}
	if e.ReplaceHeaders {
		// Deterministic: it visits the headers in name order (workflowcheck sees a map's range).
		//workflowcheck:ignore
		_, err := message.CheckEditedHeaders(e.Headers)
		if err != nil {
			return "headers refused: " + err.Error(), ErrTypeInvalidInput
		}
	}
	if d := e.Destination; d != nil {
		if s.Poison != nil {
			return "the destination of a parked undecodable delivery is the ingress queue, where it is decoded again: it cannot be changed", ErrTypeInvalidInput
		}
		if strings.TrimSpace(d.Queue) == "" {
			return "destination.queue is empty: it names the destination (with an exchange, the queue the message failed on)", ErrTypeInvalidInput
		}
		if d.Exchange != "" && d.RoutingKey == "" {
			return "destination.routing_key is empty: a retry through an exchange needs one", ErrTypeInvalidInput
		}
	}
	return "", ""
}

// SnoozeRefusal says why snooze n cannot move the next retry of the message in state s at
// time now, for a run whose dead messages are kept for retention, and of which kind; "" when
// it can.
func SnoozeRefusal(n *Snooze, s *State, now time.Time, retention time.Duration) (why, errType string) {
	switch s.Status {
	case StatusScheduled, StatusDead:
	default:
		st := string(s.Status)
		if st == "" {
			st = "starting"
		}
		return fmt.Sprintf("the message is %s: snooze is allowed only while scheduled or dead", st), ErrTypeIllegalAction
	}
	if why := RetryRefusal(s); why != "" {
		return "snooze " + why, ErrTypeIllegalAction
	}
	if !n.Until.After(now) {
		return fmt.Sprintf("until %s is not in the future", n.Until.UTC().Format(time.RFC3339)), ErrTypeInvalidInput
	}
	if latest := now.Add(retention); n.Until.After(latest) {
		return fmt.Sprintf("until %s is beyond the dead-letter retention of %s (at most %s)",
			n.Until.UTC().Format(time.RFC3339), retention, latest.UTC().Format(time.RFC3339)), ErrTypeInvalidInput
	}
	return "", ""
}

// editRetry applies an operator's edited retry: the edit, then the retry-now it asks for, or
// records it as refused and says why.
func (r *retryRun) editRetry(e EditRetry) string {
	if why, _ := EditRefusal(&e, &r.state); why != "" {
		r.event("refused", e.Actor, why)
		return why
	}
	rec := r.applyEdit(e)
	r.state.Edits = append(r.state.Edits, rec)
	r.event("edited", e.Actor, rec.Summary())
	workflow.GetLogger(r.ctx).Info("message edited",
		"message_id", r.state.Message.MessageID, "actor", e.Actor, "edit", rec.Summary())
	return r.act(SignalRetryNow, e.OperatorAction)
}

// applyEdit changes the message as e asks and returns the record of what changed.
func (r *retryRun) applyEdit(e EditRetry) Edit {
	m := &r.state.Message
	rec := Edit{At: workflow.Now(r.ctx), Actor: e.Actor, Reason: e.Reason}
	if e.ReplacePayload {
		before, after := message.DigestOf(m.Payload), message.DigestOf(e.Payload)
		rec.PayloadBefore, rec.PayloadAfter = &before, &after
		m.Payload = e.Payload
	}
	if e.ReplaceHeaders {
		// Checked by EditRefusal. Each map is visited in key order: deterministic, though
		// workflowcheck sees a map's range.
		//workflowcheck:ignore
		headers, _ := message.CheckEditedHeaders(e.Headers)
		//workflowcheck:ignore
		names, oldNames := slices.Sorted(maps.Keys(headers)), slices.Sorted(maps.Keys(m.Headers))
		for _, k := range names {
			if old, ok := m.Headers[k]; !ok || fmt.Sprint(old) != fmt.Sprint(headers[k]) {
				rec.HeadersSet = append(rec.HeadersSet, k)
			}
		}
		for _, k := range oldNames {
			if _, ok := headers[k]; !ok {
				rec.HeadersRemoved = append(rec.HeadersRemoved, k)
			}
		}
		m.Headers = headers
	}
	if d := e.Destination; d != nil {
		before := destinationOf(*m)
		rec.DestinationBefore, rec.DestinationAfter = &before, d
		m.OriginalQueue, m.OriginalExchange, m.OriginalRoutingKey = d.Queue, d.Exchange, d.RoutingKey
	}
	return rec
}

// snooze moves the next retry to n.Until: a scheduled message waits for it instead, a dead
// one is scheduled for it with its count reset (as a retry from dead), or records it as
// refused and says why.
func (r *retryRun) snooze(n Snooze) string {
	s := &r.state
	if why, _ := SnoozeRefusal(&n, s, workflow.Now(r.ctx), r.retention); why != "" {
		r.event("refused", n.Actor, why)
		return why
	}
	detail := "next retry at " + n.Until.UTC().Format(time.RFC3339)
	if !s.NextRetryAt.IsZero() {
		detail += " (was " + s.NextRetryAt.UTC().Format(time.RFC3339) + ")"
	}
	if n.Reason != "" {
		detail += ": " + n.Reason
	}
	r.event("snoozed", n.Actor, detail)
	if s.Status == StatusDead {
		r.reopen(n.Until)
	}
	s.NextRetryAt = n.Until
	s.Status = StatusScheduled
	workflow.GetLogger(r.ctx).Info("retry snoozed",
		"message_id", s.Message.MessageID, "actor", n.Actor, "next_retry_at", s.NextRetryAt)
	r.upsert()
	return ""
}
