package message

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
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
// and a redelivered report lands on the same workflow (dedup by ID). No two (queue, message
// id) pairs share an ID.
//
// It is retry/<escaped queue>/<message id> when that fits in MaxWorkflowIDLen bytes, else
// retry/sha256-<64 hex of sha256(escaped queue, 0x00, message id)>. The escaped queue
// (EscapeQueue) holds no '/' and no NUL, so the first '/' after the prefix, and the first NUL
// of the hash input, end the queue; the hashed form (one slash) never equals a plain one (two
// slashes). A queue without '/', '%' or NUL is its own escape, so its IDs are the ones of
// LegacyWorkflowID. The queue and the message id stay in the workflow's state and search
// attributes.
func WorkflowID(originalQueue, messageID string) string {
	return qualifiedID(EscapeQueue(originalQueue), messageID)
}

// qualifiedID is retry/<queue>/<message id>, or its hashed form when too long; queue is
// taken as given.
func qualifiedID(queue, messageID string) string {
	id := workflowIDPrefix + queue + "/" + messageID
	if len(id) <= MaxWorkflowIDLen {
		return id
	}
	h := sha256.New()
	h.Write([]byte(queue))
	h.Write([]byte{0})
	h.Write([]byte(messageID))
	return hashedIDPrefix + hex.EncodeToString(h.Sum(nil))
}

// LegacyWorkflowID is the ID an earlier release gave (queue, message id): the queue taken
// raw, so ("a/b", "c") and ("a", "b/c") shared one. It equals WorkflowID unless
// QueueNeedsEscape(queue); a report for a workflow started under it while it was current
// must still find that run.
func LegacyWorkflowID(originalQueue, messageID string) string {
	return qualifiedID(originalQueue, messageID)
}

// queueEscaper escapes the bytes that would make a queue ambiguous inside an ID: '/' ends the
// queue, NUL ends it in the hash input, '%' starts an escape.
var queueEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "\x00", "%00")

// QueueNeedsEscape says whether queue holds a byte EscapeQueue changes, that is whether its
// workflow IDs differ from the legacy ones.
func QueueNeedsEscape(queue string) bool {
	return strings.ContainsAny(queue, "%/\x00")
}

// EscapeQueue is queue with '%', '/' and NUL percent-encoded (%25, %2F, %00): injective, and
// free of '/' and NUL.
func EscapeQueue(queue string) string {
	if !QueueNeedsEscape(queue) {
		return queue
	}
	return queueEscaper.Replace(queue)
}

// poisonNoQueueMark stands for "no original queue" before the message id of a poison delivery
// whose id holds a '/': a lone '%' is never an EscapeQueue output, so the key cannot be one of
// a delivery whose original queue is known.
const poisonNoQueueMark = "%"

// PoisonWorkflowID is the workflow a poison or oversize delivery is parked in (see
// message.Poison): under the ingress queue it arrived on, so that it never is the workflow of
// a message that was reported normally (retry/<original queue>/<id>), which may be live.
// Under the ingress queue the key is the message id when the original queue could not be read
// (or is the ingress itself), else <escaped original queue>/<message id> (two services' poison
// for one fanned-out message are two items). A message id with a '/' and no original queue is
// keyed %/<message id>, so no key of one case is a key of the other. Hashed like WorkflowID
// when longer than MaxWorkflowIDLen. The message id is the bridge's: the delivery's when
// usable, else FallbackMessageID.
func PoisonWorkflowID(ingressQueue, originalQueue, messageID string) string {
	return WorkflowID(ingressQueue, poisonKey(ingressQueue, originalQueue, messageID))
}

// poisonKey is the message-id part of PoisonWorkflowID.
func poisonKey(ingressQueue, originalQueue, messageID string) string {
	if originalQueue == "" || originalQueue == ingressQueue {
		if strings.Contains(messageID, "/") {
			return poisonNoQueueMark + "/" + messageID
		}
		return messageID
	}
	return EscapeQueue(originalQueue) + "/" + messageID
}

// MessageIDOf is WorkflowID's inverse for a plain ID: the message id, given the original
// queue. ok is false for a hashed ID (the id is then only in the state) or an ID of another
// queue.
func MessageIDOf(workflowID, originalQueue string) (messageID string, ok bool) {
	return strings.CutPrefix(workflowID, workflowIDPrefix+EscapeQueue(originalQueue)+"/")
}

// LegacyMessageIDOf is MessageIDOf for an ID of LegacyWorkflowID, given the queue the workflow
// itself records (its OriginalQueue): only then is the legacy prefix unambiguous.
func LegacyMessageIDOf(workflowID, originalQueue string) (messageID string, ok bool) {
	return strings.CutPrefix(workflowID, workflowIDPrefix+originalQueue+"/")
}

// FallbackMessageID is the documented id of a message that has no usable id (none, longer
// than MaxMessageIDLen, with control characters or not UTF-8): a hash of its queue and body, so that the same failed
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
	if id == "" || len(id) > MaxMessageIDLen || strings.ContainsAny(id, "\x00\n\r") || !utf8.ValidString(id) {
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
