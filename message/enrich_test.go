package message

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDLQUUIDIsAStableVersion5UUID(t *testing.T) {
	a := DLQUUID("retry:orders/m-1#0")
	u, err := uuid.Parse(a)
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(5), u.Version())
	assert.Equal(t, a, DLQUUID("retry:orders/m-1#0"), "the same dlqId, the same UUID")
	assert.NotEqual(t, a, DLQUUID("retry:orders/m-1#1"), "each dead-lettering has its own")
	// The namespace is documented as derived from a URL: anyone can recompute it.
	assert.Equal(t, uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/retry-scheduler/retry-scheduler/dlqId")), DLQNamespace)
}

func TestEnrichedDerivesTheToolFields(t *testing.T) {
	first, last, dead := time.Unix(1_700_000_000, 0).UTC(), time.Unix(1_700_000_060, 0).UTC(), time.Unix(1_700_000_120, 0).UTC()
	e := Envelope{
		DLQID: "wf-1#0", OriginalQueue: "orders", ConsumerService: "orders-svc", FailureCategory: "transient",
		DeadDetail: "max retries", TotalRetries: 2, FirstFailureAt: first, WorkflowID: "wf-1",
		RetryAttempts: []Attempt{
			{Attempt: 1, Timestamp: first, Error: "timeout", ErrorType: "TimeoutError", StackTrace: "at a"},
			{Attempt: 2, Timestamp: last, Error: "503", ErrorCode: "E503"},
		},
		Metadata: Metadata{DLQTimestamp: dead, FirstAttemptTimestamp: first, LastAttemptTimestamp: last},
	}
	got := e.Enriched()
	assert.Equal(t, DLQUUID("wf-1#0"), got.DLQUUID)
	assert.Equal(t, "orders-svc.orders", got.ConsumerGroup)
	assert.Equal(t, first, got.OriginalTimestamp, "no timestamp property: the first failure")
	assert.Equal(t, "wf-1", got.Metadata.InternalID)
	assert.Equal(t, int64(1_700_000_120), got.Metadata.DLQTimestampUnix)
	assert.Equal(t, int64(1_700_000_000), got.Metadata.FirstAttemptTimestampUnix)
	assert.Equal(t, int64(1_700_000_060), got.Metadata.LastAttemptTimestampUnix)
	assert.Equal(t, &ErrorDetails{
		ErrorType: "TimeoutError", ErrorMessage: "503", StackTrace: "at a", RetryCount: 2,
		FirstAttemptAt: first, LastAttemptAt: last,
		FirstAttemptTimestamp: 1_700_000_000, LastAttemptTimestamp: 1_700_000_060,
	}, got.ErrorDetails, "the last error type found, the last attempt's message")
	assert.Equal(t, got, got.Enriched(), "enriching twice changes nothing")
}

func TestEnrichedFallsBackWhenTheEnvelopeKnowsLess(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := Envelope{
		DLQID: "poison-abc", FailureCategory: "unknown", DeadDetail: "invalid JSON", FirstFailureAt: ts,
		OriginalMessage: Message{Properties: Properties{Timestamp: ts.Add(-time.Minute)}},
		Metadata:        Metadata{DLQTimestamp: ts, FirstAttemptTimestamp: ts},
	}
	got := e.Enriched()
	assert.Empty(t, got.ConsumerGroup, "no consuming service, no group")
	assert.Equal(t, ts.Add(-time.Minute), got.OriginalTimestamp, "the message's own timestamp")
	assert.Equal(t, "poison-abc", got.Metadata.InternalID, "no workflow: the dlqId")
	assert.Zero(t, got.Metadata.LastAttemptTimestampUnix, "a zero time is 0, not year 1")
	d := got.ErrorDetails
	require.NotNil(t, d)
	assert.Equal(t, "unknown", d.ErrorType, "no type nor code: the category")
	assert.Equal(t, "invalid JSON", d.ErrorMessage, "no attempts: the dead detail")
	assert.Equal(t, ts, d.LastAttemptAt, "no last attempt: the first")
	assert.Equal(t, ts.Unix(), d.LastAttemptTimestamp)

	e.ConsumerService = "svc"
	e.OriginalQueue = ""
	assert.Equal(t, "svc", e.Enriched().ConsumerGroup, "no queue: the service alone")
}
