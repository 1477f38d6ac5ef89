package service

import (
	"context"
	"errors"

	"go.temporal.io/api/serviceerror"

	"retry-scheduler/bridge"
	"retry-scheduler/message"
	"retry-scheduler/workflows"
)

// reporter tells the bridge which Temporal refusals will never succeed: an invalid argument
// (a payload Temporal rejects, say) is dead-lettered as poison instead of being requeued
// forever at the head of the queue. Everything else is requeued and retried.
type reporter struct{ *workflows.Reporter }

func (r reporter) Report(ctx context.Context, rep message.FailureReport) error {
	err := r.Reporter.Report(ctx, rep)
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) {
		return bridge.Permanent(err)
	}
	return err
}
