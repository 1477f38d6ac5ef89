package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

func TestDeadLetterExpiresWithTheRetentionAndCarriesTheLastError(t *testing.T) {
	pub := &fakePublisher{}
	acts, _ := newTestActivities(pub)
	acts.DeadLetterTTL = 720 * time.Hour
	acts.ServiceName = "retry-scheduler"
	env := testEnvelope()
	env.RetryAttempts[0].ErrorType, env.RetryAttempts[0].StackTrace = "TimeoutError", "at a"
	env.RetryAttempts[1].ErrorType = "HttpError"
	_, _, err := run(t, acts, acts.DeadLetter, DeadLetterInput{Queue: "billing.dead", Envelope: env})
	require.NoError(t, err)

	require.Len(t, pub.got, 1)
	p := pub.got[0].msg
	assert.Equal(t, "2592000000", p.Expiration, "30 days in milliseconds")
	assert.Equal(t, "retry-scheduler", p.AppId)
	var got message.Envelope
	require.NoError(t, json.Unmarshal(p.Body, &got))
	assert.Equal(t, "HttpError", got.ErrorType, "the last attempt's")
	assert.Empty(t, got.StackTrace, "taken together with its type, not mixed from another attempt")
	assert.Equal(t, "TimeoutError", got.RetryAttempts[0].ErrorType)
	assert.Equal(t, "at a", got.RetryAttempts[0].StackTrace)
}

func TestDeadLetterPublishFailuresAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	acts := &Activities{Publisher: &fakePublisher{err: errors.New("nack")}, Metrics: NewMetrics(reg)}
	require.Error(t, acts.DeadLetter(context.Background(), DeadLetterInput{Queue: "billing.dead", Envelope: testEnvelope()}))
	acts.Publisher = &fakePublisher{err: broker.ErrUnroutable}
	require.Error(t, acts.DeadLetter(context.Background(), DeadLetterInput{Queue: "billing.dead", Envelope: testEnvelope()}))
	assert.Equal(t, 2.0, metricValue(t, reg, broker.DeadLetterPublishFailuresName, "queue", "billing.dead"))
	assert.Equal(t, 0.0, metricValue(t, reg, "dead_letters_total"))

	// The bridge registers the same collector on a shared registry.
	assert.Same(t, acts.Metrics.DeadLetterPublishFailures, broker.DeadLetterPublishFailures(reg))
}

func TestLogLinesCarryCorrelationIDAndLatenessInMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	acts, _ := newTestActivities(&fakePublisher{})
	// Info: a confirmed republish and a published dead letter are per-message events (debug;
	// the workflow logs the dead letter), so nothing.
	acts.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	_, err := acts.Republish(context.Background(), RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1"})
	require.NoError(t, err)
	require.NoError(t, acts.DeadLetter(context.Background(), DeadLetterInput{Queue: "q", Envelope: testEnvelope()}))
	assert.Empty(t, buf.String(), "per-message events at info")

	acts.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, err = acts.Republish(context.Background(), RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1",
		ScheduledAt: testNow.Add(-1500 * time.Millisecond)})
	require.NoError(t, err)
	acts.Publisher = &fakePublisher{err: errors.New("nack")}
	require.Error(t, acts.DeadLetter(context.Background(), DeadLetterInput{Queue: "q", Envelope: testEnvelope()}))
	acts.Publisher = &fakePublisher{}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], `"lateness_ms":1500`)
	assert.Contains(t, lines[0], `"level":"DEBUG"`)
	assert.NotContains(t, lines[0], `"lateness":`)
	assert.Contains(t, lines[1], `envelope not dead-lettered`)
	for _, l := range lines {
		assert.Contains(t, l, `"correlation_id":"corr-1"`)
		assert.Contains(t, l, `"message_id":"m-1"`)
	}

	buf.Reset()
	m := testMessage()
	m.CorrelationID = ""
	_, err = acts.Republish(context.Background(), RepublishInput{Message: m, Attempt: 1, Key: "m-1:1"})
	require.NoError(t, err)
	assert.NotContains(t, buf.String(), "correlation_id")
}

// An expired envelope goes to the archive queue without expiration, and is not counted as a
// dead letter; without an archive queue nothing is published.
func TestArchiveExpired(t *testing.T) {
	pub := &fakePublisher{}
	acts, reg := newTestActivities(pub)
	acts.DeadLetterTTL = 720 * time.Hour
	res, err := acts.ArchiveExpired(context.Background(), ArchiveExpiredInput{Envelope: testEnvelope()})
	require.NoError(t, err)
	assert.Empty(t, res.Queue)
	assert.Empty(t, pub.got, "archiving is off")

	acts.ExpiredArchiveQueue = "dead.archive"
	res, err = acts.ArchiveExpired(context.Background(), ArchiveExpiredInput{Envelope: testEnvelope()})
	require.NoError(t, err)
	assert.Equal(t, "dead.archive", res.Queue)
	require.Len(t, pub.got, 1)
	assert.Equal(t, "dead.archive", pub.got[0].key)
	assert.Empty(t, pub.got[0].msg.Expiration, "the archive is the last copy")
	var got message.Envelope
	require.NoError(t, json.Unmarshal(pub.got[0].msg.Body, &got))
	assert.Equal(t, testEnvelope().DLQID, got.DLQID)
	assert.Zero(t, metricValue(t, reg, "dead_letters_total", "queue", "dead.archive", "reason", "exhausted"))

	// An archive queue that is missing fails for good, not after retries.
	acts.Publisher = &fakePublisher{err: broker.ErrUnroutable}
	_, _, err = run(t, acts, acts.ArchiveExpired, ArchiveExpiredInput{Envelope: testEnvelope()})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.Equal(t, ErrTypeUnroutable, appErr.Type())
	assert.True(t, appErr.NonRetryable())
}
