package workflows

import (
	"bytes"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

const testIngress = "retry.scheduled"

// poisonReport is the bridge's report that parks a poison delivery (bridge/park.go).
func poisonReport(kind string, body []byte) message.FailureReport {
	payload, truncated := message.PoisonPayload(body)
	return message.FailureReport{
		Message: message.Message{
			MessageID:          "sha256-0123",
			Payload:            payload,
			OriginalQueue:      testIngress,
			OriginalRoutingKey: testIngress,
			Properties:         message.Properties{ContentType: "application/json"},
		},
		Failure:         policy.Failure{Reason: "body is not JSON", Category: string(policy.Unknown)},
		Policy:          fixedPolicy(3),
		DeadLetterQueue: testDLQ,
		Source:          "poison",
		Poison: &message.Poison{Kind: kind, Reason: "body is not JSON", Size: len(body), Truncated: truncated,
			IngressQueue: testIngress, DLQID: kind + "-abc"},
	}
}

func (s *retrySuite) TestPoisonIsParkedDeadThenResolved() {
	var dead State
	s.queryAt(time.Second, &dead)
	s.at(2*time.Second, SignalResolve, OperatorAction{Actor: "ops", Reason: "producer told"})
	s.start(poisonReport(message.PoisonKindPoison, []byte("{not json")))

	s.Equal(StatusResolved, s.result().Status)
	s.assertDead(&dead, message.PoisonKindPoison)
	s.Equal("body is not JSON", dead.DeadDetail)
	s.False(dead.DeadAt.IsZero())
	s.Equal([]byte("{not json"), dead.Message.Payload)
	s.Require().NotNil(dead.Poison)
	s.Equal("poison-abc", dead.Poison.DLQID)
	s.Require().Len(dead.Attempts, 1)
	s.Equal("body is not JSON", dead.Attempts[0].Error)
	s.Empty(s.pub.all, "the bridge published the envelope; the workflow publishes nothing")
}

func (s *retrySuite) TestPoisonDiscarded() {
	s.at(time.Second, SignalDiscard, OperatorAction{Actor: "ops"})
	s.start(poisonReport(message.PoisonKindPoison, []byte("junk")))

	s.Equal(StatusDiscarded, s.result().Status)
	s.Empty(s.pub.all)
}

func (s *retrySuite) TestPoisonRetryRepublishesToIngressAndPoisonAgainIsDeadAgain() {
	s.at(time.Second, SignalRetryNow, OperatorAction{Actor: "ops", Reason: "producer fixed"})
	var awaiting, dead State
	s.queryAt(2*time.Second, &awaiting)
	// The bridge decodes the republished bytes again: still poison, inside the quiet window.
	again := poisonReport(message.PoisonKindPoison, []byte("junk"))
	again.Poison.Reason = "still not JSON"
	s.at(5*time.Second, SignalFailureReport, again)
	s.queryAt(6*time.Second, &dead)
	s.start(poisonReport(message.PoisonKindPoison, []byte("junk")))

	s.Equal(StatusExpired, s.result().Status)
	s.Equal(StatusAwaitingOutcome, awaiting.Status)
	got := s.pub.to(testIngress)
	s.Require().Len(got, 1, "a retry republishes the raw bytes to the ingress queue")
	s.Equal([]byte("junk"), got[0].Msg.Body)
	s.Equal("sha256-0123", got[0].Msg.MessageId)
	s.assertDead(&dead, message.PoisonKindPoison)
	s.Equal("still not JSON", dead.DeadDetail)
	s.Equal(1, dead.Resets)
	s.Len(dead.Attempts, 2)
	s.Empty(s.envelopes())
}

func (s *retrySuite) TestPoisonRetryThatStaysQuietIsDelivered() {
	s.at(time.Second, SignalRetryNow, OperatorAction{Actor: "ops", Reason: "producer fixed"})
	s.start(poisonReport(message.PoisonKindPoison, []byte(`{"ok":true}`)))

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testIngress), 1)
}

func (s *retrySuite) TestOversizeTruncatedRefusesRetry() {
	body := bytes.Repeat([]byte("x"), message.MaxPoisonPayloadBytes+1)
	var dead State
	s.at(time.Second, SignalRetryNow, OperatorAction{Actor: "ops"})
	s.queryAt(2*time.Second, &dead)
	s.at(3*time.Second, SignalDiscard, OperatorAction{Actor: "ops"})
	s.start(poisonReport(message.PoisonKindOversize, body))

	s.Equal(StatusDiscarded, s.result().Status)
	s.Empty(s.pub.all, "truncated bytes are never republished")
	s.assertDead(&dead, message.PoisonKindOversize)
	s.Len(dead.Message.Payload, message.MaxPoisonPayloadBytes)
	s.True(dead.Poison.Truncated)
	s.Equal(len(body), dead.Poison.Size)
	s.Require().NotEmpty(dead.Events)
	last := dead.Events[len(dead.Events)-1]
	s.Equal("refused", last.Kind)
	s.Contains(last.Detail, SignalRetryNow+" is not allowed")
	s.NotEmpty(RetryRefusal(&dead))
}

func (s *retrySuite) TestPoisonReportOnAnOrdinaryRunIsOnlyNoted() {
	p := fixedPolicy(3)
	s.at(time.Second, SignalFailureReport, poisonReport(message.PoisonKindPoison, []byte("junk")))
	st := s.startQueryingAt(2*time.Second, report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusScheduled, st.Status)
	s.Equal(1, st.DuplicateReports)
	s.Equal(map[string]int{SetAsidePoison: 1}, st.SetAside)
	s.Nil(st.Poison)
	s.Len(s.pub.to(testQueue), 1)
}
