package message

import (
	"time"

	"github.com/google/uuid"
)

// ErrorDetails is the last failure as one block, in the snake_case shape that dead-letter
// tooling reads: what failed, how often, and when (the timestamps in Unix seconds, as those
// tools expect, and in RFC 3339).
type ErrorDetails struct {
	// ErrorType is the reporter's exception class; without one, the last attempt's error
	// code, else the failure category.
	ErrorType    string `json:"error_type"`
	ErrorMessage string `json:"error_message"`
	StackTrace   string `json:"stack_trace,omitempty"`
	// RetryCount is the retries made before the message was dead-lettered (totalRetries).
	RetryCount            int       `json:"retry_count"`
	FirstAttemptAt        time.Time `json:"first_attempt_at"`
	LastAttemptAt         time.Time `json:"last_attempt_at"`
	FirstAttemptTimestamp int64     `json:"first_attempt_timestamp"`
	LastAttemptTimestamp  int64     `json:"last_attempt_timestamp"`
}

// DLQNamespace is the namespace of the name-based (version 5, SHA-1) UUIDs of dlqIds, so
// that anyone can compute an envelope's dlqUuid from its dlqId. It is itself the version 5
// UUID of the URL https://github.com/retry-scheduler/retry-scheduler/dlqId in the URL
// namespace.
var DLQNamespace = uuid.MustParse("9857f0e7-46a9-5d5a-aa45-312e9278d67d")

// DLQUUID is the UUID form of a dlqId: the same id always gives the same UUID, so a
// redelivered envelope keeps it.
func DLQUUID(dlqID string) string {
	return uuid.NewSHA1(DLQNamespace, []byte(dlqID)).String()
}

// Enriched returns e with the fields derived from what it carries filled in: dlqUuid,
// consumerGroup, originalTimestamp, error_details, metadata.internal_id and the _unix
// timestamps, and the last error (WithLastError). Publishing calls it, so the envelopes the
// workflow builds (and its recorded inputs) need none of it.
func (e Envelope) Enriched() Envelope {
	e = e.WithLastError()
	if e.DLQUUID == "" && e.DLQID != "" {
		e.DLQUUID = DLQUUID(e.DLQID)
	}
	if e.ConsumerGroup == "" && e.ConsumerService != "" {
		e.ConsumerGroup = e.ConsumerService
		if e.OriginalQueue != "" {
			e.ConsumerGroup += "." + e.OriginalQueue
		}
	}
	if e.OriginalTimestamp.IsZero() {
		e.OriginalTimestamp = e.OriginalMessage.Properties.Timestamp
		if e.OriginalTimestamp.IsZero() {
			e.OriginalTimestamp = e.FirstFailureAt
		}
	}
	m := &e.Metadata
	if m.InternalID == "" {
		m.InternalID = e.WorkflowID
		if m.InternalID == "" {
			m.InternalID = e.DLQID
		}
	}
	m.DLQTimestampUnix = unixOrZero(m.DLQTimestamp)
	m.FirstAttemptTimestampUnix = unixOrZero(m.FirstAttemptTimestamp)
	m.LastAttemptTimestampUnix = unixOrZero(m.LastAttemptTimestamp)
	if e.ErrorDetails == nil {
		d := e.errorDetails()
		e.ErrorDetails = &d
	}
	return e
}

// errorDetails is the error_details block of e, whose last error is already filled.
func (e Envelope) errorDetails() ErrorDetails {
	d := ErrorDetails{
		ErrorType:      e.ErrorType,
		ErrorMessage:   e.DeadDetail,
		StackTrace:     e.StackTrace,
		RetryCount:     e.TotalRetries,
		FirstAttemptAt: firstNonZero(e.Metadata.FirstAttemptTimestamp, e.FirstFailureAt),
		LastAttemptAt:  e.Metadata.LastAttemptTimestamp,
	}
	if n := len(e.RetryAttempts); n > 0 {
		last := e.RetryAttempts[n-1]
		if last.Error != "" {
			d.ErrorMessage = last.Error
		}
		if d.ErrorType == "" {
			d.ErrorType = last.ErrorCode
		}
		if d.LastAttemptAt.IsZero() {
			d.LastAttemptAt = last.Timestamp
		}
	}
	if d.ErrorType == "" {
		d.ErrorType = e.FailureCategory
	}
	if d.LastAttemptAt.IsZero() {
		d.LastAttemptAt = d.FirstAttemptAt
	}
	d.FirstAttemptTimestamp = unixOrZero(d.FirstAttemptAt)
	d.LastAttemptTimestamp = unixOrZero(d.LastAttemptAt)
	return d
}

// unixOrZero is t in Unix seconds, 0 for the zero time (not year 1's negative epoch).
func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func firstNonZero(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}
