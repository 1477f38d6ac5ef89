package message

import (
	"time"
	"unicode/utf8"
)

// Attempt is one failure of the message, as the dead-letter envelope and the state query show it.
type Attempt struct {
	// Attempt is the retry count the failure was reported with plus one: 1 is the first failure.
	Attempt    int       `json:"attempt"`
	Timestamp  time.Time `json:"timestamp"`
	Error      string    `json:"error"`
	ErrorCode  string    `json:"errorCode,omitempty"`
	HTTPStatus int       `json:"httpStatus,omitempty"`
	Category   string    `json:"category"`
	// ErrorType is the reporter's exception class, when the report named one.
	ErrorType string `json:"errorType,omitempty"`
	// StackTrace is the reporter's stack trace, at most MaxStackTraceBytes, when the report had one.
	StackTrace string `json:"stackTrace,omitempty"`
	// RepublishedAt is when the retry that answered this failure was confirmed by the broker; zero if none was.
	RepublishedAt time.Time `json:"republishedAt,omitzero"`
	// RetryKey is the x-retry-key of that retry.
	RetryKey string `json:"retryKey,omitempty"`
}

// Envelope is the dead-letter message: the message as received, why retrying stopped, every
// attempt, and the reporting service's metadata block.
type Envelope struct {
	DLQID string `json:"dlqId"`
	// DLQUUID is dlqId as a UUID (see DLQUUID), for tools that key dead letters by UUID.
	// It and the other fields filled by Enriched are set at publish time only.
	DLQUUID            string `json:"dlqUuid,omitempty"`
	MessageID          string `json:"messageId"`
	OriginalQueue      string `json:"originalQueue"`
	OriginalExchange   string `json:"originalExchange,omitempty"`
	OriginalRoutingKey string `json:"originalRoutingKey,omitempty"`
	ConsumerService    string `json:"consumerService,omitempty"`
	// ConsumerGroup is "<consumerService>.<originalQueue>": the consumers of one queue
	// are one group. Omitted when the consuming service is unknown.
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	// OriginalTimestamp is the original message's timestamp property, or when its first
	// failure was reported if it had none.
	OriginalTimestamp time.Time `json:"originalTimestamp,omitzero"`
	FailureCategory   string    `json:"failureCategory"`
	// DeadReason says why retrying stopped: exhausted, non-retryable, max-window, manual, skipped, poison, oversize.
	DeadReason     string    `json:"deadReason"`
	DeadDetail     string    `json:"deadDetail,omitempty"`
	Policy         string    `json:"policy,omitempty"`
	RetryAttempts  []Attempt `json:"retryAttempts"`
	TotalRetries   int       `json:"totalRetries"`
	FirstFailureAt time.Time `json:"firstFailureAt"`
	RoutedToDlqAt  time.Time `json:"routedToDlqAt"`
	CorrelationID  string    `json:"correlationId,omitempty"`
	// ErrorType and StackTrace are the last failure's error details: the last
	// attempt's that has them, filled by WithLastError.
	ErrorType  string `json:"errorType,omitempty"`
	StackTrace string `json:"stackTrace,omitempty"`
	WorkflowID string `json:"workflowId,omitempty"`
	RunID      string `json:"runId,omitempty"`
	// OriginalMessage is the message as it was received; for poison input, the raw delivery.
	// Its payload is null when PayloadRef is set.
	OriginalMessage Message `json:"originalMessage"`
	// PayloadRef, when set, says the payload was too large to carry inside the envelope and
	// travels as a message of its own (see PayloadRef).
	PayloadRef *PayloadRef `json:"payloadRef,omitempty"`
	// ErrorDetails is the last failure in one block (see ErrorDetails).
	ErrorDetails *ErrorDetails `json:"error_details,omitempty"`
	Metadata     Metadata      `json:"metadata"`
}

// PayloadRef stands for a payload kept outside its dead-letter envelope, which would
// otherwise exceed the size a broker accepts: the raw bytes are a message of their own on
// Queue, with message id MessageID and the envelope's dlqId in its x-dlq-id header.
type PayloadRef struct {
	// Size is the payload's length in bytes and SHA256 its digest, hex-encoded.
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	// Queue and MessageID are where to fetch the payload message.
	Queue     string `json:"queue"`
	MessageID string `json:"messageId"`
}

// Metadata is the envelope's service metadata block: who reported the failures, and when the
// first and last attempts and the dead-lettering happened.
type Metadata struct {
	TenantID string `json:"tenant_id,omitempty"`
	// Producer is the AMQP user-id the failure was reported with (RabbitMQ validated it),
	// when the report carried one.
	Producer              string    `json:"producer,omitempty"`
	DLQTimestamp          time.Time `json:"dlq_timestamp"`
	Service               string    `json:"service"`
	ServiceVersion        string    `json:"service_version,omitempty"`
	FirstAttemptTimestamp time.Time `json:"first_attempt_timestamp"`
	LastAttemptTimestamp  time.Time `json:"last_attempt_timestamp"`
	// InternalID is the scheduler's own id of the dead item: the workflow ID, or the dlqId
	// of an envelope written without one (a poison delivery's).
	InternalID string `json:"internal_id,omitempty"`
	// The _unix fields are the timestamps above in Unix seconds, for tools that read epochs.
	DLQTimestampUnix          int64 `json:"dlq_timestamp_unix,omitempty"`
	FirstAttemptTimestampUnix int64 `json:"first_attempt_timestamp_unix,omitempty"`
	LastAttemptTimestampUnix  int64 `json:"last_attempt_timestamp_unix,omitempty"`
}

// MaxStackTraceBytes bounds a stack trace carried in reports, workflow state and envelopes:
// enough for the frames that matter, small next to Temporal's payload limit.
const MaxStackTraceBytes = 8 << 10

// MaxErrorTypeBytes bounds an error type (an exception class name).
const MaxErrorTypeBytes = 255

// WithLastError returns e with ErrorType and StackTrace taken from its most recent attempt
// that has either, unless e has them already.
func (e Envelope) WithLastError() Envelope {
	if e.ErrorType != "" || e.StackTrace != "" {
		return e
	}
	for i := len(e.RetryAttempts) - 1; i >= 0; i-- {
		if a := e.RetryAttempts[i]; a.ErrorType != "" || a.StackTrace != "" {
			e.ErrorType, e.StackTrace = a.ErrorType, a.StackTrace
			break
		}
	}
	return e
}

// Truncate cuts s to at most n bytes on a UTF-8 boundary, marking a cut with "…" (within n).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	if n < len(mark) {
		return cutAt(s, n)
	}
	return cutAt(s, n-len(mark)) + mark
}

// cutAt is s cut to at most n bytes on a UTF-8 boundary; n < len(s).
func cutAt(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
