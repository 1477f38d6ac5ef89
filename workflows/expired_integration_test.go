//go:build integration

package workflows_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/reporter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"github.com/retry-scheduler/retry-scheduler/workflows/historytest"
)

// queuePublisher keeps every body published, by routing key (the queue).
type queuePublisher struct {
	mu     sync.Mutex
	bodies map[string][][]byte
}

func (p *queuePublisher) Publish(_ context.Context, _, key string, _ bool, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bodies == nil {
		p.bodies = map[string][][]byte{}
	}
	p.bodies[key] = append(p.bodies[key], msg.Body)
	return nil
}

func (p *queuePublisher) to(queue string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.bodies[queue]...)
}

// A dead message nobody decides on expires at the end of its retention, on a real server,
// and its envelope goes to the archive queue, under the dlqId it was dead-lettered with.
// With RECORD_HISTORIES set, the run's history is written there for the replay tests.
func TestExpiredDeadLetterIsArchivedOnADevServer(t *testing.T) {
	srv := devserver.StartForTest(t)
	c := srv.DialForTest(t)

	taskQueue := devserver.UniqueName("expired")
	pub := &queuePublisher{}
	acts := &activities.Activities{Publisher: pub, ExpiredArchiveQueue: "archive",
		Logger: discardLogger()}
	defer startWorker(t, c, taskQueue, acts)()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := message.WorkflowID("orders", taskQueue)
	reports := &reporter.Reporter{Client: c, TaskQueue: taskQueue, Retention: 2 * time.Second}
	require.NoError(t, reports.Report(ctx, message.FailureReport{
		Message:         message.Message{MessageID: taskQueue, Payload: []byte("x"), OriginalQueue: "orders"},
		Failure:         policy.Failure{Category: "transient", Reason: "503"},
		Policy:          policy.Policy{Name: "none", MaxRetries: 0, Jitter: policy.Jitter{Mode: policy.NoJitter}},
		DeadLetterQueue: "dead",
	}))

	var res workflows.Result
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &res))
	require.Equal(t, workflows.StatusExpired, res.Status)

	dead, archived := pub.to("dead"), pub.to("archive")
	require.Len(t, dead, 1)
	require.Len(t, archived, 1, "the expired message's envelope is archived")
	var d, a message.Envelope
	require.NoError(t, json.Unmarshal(dead[0], &d))
	require.NoError(t, json.Unmarshal(archived[0], &a))
	require.Equal(t, d.DLQID, a.DLQID, "archived under the dlqId it was dead-lettered with")
	require.Equal(t, d.RoutedToDlqAt, a.RoutedToDlqAt)
	require.Equal(t, policy.CauseExhausted, a.DeadReason)

	_, err := historytest.Record(ctx, c, id, "dead-expired-archived")
	require.NoError(t, err)
}
