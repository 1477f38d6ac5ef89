package message

import "time"

// Attempt is one failure of the message, as the dead-letter envelope and the state query show it.
type Attempt struct {
	// Attempt is the retry count the failure was reported with plus one: 1 is the first failure.
	Attempt    int       `json:"attempt"`
	Timestamp  time.Time `json:"timestamp"`
	Error      string    `json:"error"`
	ErrorCode  string    `json:"errorCode,omitempty"`
	HTTPStatus int       `json:"httpStatus,omitempty"`
	Category   string    `json:"category"`
	// RepublishedAt is when the retry that answered this failure was confirmed by the broker; zero if none was.
	RepublishedAt time.Time `json:"republishedAt,omitzero"`
	// RetryKey is the x-retry-key of that retry.
	RetryKey string `json:"retryKey,omitempty"`
}

// Envelope is the dead-letter message (seed 004's envelope plus seed 001's metadata).
type Envelope struct {
	DLQID              string `json:"dlqId"`
	MessageID          string `json:"messageId"`
	OriginalQueue      string `json:"originalQueue"`
	OriginalExchange   string `json:"originalExchange,omitempty"`
	OriginalRoutingKey string `json:"originalRoutingKey,omitempty"`
	ConsumerService    string `json:"consumerService,omitempty"`
	FailureCategory    string `json:"failureCategory"`
	// DeadReason says why retrying stopped: exhausted, non-retryable, max-window, manual, skipped, poison, oversize.
	DeadReason     string    `json:"deadReason"`
	DeadDetail     string    `json:"deadDetail,omitempty"`
	Policy         string    `json:"policy,omitempty"`
	RetryAttempts  []Attempt `json:"retryAttempts"`
	TotalRetries   int       `json:"totalRetries"`
	FirstFailureAt time.Time `json:"firstFailureAt"`
	RoutedToDlqAt  time.Time `json:"routedToDlqAt"`
	CorrelationID  string    `json:"correlationId,omitempty"`
	WorkflowID     string    `json:"workflowId,omitempty"`
	RunID          string    `json:"runId,omitempty"`
	// OriginalMessage is the message as it was received; for poison input, the raw delivery.
	OriginalMessage Message  `json:"originalMessage"`
	Metadata        Metadata `json:"metadata"`
}

// Metadata is seed 001's service metadata block.
type Metadata struct {
	TenantID              string    `json:"tenant_id,omitempty"`
	DLQTimestamp          time.Time `json:"dlq_timestamp"`
	Service               string    `json:"service"`
	ServiceVersion        string    `json:"service_version,omitempty"`
	FirstAttemptTimestamp time.Time `json:"first_attempt_timestamp"`
	LastAttemptTimestamp  time.Time `json:"last_attempt_timestamp"`
}
