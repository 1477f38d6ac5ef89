//go:build integration

package e2e

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"retry-scheduler/message"
	"retry-scheduler/workflows"
)

// naiveConsumer fails every delivery of queue and reports it as a consumer that never reads
// the scheduler's headers does: retry_count 0 and no retry_key, every time.
func (s *stack) naiveConsumer(queue string) (*consumer, func() error) {
	return s.failingConsumer(queue, func(d amqp.Delivery, _ int, _ string) message.RetryMessage {
		return naiveReport(d.MessageId, queue)
	})
}

func naiveReport(id, queue string) message.RetryMessage {
	return message.RetryMessage{MessageID: id, OriginalPayload: []byte("naive"), OriginalQueue: queue,
		ErrorReason: "503 from payments", HTTPStatus: 503}
}

// Recording of the old path only: the naive report of retry 1 is dropped as stale.
func TestNaiveConsumerBeforeFix(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c, reportErr := s.naiveConsumer(orders)

	s.publishRetry(naiveReport("naive-1", orders))
	id := message.WorkflowID(orders, "naive-1")
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, 60*time.Second).Status)
	require.NoError(t, reportErr())
	require.Len(t, c.all(), 1)
	s.recordHistory(id, "naive-report-dropped-before-fix")
}
