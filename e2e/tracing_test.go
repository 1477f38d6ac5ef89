//go:build integration

package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retry-scheduler/retry-scheduler/internal/tracing/tracingtest"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A failed message's trace runs through the scheduler: the bridge's delivery span continues
// the traceparent it arrived with, the Temporal start, the workflow, its activity and the
// republish follow in one unbroken chain, and the republished message carries a traceparent
// of that trace, in place of the one stored from the failed message.
//
// The service runs in this process with no OTEL_* variables: tracing.Setup then keeps the SDK
// provider installed as the global one, here an in-memory recorder (a synchronous span
// processor, so a span is recorded when it ends).
func TestTracingFollowsAMessageThroughARetry(t *testing.T) {
	rec := tracingtest.Record(t)

	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, nil)

	traceID, parentID := randomHex(t, 16), randomHex(t, 8)
	// The failed message's own traceparent, stored with its headers: an earlier hop.
	stale := "00-" + randomHex(t, 16) + "-" + randomHex(t, 8) + "-01"
	body, err := json.Marshal(message.RetryMessage{
		MessageID: "m-trace", OriginalPayload: []byte("p"), OriginalQueue: orders, ErrorReason: "503 from payments",
		HTTPStatus: 503, OriginalHeaders: map[string]any{"traceparent": stale, "x-tenant": "acme"},
	})
	require.NoError(t, err)
	s.publishRaw(s.ingress, amqp.Publishing{
		ContentType: "application/json", MessageId: "m-trace", Body: body,
		Headers: amqp.Table{"traceparent": "00-" + traceID + "-" + parentID + "-01"},
	})

	d := c.next(t, patience)
	require.Equal(t, "acme", d.Headers["x-tenant"])
	tpHeader, _ := d.Headers["traceparent"].(string)
	parts := strings.Split(tpHeader, "-")
	require.Len(t, parts, 4, "traceparent %q", tpHeader)
	require.Equal(t, traceID, parts[1], "the republish continues the report's trace, not the stored %q", stale)

	// The workflow span ends with the workflow: after its quiet window.
	id := message.WorkflowID(orders, "m-trace")
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status)

	spans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var names []string
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID().String() == traceID {
			spans[sp.SpanContext().SpanID()] = sp
			names = append(names, sp.Name()+" ("+sp.SpanKind().String()+")")
		}
	}
	t.Logf("spans of trace %s: %s", traceID, strings.Join(names, ", "))
	byName := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, sp := range spans {
			if sp.Name() == name {
				return sp
			}
		}
		t.Fatalf("no span %q in trace %s; got %v", name, traceID, names)
		return nil
	}
	deliver := byName("retry-scheduler.deliver " + s.ingress)
	republish := byName("retry-scheduler.republish " + orders)
	byName("RunWorkflow:" + workflows.RetryWorkflowName)
	byName("RunActivity:Republish")
	require.Equal(t, parentID, deliver.Parent().SpanID().String(), "the delivery span is a child of the message's traceparent")
	require.True(t, deliver.Parent().IsRemote())
	require.Equal(t, trace.SpanKindConsumer, deliver.SpanKind())
	require.Equal(t, trace.SpanKindProducer, republish.SpanKind())
	require.Equal(t, republish.SpanContext().SpanID().String(), parts[2], "the republished traceparent names the republish span")

	// Every span of the trace but the delivery's has its parent in the trace: no break.
	for _, sp := range spans {
		if sp == deliver {
			continue
		}
		_, ok := spans[sp.Parent().SpanID()]
		require.True(t, ok, "span %q: parent %s is not among the trace's spans", sp.Name(), sp.Parent().SpanID())
	}
	// From the republish up to the delivery: the start, the workflow and the activity between.
	var chain []string
	for sp := republish; ; {
		chain = append(chain, sp.Name())
		if sp == deliver {
			break
		}
		sp = spans[sp.Parent().SpanID()]
	}
	t.Logf("republish to delivery: %s", strings.Join(chain, " <- "))
	require.Len(t, chain, 6, "republish to delivery: %v", chain)
	// The report starts the workflow, or signals it with a start (a bridge without a worker).
	require.Contains(t, []string{"StartWorkflow:" + workflows.RetryWorkflowName, "SignalWithStartWorkflow:" + workflows.RetryWorkflowName}, chain[4])
	chain[4] = "start"
	require.Equal(t, []string{
		"retry-scheduler.republish " + orders,
		"RunActivity:Republish",
		"StartActivity:Republish",
		"RunWorkflow:" + workflows.RetryWorkflowName,
		"start",
		"retry-scheduler.deliver " + s.ingress,
	}, chain)
}
