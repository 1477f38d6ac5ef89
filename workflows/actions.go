package workflows

import (
	"fmt"
	"slices"
	"strings"
)

// Operator actions as Temporal Updates: the same four actions as the operator signals, each
// with a validator that refuses an illegal one before it enters the history, and a result
// that is the state after the action. The ops API sends these; the signals stay for the CLI
// recipes. Both take an OperatorAction and obey one table (LegalActions).
const (
	// UpdateRetryNow is SignalRetryNow as an update; its result is the new State.
	UpdateRetryNow = "update-retry-now"
	// UpdateSkip is SignalSkip as an update; its result is the new State.
	UpdateSkip = "update-skip"
	// UpdateResolve is SignalResolve as an update; its result is the new State.
	UpdateResolve = "update-resolve"
	// UpdateDiscard is SignalDiscard as an update; its result is the new State.
	UpdateDiscard = "update-discard"
)

// ErrTypeIllegalAction is the application error type of an operator update refused because
// the action is not legal for the message now (the validator's, or the handler's when the
// state changed between the two).
const ErrTypeIllegalAction = "IllegalOperatorAction"

// LegalAction is one row of the table of operator actions: the signal that names the action,
// its update, and the statuses it is legal in.
type LegalAction struct {
	Signal string
	Update string
	In     []Status
}

// LegalActions is the one table of which operator action is legal in which status. The
// workflow's signal handlers and update validators, and the ops API's pre-checks, all ask
// ActionRefusal, which adds the rule per kind of item (a truncated parked delivery).
var LegalActions = []LegalAction{
	{Signal: SignalRetryNow, Update: UpdateRetryNow, In: []Status{StatusScheduled, StatusHeld, StatusDead}},
	{Signal: SignalSkip, Update: UpdateSkip, In: []Status{StatusScheduled, StatusHeld}},
	{Signal: SignalResolve, Update: UpdateResolve, In: []Status{StatusDead}},
	{Signal: SignalDiscard, Update: UpdateDiscard, In: []Status{StatusDead}},
}

// legalAction is the row of the action signal names.
func legalAction(signal string) (LegalAction, bool) {
	i := slices.IndexFunc(LegalActions, func(a LegalAction) bool { return a.Signal == signal })
	if i < 0 {
		return LegalAction{}, false
	}
	return LegalActions[i], true
}

// Allows reports whether the action is legal in status s, by status alone.
func (a LegalAction) Allows(s Status) bool {
	return slices.Contains(a.In, s)
}

// InList is the statuses the action is legal in, for messages: "scheduled or dead".
func (a LegalAction) InList() string {
	out := make([]string, len(a.In))
	for i, s := range a.In {
		out[i] = string(s)
	}
	return strings.Join(out, " or ")
}

// ActionRefusal says why operator action signal (SignalRetryNow, SignalSkip, SignalResolve,
// SignalDiscard) is not legal for the message in state s, or "" when it is: "the message is
// scheduled: resolve is allowed only while dead", or the item's own reason (RetryRefusal).
func ActionRefusal(signal string, s *State) string {
	a, ok := legalAction(signal)
	if !ok {
		return signal + " is not an operator action"
	}
	if !a.Allows(s.Status) {
		st := string(s.Status)
		if st == "" {
			st = "starting"
		}
		return fmt.Sprintf("the message is %s: %s is allowed only while %s", st, signal, a.InList())
	}
	if signal == SignalRetryNow {
		if why := RetryRefusal(s); why != "" {
			return signal + " " + why
		}
	}
	return ""
}

// RetryRefusal says why a message cannot be retried whatever its status, or "" when it can: a
// parked oversize (or otherwise truncated) delivery holds only the first bytes of its body,
// and a retry would publish other bytes than were received. ActionRefusal asks it.
func RetryRefusal(s *State) string {
	if p := s.Poison; p != nil && p.Truncated {
		if ref := p.PayloadRef; ref != nil {
			return fmt.Sprintf("is not allowed: only the first %d of the %d bytes are kept here; replay the envelope %s with its payload, message %s on the queue %s (sha256 %s)",
				len(s.Message.Payload), p.Size, p.DLQID, ref.MessageID, ref.Queue, ref.SHA256)
		}
		return fmt.Sprintf("is not allowed: only the first %d of the %d bytes are kept here; replay the envelope %s from the dead-letter queue %s",
			len(s.Message.Payload), p.Size, p.DLQID, s.DeadLetterQueue)
	}
	return ""
}
