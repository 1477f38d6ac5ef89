package workflows

import (
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The finding attributes: the consuming service when the report named one, the last
// failure's error type (unset when it named none), and a dead message's two envelope ids.
func TestFindingAttributes(t *testing.T) {
	s := &State{Status: StatusScheduled, WorkflowID: "retry/orders/m-1"}
	sa := temporal.NewSearchAttributes(findingAttributeUpdates(s)...)
	_, ok := sa.GetKeyword(SAConsumerService)
	require.False(t, ok, "no service, no attribute")
	_, ok = sa.GetKeyword(SAErrorType)
	require.False(t, ok)
	_, ok = sa.GetKeywordList(SADeadLetterIDs)
	require.False(t, ok, "not dead, no ids")

	s.Service = "billing"
	s.Attempts = []message.Attempt{{Attempt: 1, ErrorType: "java.io.IOException"}, {Attempt: 2, ErrorType: "TimeoutError"}}
	s.Status, s.Resets = StatusDead, 1
	sa = temporal.NewSearchAttributes(findingAttributeUpdates(s)...)
	v, _ := sa.GetKeyword(SAConsumerService)
	require.Equal(t, "billing", v)
	v, _ = sa.GetKeyword(SAErrorType)
	require.Equal(t, "TimeoutError", v, "the last failure's")
	ids, _ := sa.GetKeywordList(SADeadLetterIDs)
	require.Equal(t, []string{"retry/orders/m-1#1", message.DLQUUID("retry/orders/m-1#1")}, ids)

	s.Poison = &message.Poison{Kind: message.PoisonKindPoison, DLQID: "poison-7"}
	s.DeadReason = message.PoisonKindPoison
	ids, _ = temporal.NewSearchAttributes(findingAttributeUpdates(s)...).GetKeywordList(SADeadLetterIDs)
	require.Equal(t, []string{"poison-7", message.DLQUUID("poison-7")}, ids, "a parked poison delivery's are the bridge's")
}

// A run that takes the gate writes them on every upsert; the dead-letter ids are the
// published envelope's.
func (s *retrySuite) TestFindingAttributesAreUpserted() {
	first := report(fixedPolicy(0), 0, transient)
	first.Service, first.ErrorType = "billing", "TimeoutError"
	var services, types []string
	var dead []string
	s.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		v, _ := sa.GetKeyword(SAConsumerService)
		services = append(services, v)
		v, _ = sa.GetKeyword(SAErrorType)
		types = append(types, v)
		if ids, ok := sa.GetKeywordList(SADeadLetterIDs); ok {
			dead = ids
		}
	}).Return(nil)
	s.startAt(CurrentRevision, first)

	s.Equal(StatusExpired, s.result().Status)
	s.NotEmpty(services)
	for i := range services {
		s.Equal("billing", services[i])
		s.Equal("TimeoutError", types[i])
	}
	s.Require().Len(s.envelopes(), 1)
	env := s.envelopes()[0].Enriched()
	s.Equal([]string{env.DLQID, env.DLQUUID}, dead)
}
