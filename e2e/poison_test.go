//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Issue 11 item 4: a poison or oversize delivery is dead-lettered (the envelope, with the full
// bytes) and parked as a dead RetryWorkflow, so that the ops API and the temporal CLI list it
// and operators resolve, discard or retry it like any dead message.
func TestPoisonAndOversizeAreParkedAndOperable(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	dlq := s.consume(s.dlq, nil)

	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "text/plain", MessageId: "bad-1", Body: []byte("not json at all")})
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "text/plain", MessageId: "bad-2", Body: []byte("junk to discard")})
	big := bytes.Repeat([]byte("a"), 70000) // over the stack's 65536-byte limit
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "big-1", Body: big})

	bad1, bad2, big1 := message.WorkflowID(s.ingress, "bad-1"), message.WorkflowID(s.ingress, "bad-2"), message.WorkflowID(s.ingress, "big-1")
	envs := map[string]message.Envelope{}
	for i := 0; i < 3; i++ {
		e := envelopeOf(t, dlq.next(t, patience))
		envs[e.WorkflowID] = e
	}
	require.Len(t, envs, 3, "each envelope names its parked workflow")
	require.Len(t, envs[big1].OriginalMessage.Payload, 70000, "the envelope keeps every byte")
	require.Equal(t, "oversize", envs[big1].DeadReason)

	// Listed by the API as dead letters, with their reason.
	deadPath := "/api/dead-letters?queue=" + url.QueryEscape(s.ingress)
	out := api.waitTotal(viewerToken, deadPath, 3)
	reasons := map[string]string{}
	for _, it := range out["items"].([]any) {
		row := it.(map[string]any)
		assert.Equal(t, "dead", row["status"])
		reasons[row["id"].(string)], _ = row["dead_reason"].(string)
	}
	assert.Equal(t, map[string]string{bad1: "poison", bad2: "poison", big1: "oversize"}, reasons)

	// And by the temporal CLI, by their search attributes.
	listed := s.cliList(fmt.Sprintf("RetryStatus='dead' AND TaskQueue='%s'", s.prefix))
	for _, id := range []string{bad1, bad2, big1} {
		assert.Contains(t, listed, id)
	}

	// The parked state: the bytes (at most 64 KiB) and the decode error.
	st := api.must(200, viewerToken, "GET", msgPath(big1), nil)["state"].(map[string]any)
	p := st["poison"].(map[string]any)
	assert.Equal(t, true, p["truncated"])
	assert.EqualValues(t, 70000, p["size"])
	assert.Equal(t, envs[big1].DLQID, p["dlq_id"])
	assert.Contains(t, st["dead_detail"], "65536")
	st1 := api.must(200, viewerToken, "GET", msgPath(bad1), nil)["state"].(map[string]any)
	assert.Equal(t, "poison", st1["dead_reason"])
	assert.Equal(t, s.ingress, st1["poison"].(map[string]any)["ingress_queue"])

	// A truncated body cannot be retried from here: refused with the reason, still dead.
	code, refusal := api.call(opToken, "POST", msgPath(big1)+"/retry", map[string]any{"reason": "producer fixed"})
	assert.Equal(t, 409, code, "%v", refusal)
	assert.Contains(t, refusal["error"], "replay the envelope")

	// Resolve and discard work as on any dead message.
	res := api.must(200, opToken, "POST", msgPath(bad1)+"/resolve", map[string]any{"reason": "told the producer"})
	assert.Equal(t, "resolved", res["state"].(map[string]any)["status"])
	res = api.must(200, opToken, "DELETE", "/api/dead-letters/"+url.PathEscape(bad2), map[string]any{"reason": "junk"})
	assert.Equal(t, "discarded", res["state"].(map[string]any)["status"])
	res = api.must(200, opToken, "POST", msgPath(big1)+"/discard", map[string]any{"reason": "replayed from the queue"})
	assert.Equal(t, "discarded", res["state"].(map[string]any)["status"])
	assert.Equal(t, workflows.StatusResolved, s.workflowResult(bad1, patience).Status)
	assert.Equal(t, workflows.StatusDiscarded, s.workflowResult(big1, patience).Status)
	api.waitTotal(viewerToken, deadPath, 0)
	s.recordHistory(big1, "oversize-parked-retry-refused-discarded")
}

