//go:build integration

package breaker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The package against a real server's visibility (the dev server's SQLite: no ORDER BY) and
// signal-with-start. The workflows run on a task queue no worker polls, with their search
// attributes set at start, so they stay as made.
func TestAgainstTemporal(t *testing.T) {
	srv := devserver.StartForTest(t)
	tc := srv.DialForTest(t)
	tq := devserver.UniqueName("breaker")
	ctx := context.Background()
	start := func(id, wf string, sa ...temporal.SearchAttributeUpdate) {
		t.Helper()
		_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq, TypedSearchAttributes: temporal.NewSearchAttributes(sa...)}, wf)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), id, "", "test over") })
	}

	t.Run("counter", func(t *testing.T) {
		queue := tq + ".orders"
		id := message.BreakerWorkflowID(queue)
		t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), id, "", "test over") })
		now := time.Now().UTC()
		c := NewCounter(CounterConfig{Client: tc, TaskQueue: tq, Now: func() time.Time { return now }})
		for range 3 {
			c.Republished(queue, policy.Breaker{})
		}
		c.Failed(queue, policy.Breaker{Probes: 5})
		require.Equal(t, 1, c.Flush(ctx), "one signal, starting the breaker")
		c.Failed(queue, policy.Breaker{})
		require.Equal(t, 1, c.Flush(ctx), "one signal to the running breaker")

		desc, err := tc.DescribeWorkflow(ctx, id, "")
		require.NoError(t, err)
		info := desc.RawResponse.GetWorkflowExecutionInfo()
		assert.Equal(t, workflows.BreakerWorkflowName, info.GetType().GetName())
		assert.Equal(t, tq, info.GetTaskQueue())
		assert.Equal(t, string(workflows.BreakerClosed), keyword(info, workflows.SABreakerState))
		assert.Equal(t, queue, keyword(info, workflows.SAOriginalQueue))

		var got []workflows.BreakerOutcomes
		it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			require.NoError(t, err)
			if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
				assert.Equal(t, workflows.SignalBreakerOutcomes, a.GetSignalName())
				var o workflows.BreakerOutcomes
				require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &o))
				got = append(got, o)
			}
		}
		assert.Equal(t, []workflows.BreakerOutcomes{
			{Republished: 3, Failed: 1, Settings: policy.Breaker{Probes: 5}.WithDefaults(),
				Buckets: []workflows.BreakerBucket{{At: now, Republished: 3, Failed: 1}}},
			{Failed: 1, Settings: policy.Breaker{}.WithDefaults(), Buckets: []workflows.BreakerBucket{{At: now, Failed: 1}}},
		}, got, "the totals, and the counts by date")
	})

	t.Run("gate", func(t *testing.T) {
		for q, m := range map[string]workflows.BreakerMode{
			"open": workflows.BreakerOpen, "half": workflows.BreakerHalfOpen, "paused": workflows.BreakerPaused, "closed": workflows.BreakerClosed,
		} {
			start(message.BreakerWorkflowID(tq+"."+q), workflows.BreakerWorkflowName,
				workflows.SABreakerState.ValueSet(string(m)), workflows.SAOriginalQueue.ValueSet(tq+"."+q))
		}
		// A RetryWorkflow of the same queue is no breaker.
		start(tq+"/not-a-breaker", workflows.RetryWorkflowName,
			workflows.SABreakerState.ValueSet(string(workflows.BreakerOpen)), workflows.SAOriginalQueue.ValueSet(tq+".retry"))

		g := NewGate(GateConfig{Client: tc, TaskQueue: tq})
		want := map[string]string{tq + ".open": "open", tq + ".half": "half-open", tq + ".paused": "paused"}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, g.Refresh(ctx))
			for q, m := range want {
				mode, held := g.Holds(q)
				assert.True(c, held, q)
				assert.Equal(c, m, mode, q)
			}
		}, 20*time.Second, 100*time.Millisecond)
		for _, q := range []string{tq + ".closed", tq + ".retry", tq + ".orders"} {
			_, held := g.Holds(q)
			assert.False(t, held, q)
		}
		other := NewGate(GateConfig{Client: tc, TaskQueue: tq + "-other"})
		require.NoError(t, other.Refresh(ctx))
		_, held := other.Holds(tq + ".open")
		assert.False(t, held, "another deployment's breakers are not ours")
		require.NoError(t, other.Refresh(ctx))
		_, held = other.Holds(tq + ".open")
		assert.False(t, held, "another deployment's breakers are not ours, described either")

		// A describe reads the breaker's own state, without visibility: a gate whose list
		// sees nothing holds what retries asked about.
		blind := NewGate(GateConfig{Client: blindLister{tc}, TaskQueue: tq})
		asked := []string{tq + ".open", tq + ".half", tq + ".closed", tq + ".none"}
		for _, q := range asked {
			blind.Holds(q)
		}
		require.NoError(t, blind.Refresh(ctx))
		for _, q := range asked {
			mode, held := blind.Holds(q)
			if m, ok := want[q]; ok {
				assert.True(t, held, q)
				assert.Equal(t, m, mode, q)
			} else {
				assert.False(t, held, q)
			}
		}
	})

	t.Run("held", func(t *testing.T) {
		queue := tq + ".held"
		now := time.Now().UTC()
		held := func(name string, due time.Time) string {
			id := fmt.Sprintf("retry/%s/%s", queue, name)
			sa := []temporal.SearchAttributeUpdate{workflows.SAStatus.ValueSet(string(workflows.StatusHeld)), workflows.SAOriginalQueue.ValueSet(queue)}
			if !due.IsZero() {
				sa = append(sa, workflows.SANextRetryTime.ValueSet(due))
			}
			start(id, workflows.RetryWorkflowName, sa...)
			return id
		}
		// Started newest first, so that the store's order is not the answer.
		c := held("c", now.Add(-time.Second))
		bID := held("b", now.Add(-time.Minute).Truncate(time.Second)) // a round millisecond
		a := held("a", now.Add(-time.Hour))
		none := held("none", time.Time{})
		start(fmt.Sprintf("retry/%s/scheduled", queue), workflows.RetryWorkflowName,
			workflows.SAStatus.ValueSet(string(workflows.StatusScheduled)), workflows.SAOriginalQueue.ValueSet(queue))
		start(fmt.Sprintf("retry/%s.other/x", queue), workflows.RetryWorkflowName,
			workflows.SAStatus.ValueSet(string(workflows.StatusHeld)), workflows.SAOriginalQueue.ValueSet(queue+".other"))
		gone := held("gone", now.Add(-2*time.Hour))
		require.NoError(t, tc.TerminateWorkflow(ctx, gone, "", "released and ended"))

		h := HeldLister{Client: tc, TaskQueue: tq}
		require.EventuallyWithT(t, func(co *assert.CollectT) {
			ids, err := h.ListHeld(ctx, queue, 10)
			require.NoError(co, err)
			assert.Equal(co, []string{a, bID, c, none}, ids)
		}, 20*time.Second, 100*time.Millisecond)
		ids, err := h.ListHeld(ctx, queue, 2)
		require.NoError(t, err)
		assert.Equal(t, []string{a, bID}, ids)
	})
}

// blindLister is a client whose visibility lists nothing.
type blindLister struct{ client.Client }

func (blindLister) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}
