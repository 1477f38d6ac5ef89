//go:build integration

package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// ("q/eu", "42") and ("q", "eu/42") read the same joined by a slash: each is its own
// workflow and comes back to its own queue.
func TestQueueAndIDWithSlashesAreTwoMessages(t *testing.T) {
	s := newStack(t)
	s.run("all")
	base := s.queue(s.prefix+".ids", nil)
	slashed := s.queue(base+"/eu", nil)
	cBase, cSlashed := s.consume(base, nil), s.consume(slashed, nil)

	s.publishRetry(message.RetryMessage{MessageID: "42", OriginalPayload: []byte("slashed queue"), OriginalQueue: slashed,
		ErrorReason: "503", HTTPStatus: 503, Policy: "e2e-fast"})
	s.publishRetry(message.RetryMessage{MessageID: "eu/42", OriginalPayload: []byte("slashed id"), OriginalQueue: base,
		ErrorReason: "503", HTTPStatus: 503, Policy: "e2e-fast"})

	d := cSlashed.next(t, patience)
	assert.Equal(t, "42", d.MessageId)
	assert.Equal(t, []byte("slashed queue"), d.Body)
	d = cBase.next(t, patience)
	assert.Equal(t, "eu/42", d.MessageId)
	assert.Equal(t, []byte("slashed id"), d.Body)

	a, b := message.WorkflowID(slashed, "42"), message.WorkflowID(base, "eu/42")
	require.NotEqual(t, a, b)
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(a, patience).Status)
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(b, patience).Status)
	for id, q := range map[string]string{a: slashed, b: base} {
		st, err := s.state(id)
		require.NoError(t, err)
		assert.Equal(t, q, st.Message.OriginalQueue, id)
	}
	cSlashed.caughtUp(t)
	cBase.caughtUp(t)
	assert.Len(t, cSlashed.all(), 1)
	assert.Len(t, cBase.all(), 1)
}

// A run started under the legacy ID of a queue holding '/' (by the release before the escape)
// keeps the reports of its message: no second workflow under the new ID.
func TestReportFindsTheLegacyWorkflowOfItsQueue(t *testing.T) {
	s := newStack(t)
	queue := s.queue(s.prefix+".legacy/eu", nil)
	c := s.consume(queue, nil)
	legacy, current := message.LegacyWorkflowID(queue, "7"), message.WorkflowID(queue, "7")
	require.NotEqual(t, legacy, current)

	// What the earlier release's reporter did: signal-with-start under the raw queue.
	pol := policy.Default(3, 6*time.Second, 6*time.Second)
	pol.QuietWindow = 2 * time.Second
	rep := message.FailureReport{
		Message: message.Message{MessageID: "7", OriginalQueue: queue, Payload: []byte("live")},
		Failure: policy.Failure{Reason: "503"}, Policy: pol,
		DeadLetterQueue: s.dlq, ReportedAt: time.Now(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.tc.SignalWithStartWorkflow(ctx, legacy, workflows.SignalFailureReport, rep,
		client.StartWorkflowOptions{ID: legacy, TaskQueue: s.prefix}, workflows.RetryWorkflowName,
		workflows.Input{Revision: workflows.CurrentRevision})
	require.NoError(t, err)
	s.run("all")
	// The run's first task sets its OriginalQueue, which the look-up checks.
	s.waitRetryStatus(legacy, workflows.StatusScheduled, patience)

	// A redelivered report of the same message, through the ingress.
	s.publishRetry(message.RetryMessage{MessageID: "7", OriginalPayload: []byte("live"), OriginalQueue: queue,
		ErrorReason: "503", HTTPStatus: 503})
	eventually(t, patience, func() error {
		st, err := s.state(legacy)
		if err != nil {
			return err
		}
		if st.DuplicateReports == 0 {
			return errors.New("the legacy run has not seen the report")
		}
		return nil
	})
	_, err = s.tc.DescribeWorkflow(ctx, current, "")
	var notFound *serviceerror.NotFound
	require.ErrorAs(t, err, &notFound, "no second workflow under the new ID")

	d := c.next(t, patience)
	assert.Equal(t, "7", d.MessageId)
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(legacy, patience).Status)
	c.caughtUp(t)
	assert.Len(t, c.all(), 1, "one republish for the message")
}
