package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// delayedHistoryEvents bounds how far delayedState reads: a run still in its start delay has
// its start event and the signals that came with or after it.
const delayedHistoryEvents = 20

// delayedState is the state of a run that cannot answer a query yet: started with its first
// retry's delay as the start delay, it has had no workflow task. Its start holds what the
// first task will know: the report in its input, or signalled with the start.
func (a *API) delayedState(ctx context.Context, id string) (workflows.State, error) {
	it := a.cfg.Client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var in workflows.Input
	var startedAt time.Time
	for n := 0; n < delayedHistoryEvents && in.Report == nil && it.HasNext(); n++ {
		ev, err := it.Next()
		if err != nil {
			return workflows.State{}, fmt.Errorf("history of %s (before its first task): %w", id, err)
		}
		if attrs := ev.GetWorkflowExecutionStartedEventAttributes(); attrs != nil {
			startedAt = ev.GetEventTime().AsTime()
			if err := a.cfg.DataConverter.FromPayloads(attrs.GetInput(), &in); err != nil {
				return workflows.State{}, fmt.Errorf("decode the input of %s: %w", id, err)
			}
			continue
		}
		if attrs := ev.GetWorkflowExecutionSignaledEventAttributes(); attrs != nil && attrs.GetSignalName() == workflows.SignalFailureReport {
			var rep message.FailureReport
			if err := a.cfg.DataConverter.FromPayloads(attrs.GetInput(), &rep); err != nil {
				return workflows.State{}, fmt.Errorf("decode the first report of %s: %w", id, err)
			}
			in.Report = &rep
		}
	}
	if in.Report == nil || startedAt.IsZero() {
		return workflows.State{}, errors.New("workflow " + id + " has no failure report in its history yet")
	}
	return workflows.DelayedState(id, *in.Report, startedAt), nil
}
