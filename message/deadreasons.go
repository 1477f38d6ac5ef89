package message

import "github.com/retry-scheduler/retry-scheduler/internal/policy"

// Dead reasons besides the policy's causes (policy.Cause*) and the poison kinds: why a
// workflow sent a message to dead on its own account.
const (
	// DeadReasonSkipped: an operator skipped the message's retries.
	DeadReasonSkipped = "skipped"
	// DeadReasonUnroutable: the broker returned the republish (no queue bound).
	DeadReasonUnroutable = "unroutable"
	// DeadReasonUnpublishable: the broker refused the republish for its content.
	DeadReasonUnpublishable = "unpublishable"
	// DeadReasonRepublishFailed: the republish failed past its retries.
	DeadReasonRepublishFailed = "republish-failed"
)

// DeadReasons is every value an envelope's deadReason can take, the one list that the
// envelope's JSON Schema (docs/envelope.schema.json) is tested against.
var DeadReasons = []string{
	policy.CauseExhausted, policy.CauseNonRetryable, policy.CauseMaxWindow, policy.CauseManual,
	DeadReasonSkipped, DeadReasonUnroutable, DeadReasonUnpublishable, DeadReasonRepublishFailed,
	PoisonKindPoison, PoisonKindOversize,
}
