package service

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"retry-scheduler/bridge"
	"retry-scheduler/message"
	"retry-scheduler/workflows"
)

// reporter tells the bridge what a Temporal error means: an invalid argument (a payload
// Temporal rejects, say) will never succeed and is dead-lettered as poison at once; an
// exhausted resource (a rate limit, an overloaded server) is Temporal's, not the message's,
// so the delivery is held without counting a try. The bridge asks temporalProbe about the
// rest.
type reporter struct{ *workflows.Reporter }

func (r reporter) Report(ctx context.Context, rep message.FailureReport) error {
	err := r.Reporter.Report(ctx, rep)
	var (
		invalid   *serviceerror.InvalidArgument
		exhausted *serviceerror.ResourceExhausted
	)
	switch {
	case errors.As(err, &invalid):
		return bridge.Permanent(err)
	case errors.As(err, &exhausted):
		return bridge.Unavailable(err)
	}
	return err
}

// probeWorkflowID names a workflow that never exists: describing it goes through the frontend
// and the history service to the persistence store, so a NotFound says all three answer.
const probeWorkflowID = "retry-scheduler-probe/never-started"

// temporalProbe is the bridge's Probe: nil when Temporal serves a call that reads its store.
// The frontend's own health check is not enough: with its database down it still answers,
// and every failed report would then count against its message.
func temporalProbe(c client.Client) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.DescribeWorkflowExecution(ctx, probeWorkflowID, "")
		var notFound *serviceerror.NotFound
		if err == nil || errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("temporal probe: %w", err)
	}
}
