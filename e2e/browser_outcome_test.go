//go:build integration

package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// On the default policy a retried message is delivered only once its 30 s quiet window has
// passed, longer than the page's own wait for the call: the page follows the message past it,
// so "Retry now" on a dead letter whose consumer then takes it shows "Retry successful"
// without a reload.
func TestOpsBrowserFollowsARetryToItsOutcomeOnTheDefaultPolicy(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	c := s.consume(q, nil)
	p.acceptDialogs()

	s.publishRetry(message.RetryMessage{MessageID: "d1", OriginalPayload: []byte("p-d1"), OriginalQueue: q,
		ErrorReason: "schema mismatch", ErrorCategory: "permanent", Policy: "default"})
	id := message.WorkflowID(q, "d1")
	s.waitRetryStatus(id, workflows.StatusDead, 2*time.Minute)
	st, err := s.state(id)
	require.NoError(t, err)
	require.Equal(t, "default", st.Policy.Name)
	require.Greater(t, st.Policy.QuietWindow, 20*time.Second, "the default policy's quiet window outlasts the page's 20 s wait")

	p.signIn(api.base, opToken, "#dl-table")
	p.until("dead letter "+id, rowExpr("#dl-table", id))
	p.clickNow("retry now of "+id, rowSel("#dl-table", id)+` td.actions button:nth-child(2)`)
	d := c.next(t, 2*time.Minute)
	assert.Equal(t, "p-d1", string(d.Body), "the message came back to its queue")
	p.untilWithin("the retry's outcome", `document.querySelector("#progress").textContent.includes("Retry successful")`,
		st.Policy.QuietWindow+3*time.Minute)
	assert.Equal(t, "Retried "+id+": Retry successful.", p.text("#progress"))
	s.waitRetryStatus(id, workflows.StatusDelivered, time.Minute)
}
