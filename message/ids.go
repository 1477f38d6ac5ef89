package message

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxMessageIDLen is the longest message id used as given; longer ids get the fallback. It
// is AMQP's limit for the message-id property, which every republish carries (a longer one
// could never be republished) and consumers report back.
const MaxMessageIDLen = 255

// MaxWorkflowIDLen is the longest workflow ID WorkflowID returns: Temporal's SQL stores
// (PostgreSQL, MySQL) keep workflow_id at VARCHAR(255); a longer ID fails there on every
// start while SQLite takes it.
const MaxWorkflowIDLen = 255

// workflowIDPrefix starts every workflow ID of a retry; hashedIDPrefix the hashed form.
const (
	workflowIDPrefix = "retry/"
	hashedIDPrefix   = workflowIDPrefix + "sha256-"
)

// WorkflowID is the one workflow for a message on a queue: the message id qualified by the
// original queue, so that two services failing on one fanned-out message are two retries,
// and a redelivered report lands on the same workflow (dedup by ID).
//
// It is retry/<queue>/<message id> when that fits in MaxWorkflowIDLen bytes, else
// retry/sha256-<64 hex of sha256(queue, 0x00, message id)>: the same message always maps to
// the same ID, and the hashed form (one slash) never equals a plain one (two slashes). The
// queue and the message id stay in the workflow's state and search attributes.
func WorkflowID(originalQueue, messageID string) string {
	id := workflowIDPrefix + originalQueue + "/" + messageID
	if len(id) <= MaxWorkflowIDLen {
		return id
	}
	h := sha256.New()
	h.Write([]byte(originalQueue))
	h.Write([]byte{0})
	h.Write([]byte(messageID))
	return hashedIDPrefix + hex.EncodeToString(h.Sum(nil))
}

// PoisonWorkflowID is the workflow a poison or oversize delivery is parked in (see
// message.Poison): under the ingress queue it arrived on, so that it never is the workflow of
// a message that was reported normally (retry/<original queue>/<id>), which may be live:
// retry/<ingress>/<message id>, or retry/<ingress>/<original queue>/<message id> when the
// original queue could be read (two services' poison for one fanned-out message are two
// items), hashed like WorkflowID when longer than MaxWorkflowIDLen. The message id is the
// bridge's: the delivery's when usable, else FallbackMessageID.
func PoisonWorkflowID(ingressQueue, originalQueue, messageID string) string {
	if originalQueue == "" || originalQueue == ingressQueue {
		return WorkflowID(ingressQueue, messageID)
	}
	return WorkflowID(ingressQueue, originalQueue+"/"+messageID)
}

// MessageIDOf is WorkflowID's inverse for a plain ID: the message id, given the original
// queue. ok is false for a hashed ID (the id is then only in the state) or an ID of another
// queue.
func MessageIDOf(workflowID, originalQueue string) (messageID string, ok bool) {
	return strings.CutPrefix(workflowID, workflowIDPrefix+originalQueue+"/")
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

// breakerIDPrefix starts the workflow ID of a destination's breaker.
const breakerIDPrefix = "breaker/"

// BreakerWorkflowID is the one breaker workflow of a destination (an original queue):
// breaker/<queue>, or breaker/sha256-<64 hex> when longer than MaxWorkflowIDLen.
func BreakerWorkflowID(queue string) string {
	id := breakerIDPrefix + queue
	if len(id) <= MaxWorkflowIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(queue))
	return breakerIDPrefix + "sha256-" + hex.EncodeToString(sum[:])
}
