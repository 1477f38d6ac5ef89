package workflows

import (
	"encoding/json"
	"time"

	"github.com/retry-scheduler/retry-scheduler/message"
)

const testArchive = "dead.archive"

// archiveTo gives this test an environment whose worker archives expired envelopes to queue.
func (s *retrySuite) archiveTo(queue string) { s.newEnv(queue) }

// eventKinds are the kinds of the finished run's events, in order.
func (s *retrySuite) eventKinds() []string {
	var out []string
	for _, e := range s.stateNow().Events {
		out = append(out, e.Kind)
	}
	return out
}

// When the retention ends, the envelope goes to the archive queue as it was dead-lettered.
func (s *retrySuite) TestExpiredEnvelopeIsArchived() {
	s.archiveTo(testArchive)
	s.start(report(fixedPolicy(0), 0, transient))

	res := s.result()
	s.Equal(StatusExpired, res.Status)
	s.Require().Len(s.envelopes(), 1)
	archived := s.pub.to(testArchive)
	s.Require().Len(archived, 1)
	s.Empty(archived[0].Msg.Expiration, "the archive is the last copy: it never expires")
	var env message.Envelope
	s.Require().NoError(json.Unmarshal(archived[0].Msg.Body, &env))
	dead := s.envelopes()[0]
	s.Equal(dead.DLQID, env.DLQID)
	s.Equal(dead.RoutedToDlqAt, env.RoutedToDlqAt)
	s.Equal(dead.RetryAttempts, env.RetryAttempts)
	s.Contains(s.eventKinds(), "archived")
}

// Without an archive queue nothing more is published; a dead message an operator decided on
// is not archived.
func (s *retrySuite) TestNothingIsArchivedWithoutAQueueOrAfterADecision() {
	s.start(report(fixedPolicy(0), 0, transient))
	res := s.result()
	s.Equal(StatusExpired, res.Status)
	s.Len(s.pub.all, 1, "the dead-letter envelope only")
	s.NotContains(s.eventKinds(), "archived")

	s.pub = &memPublisher{unroutable: map[string]bool{}}
	s.archiveTo(testArchive)
	s.at(time.Minute, SignalResolve, OperatorAction{Actor: "dave"})
	s.start(report(fixedPolicy(0), 0, transient))
	s.Equal(StatusResolved, s.result().Status)
	s.Empty(s.pub.to(testArchive))
}

// An archive the broker refuses is an event; the run still closes as expired.
func (s *retrySuite) TestArchiveFailureIsAnEventNotAStuckRun() {
	s.pub.unroutable[testArchive] = true
	s.archiveTo(testArchive)
	s.start(report(fixedPolicy(0), 0, transient))

	res := s.result()
	s.Equal(StatusExpired, res.Status)
	s.Contains(s.eventKinds(), "archive-failed")
	s.Empty(s.pub.to(testArchive))
}
