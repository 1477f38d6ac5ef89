package activities

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
)

// A message whose own content cannot go on the wire is refused before the publisher, once
// and for good, with the field named.
func TestRepublishUnpublishableIsNonRetryable(t *testing.T) {
	for name, edit := range map[string]func(m *RepublishInput){
		"correlation id": func(in *RepublishInput) { in.Message.CorrelationID = strings.Repeat("c", 300) },
		"content type":   func(in *RepublishInput) { in.Message.Properties.ContentType = strings.Repeat("t", 256) },
		"header name":    func(in *RepublishInput) { in.Message.Headers = map[string]any{strings.Repeat("h", 256): "v"} },
		"routing key":    func(in *RepublishInput) { in.Message.OriginalRoutingKey = strings.Repeat("k", 256) },
	} {
		t.Run(name, func(t *testing.T) {
			pub := &fakePublisher{}
			acts, reg := newTestActivities(pub)
			in := RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1"}
			edit(&in)
			_, _, err := run(t, acts, acts.Republish, in)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			assert.True(t, appErr.NonRetryable())
			assert.Equal(t, ErrTypeUnpublishable, appErr.Type())
			assert.Contains(t, appErr.Message(), "short-string limit")
			assert.Empty(t, pub.got, "nothing reached the publisher")
			assert.Equal(t, 1.0, metricValue(t, reg, "retries_executed_total", "queue", "orders", "status", StatusUnpublishable))
		})
	}
}

// A broker refusal of the message (its channel closed with 406) is as permanent.
func TestRepublishRefusedIsNonRetryable(t *testing.T) {
	acts, _ := newTestActivities(&fakePublisher{err: fmt.Errorf("publish: %w: 406 PRECONDITION_FAILED - message size exceeds max", broker.ErrRefused)})
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1"})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, ErrTypeUnpublishable, appErr.Type())
	assert.Contains(t, appErr.Message(), "406")
}

func TestDeadLetterRefusedIsNonRetryable(t *testing.T) {
	acts, _ := newTestActivities(&fakePublisher{err: fmt.Errorf("x: %w", broker.ErrRefused)})
	_, _, err := run(t, acts, acts.DeadLetter, DeadLetterInput{Queue: "manual-review.pending", Envelope: testEnvelope()})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, ErrTypeUnpublishable, appErr.Type())
}
