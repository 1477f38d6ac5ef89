package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Names shared with the bridge, the ops API and the CLI recipes.
const (
	// RetryWorkflowName is the registered workflow type.
	RetryWorkflowName = "RetryWorkflow"
	// DefaultTaskQueue is the task queue workers poll unless configured otherwise.
	DefaultTaskQueue = "retry-scheduler"

	// SignalFailureReport carries a message.FailureReport: the message failed (again).
	SignalFailureReport = "failure-report"
	// SignalRetryNow carries an OperatorAction: republish now (from dead: with the count reset).
	SignalRetryNow = "retry-now"
	// SignalSkip carries an OperatorAction: stop retrying, send to dead now.
	SignalSkip = "skip"
	// SignalResolve carries an OperatorAction: a dead message was dealt with by hand; close it.
	SignalResolve = "resolve"
	// SignalDiscard carries an OperatorAction: a dead message is to be dropped; close it.
	SignalDiscard = "discard"
	// QueryState returns State.
	QueryState = "state"
)

// MaxMessageIDLen is the longest message id used as given; longer ids get the fallback.
const MaxMessageIDLen = 256

// WorkflowID is the one workflow for a message on a queue: the message id qualified by the
// original queue, so that two services failing on one fanned-out message are two retries,
// and a redelivered report lands on the same workflow (dedup by ID).
func WorkflowID(originalQueue, messageID string) string {
	return "retry/" + originalQueue + "/" + messageID
}

// FallbackMessageID is the documented id of a message that has no usable id (none, or
// longer than MaxMessageIDLen): a hash of its queue and body, so that the same failed
// message always maps to the same workflow.
func FallbackMessageID(originalQueue string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(originalQueue))
	h.Write([]byte{0})
	h.Write(payload)
	return "sha256-" + hex.EncodeToString(h.Sum(nil))[:32]
}

// MessageIDOrFallback returns id when it is usable, else the fallback.
func MessageIDOrFallback(id, originalQueue string, payload []byte) string {
	if id == "" || len(id) > MaxMessageIDLen || strings.ContainsAny(id, "\x00\n\r") {
		return FallbackMessageID(originalQueue, payload)
	}
	return id
}