// An operator's retry of a parked poison message republishes its raw bytes to the ingress
// queue; the producer is not fixed, so the bridge finds them poison again: a new envelope,
// and the message is dead again as poison.
func TestPoisonRetryComesBackAsPoison(t *testing.T) {
	s := newStack(t)
	api := s.runWithOps()
	dlq := s.consume(s.dlq, nil)

	body := []byte(`{"message_id":"bad-3","original_payload":"!!"}`)
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "application/json", MessageId: "bad-3", Body: body})
	first := envelopeOf(t, dlq.next(t, patience))
	id := first.WorkflowID
	require.NotEmpty(t, id)
	deadPath := "/api/dead-letters?queue=" + url.QueryEscape(s.ingress)
	out := api.waitTotal(viewerToken, deadPath, 1)
	require.Equal(t, []string{id}, itemIDs(out))
	assert.Equal(t, "poison", out["items"].([]any)[0].(map[string]any)["dead_reason"])

	res := api.must(200, opToken, "POST", msgPath(id)+"/retry", map[string]any{"reason": "producer fixed"})
	assert.NotEqual(t, "dead", res["state"].(map[string]any)["status"])

	// The republished bytes, decoded again: poison again.
	again := envelopeOf(t, dlq.next(t, patience))
	assert.Equal(t, id, again.WorkflowID)
	assert.Equal(t, "poison", again.DeadReason)
	assert.Equal(t, body, again.OriginalMessage.Payload, "the same bytes came back")

	var st workflows.State
	eventually(t, patience, func() error {
		var err error
		if st, err = s.state(id); err != nil {
			return err
		}
		if st.Status != workflows.StatusDead || st.Resets != 1 {
			return fmt.Errorf("status %s, resets %d", st.Status, st.Resets)
		}
		return nil
	})
	assert.Equal(t, "poison", st.DeadReason)
	assert.Len(t, st.Attempts, 2, "the first poison and the retry that came back")
	assert.Equal(t, body, st.Message.Payload)
	out = api.waitTotal(viewerToken, deadPath, 1)
	assert.Equal(t, "poison", out["items"].([]any)[0].(map[string]any)["dead_reason"])

	api.must(200, opToken, "POST", msgPath(id)+"/resolve", map[string]any{"reason": "producer to fix"})
	assert.Equal(t, workflows.StatusResolved, s.workflowResult(id, patience).Status)
	s.recordHistory(id, "poison-parked-retried-poison-again")
}

// With Temporal down, a poison delivery's envelope is published, but the delivery is held
// (not acked) until its parked workflow can be started; after the restart it is parked, and
// its envelope is not published a second time.
func TestPoisonWhileTemporalIsDownIsHeldThenParked(t *testing.T) {
	srv := devserver.StartOwnedForTest(t)
	s := newStackOn(t, srv)
	s.run("all")
	dlq := s.consume(s.dlq, nil)

	require.NoError(t, srv.Kill())
	s.publishRaw(s.ingress, amqp.Publishing{ContentType: "text/plain", MessageId: "bad-down", Body: []byte("not json")})
	env := envelopeOf(t, dlq.next(t, patience))
	id := message.WorkflowID(s.ingress, "bad-down")
	require.Equal(t, id, env.WorkflowID)
	// The bridge holds the delivery (bridge_deliveries_total{outcome="held"}) and probes.
	eventually(t, patience, func() error {
		m, err := scrape("http://" + s.cfg.HTTPAddr + "/metrics")
		if err != nil {
			return err
		}
		if held := m.value(series("bridge_deliveries_total", "outcome", "held")); held < 1 {
			return fmt.Errorf("the bridge has held no delivery yet (held %v)", held)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, srv.Restart(ctx))
	eventually(t, patience, func() error {
		st, err := s.state(id)
		if err != nil {
			return err
		}
		if st.Status != workflows.StatusDead || st.DeadReason != "poison" {
			return fmt.Errorf("status %s, reason %s", st.Status, st.DeadReason)
		}
		return nil
	})
	// The bridge publishes a poison envelope before it starts the parked workflow: a second
	// one would be on the queue ahead of the barrier.
	dlq.caughtUp(t)
	assert.Len(t, dlq.all(), 1, "one envelope: the held delivery was not dead-lettered twice")
}

// cliList runs `temporal workflow list --query q` against the stack's server.
func (s *stack) cliList(q string) string {
	s.t.Helper()
	var out string
	eventually(s.t, patience, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, err := exec.CommandContext(ctx, devserver.DefaultBinary(), "workflow", "list",
			"--address", s.temporal.Address, "--namespace", s.temporal.Namespace, "--query", q).CombinedOutput()
		if err != nil {
			return fmt.Errorf("temporal workflow list: %v: %s", err, b)
		}
		out = string(b)
		if strings.Count(out, "retry/") == 0 {
			return fmt.Errorf("nothing listed yet: %s", out)
		}
		return nil
	})
	return out
}
