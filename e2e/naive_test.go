//go:build integration

package e2e

import (
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
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

// A consumer that never copies x-retry-count or x-retry-key reports retry_count 0 after every
// republish: each report counts as the failure of the latest retry, so the message goes
// through the policy's retries to the dead-letter queue, never to delivered. A report for it
// after that is set aside, counted by the metric and shown on its item. (The old path, where
// the naive report was dropped and the run ended delivered, is the recorded history
// naive-report-dropped-before-fix.)
func TestNaiveConsumerEndsDeadLettered(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	orders := s.queue(s.prefix+".orders", nil)
	c, reportErr := s.naiveConsumer(orders)
	dead := s.consume(s.dlq, nil)
	metricsURL := "http://" + s.cfg.HTTPAddr + "/metrics"

	s.publishRetry(naiveReport("naive-1", orders))
	env := envelopeOf(t, dead.next(t, patience))
	id := message.WorkflowID(orders, "naive-1")
	s.recordHistory(id, "naive-report-counted")
	require.NoError(t, reportErr())

	require.Len(t, c.all(), 3, "republished max_retries times")
	require.Equal(t, "exhausted", env.DeadReason)
	require.Equal(t, 3, env.TotalRetries)
	require.Len(t, env.RetryAttempts, 4)
	for i, a := range env.RetryAttempts {
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, "503 from payments", a.Error)
	}
	st, err := s.state(id)
	require.NoError(t, err)
	require.Equal(t, workflows.StatusDead, st.Status)
	require.Zero(t, st.DuplicateReports, "no naive report was set aside")

	// One more report for the dead message: set aside, never silent.
	before := mustScrape(t, metricsURL)
	s.publishRetry(naiveReport("naive-1", orders))
	eventually(t, patience, func() error {
		st, err = s.state(id)
		if err != nil {
			return err
		}
		if st.SetAside[workflows.SetAsideDead] != 1 {
			return fmt.Errorf("set aside %v", st.SetAside)
		}
		return nil
	})
	require.Equal(t, 1, st.DuplicateReports)
	require.Equal(t, workflows.SetAsideDead, st.LastSetAside.Reason)
	key := series("reports_set_aside_total", "queue", orders, "reason", workflows.SetAsideDead)
	waitMovedBy(t, metricsURL, before, key, 1)
	item := api.must(200, viewerToken, "GET", msgPath(id), nil)
	state := item["state"].(map[string]any)
	require.EqualValues(t, 1, state["duplicate_reports"])
	require.Equal(t, map[string]any{workflows.SetAsideDead: 1.0}, state["set_aside"])
	require.Equal(t, workflows.SetAsideDead, state["last_set_aside"].(map[string]any)["reason"])
	dead.caughtUp(t)
	require.Len(t, dead.all(), 1, "one dead letter")
}

// The ops page's details of an item show the reports it set aside.
func TestOpsPageShowsReportsSetAside(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	id := s.dead(q, "", "aside-1")[0]
	s.waitQueriedStatus(t, id, workflows.StatusDead, patience)
	s.publishRetry(message.RetryMessage{MessageID: "aside-1", OriginalPayload: []byte("p"), OriginalQueue: q,
		ErrorReason: "still failing"})
	eventually(t, patience, func() error {
		st, err := s.state(id)
		if err != nil {
			return err
		}
		if st.DuplicateReports != 1 {
			return fmt.Errorf("%d set aside", st.DuplicateReports)
		}
		return nil
	})

	p.signIn(api.base, viewerToken, "#app")
	p.until("dead letter "+id, rowExpr("#dl-table", id))
	p.clickNow("details of "+id, rowSel("#dl-table", id)+` td.actions button:nth-child(1)`)
	p.until("the details dialog", `document.querySelector("#detail").open`)
	summary := p.text("#detail-summary")
	require.Contains(t, summary, "Reports set aside")
	require.Contains(t, summary, "1 (dead 1); latest")
	require.Contains(t, summary, "still failing")
}
