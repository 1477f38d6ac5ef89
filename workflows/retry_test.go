package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// published is one publish seen by the in-memory publisher, with the workflow time it happened.
type published struct {
	Exchange, Key string
	Msg           amqp.Publishing
}

// memPublisher stands in for the broker in workflow unit tests: the activities run for real,
// only the AMQP connection is replaced. The broker itself is exercised by integration tests.
type memPublisher struct {
	mu         sync.Mutex
	all        []published
	unroutable map[string]bool
}

func (p *memPublisher) Publish(_ context.Context, exchange, key string, _ bool, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unroutable[key] {
		return fmt.Errorf("publish to %q: %w", key, broker.ErrUnroutable)
	}
	p.all = append(p.all, published{Exchange: exchange, Key: key, Msg: msg})
	return nil
}

// to returns the publishes routed with key.
func (p *memPublisher) to(key string) []published {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []published
	for _, m := range p.all {
		if m.Key == key {
			out = append(out, m)
		}
	}
	return out
}

const (
	testQueue = "orders"
	testDLQ   = "manual-review.pending"
	testID    = "msg-1"
)

// fixedPolicy has no jitter, so a test can place its signals on a known timeline:
// a retry 10 s after each failure, a 30 s quiet window.
func fixedPolicy(maxRetries int) policy.Policy {
	return policy.Policy{
		Name:        "test-fixed",
		Backoff:     policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{10 * time.Second}},
		Jitter:      policy.Jitter{Mode: policy.NoJitter},
		MaxRetries:  maxRetries,
		QuietWindow: 30 * time.Second,
	}
}

func report(p policy.Policy, retryCount int, f policy.Failure) message.FailureReport {
	return message.FailureReport{
		Message: message.Message{
			MessageID:     testID,
			Payload:       []byte(`{"order":42}`),
			OriginalQueue: testQueue,
			Headers:       map[string]any{"x-tenant": "acme"},
			Properties:    message.Properties{ContentType: "application/json"},
			TenantID:      "acme",
		},
		RetryCount:      retryCount,
		Failure:         f,
		Policy:          p,
		DeadLetterQueue: testDLQ,
		Service:         "orders-svc",
	}
}

var transient = policy.Failure{Category: "transient", Reason: "503 from payments", HTTPStatus: 503}

type retrySuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env     *testsuite.TestWorkflowEnvironment
	pub     *memPublisher
	hist    *fakeHistory
	gate    *fakeGate
	counter *fakeCounter
	// probeFailures are the probe failures the run signalled to breakers, by breaker id.
	probeFailures map[string][]ProbeFailure
	// updates numbers the updates a test sends (updateWith).
	updates int
}

// fakeHistory stands in for Temporal's record of earlier runs, answering attempts or err;
// asked keeps the earlier run ID of each look-up ("" for the latest closed run).
type fakeHistory struct {
	attempts []message.Attempt
	err      error
	asked    []string
}

func (h *fakeHistory) PriorAttempts(_ context.Context, _, _, earlierRunID string) ([]message.Attempt, error) {
	h.asked = append(h.asked, earlierRunID)
	return h.attempts, h.err
}

func TestRetryWorkflow(t *testing.T) { suite.Run(t, new(retrySuite)) }

func (s *retrySuite) SetupTest() {
	s.pub = &memPublisher{unroutable: map[string]bool{}}
	s.hist = &fakeHistory{}
	s.gate = &fakeGate{}
	s.counter = &fakeCounter{}
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	s.newEnv("")
	s.probeFailures = map[string][]ProbeFailure{}
	s.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, SignalBreakerProbeFailed, mock.Anything).
		Return(func(_, id, _, _ string, arg any) error {
			s.probeFailures[id] = append(s.probeFailures[id], arg.(ProbeFailure))
			return nil
		}).Maybe()
}

// newEnv gives the test a fresh environment running RetryWorkflow with the suite's fakes; its
// worker archives expired envelopes to archiveQueue ("" archives none).
func (s *retrySuite) newEnv(archiveQueue string) {
	s.env = s.NewTestWorkflowEnvironment()
	s.env.RegisterWorkflowWithOptions(RetryWorkflow, workflow.RegisterOptions{Name: RetryWorkflowName})
	s.env.RegisterActivity(&activities.Activities{Publisher: s.pub, History: s.hist, Gate: s.gate, Counter: s.counter,
		ExpiredArchiveQueue: archiveQueue, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func (s *retrySuite) TearDownTest() { s.env.AssertExpectations(s.T()) }

// at sends a signal at a point of the test's timeline.
func (s *retrySuite) at(d time.Duration, name string, arg any) {
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(name, arg) }, d)
}

// failAt reports the failure of retry number retryCount at time d.
func (s *retrySuite) failAt(d time.Duration, p policy.Policy, retryCount int, f policy.Failure) {
	s.at(d, SignalFailureReport, report(p, retryCount, f))
}

func (s *retrySuite) start(first message.FailureReport) {
	s.env.ExecuteWorkflow(RetryWorkflowName, Input{Report: &first, Retention: time.Hour})
}

func (s *retrySuite) result() Result {
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError())
	var r Result
	s.Require().NoError(s.env.GetWorkflowResult(&r))
	return r
}

func (s *retrySuite) queryAt(d time.Duration, into *State) {
	s.env.RegisterDelayedCallback(func() { *into = s.stateNow() }, d)
}

// stateNow is the run's answer to the state query at the test clock's present.
func (s *retrySuite) stateNow() State {
	v, err := s.env.QueryWorkflow(QueryState)
	s.Require().NoError(err)
	var st State
	s.Require().NoError(v.Get(&st))
	return st
}

// startQueryingAt starts the run on first and returns the state the run answered at d,
// filled in by the time it returns: the test environment runs the whole workflow in start.
func (s *retrySuite) startQueryingAt(d time.Duration, first message.FailureReport) *State {
	var st State
	s.queryAt(d, &st)
	s.start(first)
	return &st
}

// assertDead asserts that st is dead for cause.
func (s *retrySuite) assertDead(st *State, cause string) {
	s.Equal(StatusDead, st.Status)
	s.Equal(cause, st.DeadReason)
}

// assertExhausted asserts that st is dead for having used all its retries, the last failure
// of category.
func (s *retrySuite) assertExhausted(st *State, category policy.Category) {
	s.assertDead(st, policy.CauseExhausted)
	s.Equal(string(category), st.Category)
}

func (s *retrySuite) envelopes() []message.Envelope {
	var out []message.Envelope
	for _, m := range s.pub.to(testDLQ) {
		var e message.Envelope
		s.Require().NoError(json.Unmarshal(m.Msg.Body, &e))
		out = append(out, e)
	}
	return out
}

func (s *retrySuite) TestHappyPathRepublishesOnceThenDelivered() {
	p := fixedPolicy(3)
	scheduled := s.startQueryingAt(time.Second, report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusScheduled, scheduled.Status)
	s.Equal(scheduled.FirstFailureAt.Add(10*time.Second), scheduled.NextRetryAt)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1)
	m := got[0].Msg
	s.Equal([]byte(`{"order":42}`), m.Body)
	s.Equal(testID, m.MessageId)
	s.Equal(amqp.Persistent, m.DeliveryMode)
	s.EqualValues(1, m.Headers[message.HeaderRetryCount])
	s.Equal(testID+":1", m.Headers[message.HeaderRetryKey])
	s.Equal("acme", m.Headers["x-tenant"])
	s.Empty(s.pub.to(testDLQ))
}

func (s *retrySuite) TestFailAgainUntilExhaustedDeadLettersWithEveryAttempt() {
	p := fixedPolicy(3)
	// Republishes at 10 s, 25 s and 40 s; each fails 5 s later; the fourth failure is dead.
	s.failAt(15*time.Second, p, 1, transient)
	s.failAt(30*time.Second, p, 2, policy.Failure{Reason: "connection reset", ErrorCode: "ECONNRESET"})
	s.failAt(45*time.Second, p, 3, transient)
	dead := s.startQueryingAt(50*time.Second, report(p, 0, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.Len(s.pub.to(testQueue), 3)
	for i, m := range s.pub.to(testQueue) {
		s.EqualValues(i+1, m.Msg.Headers[message.HeaderRetryCount])
		s.Equal(fmt.Sprintf("%s:%d", testID, i+1), m.Msg.Headers[message.HeaderRetryKey])
	}
	s.assertDead(dead, policy.CauseExhausted)
	envs := s.envelopes()
	s.Require().Len(envs, 1)
	e := envs[0]
	s.Equal(policy.CauseExhausted, e.DeadReason)
	s.Equal(3, e.TotalRetries)
	s.Require().Len(e.RetryAttempts, 4)
	for i, a := range e.RetryAttempts {
		s.Equal(i+1, a.Attempt)
		s.NotEmpty(a.Error)
		s.Equal("transient", a.Category)
	}
	s.Equal("ECONNRESET", e.RetryAttempts[2].ErrorCode)
	s.Equal(503, e.RetryAttempts[0].HTTPStatus)
	s.False(e.RetryAttempts[0].RepublishedAt.IsZero())
	s.True(e.RetryAttempts[3].RepublishedAt.IsZero())
	s.Equal([]byte(`{"order":42}`), e.OriginalMessage.Payload)
	s.Equal("orders-svc", e.Metadata.Service)
	s.Equal("acme", e.Metadata.TenantID)
	s.Equal(testQueue, e.OriginalQueue)
}

func (s *retrySuite) TestPermanentErrorGoesToDeadWithoutRepublish() {
	st := s.startQueryingAt(time.Second, report(fixedPolicy(3), 0, policy.Failure{HTTPStatus: 400, Reason: "bad request"}))

	s.Equal(StatusExpired, s.result().Status)
	s.Empty(s.pub.to(testQueue))
	s.assertDead(st, policy.CauseNonRetryable)
	s.Equal(string(policy.Permanent), st.Category)
	s.Len(s.envelopes(), 1)
}

func (s *retrySuite) TestRateLimitedWaitsAtLeastRetryAfter() {
	st := s.startQueryingAt(time.Second, report(fixedPolicy(3), 0, policy.Failure{HTTPStatus: 429, RetryAfter: 2 * time.Minute}))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(string(policy.RateLimited), st.Category)
	s.GreaterOrEqual(st.NextRetryAt.Sub(st.FirstFailureAt), 2*time.Minute)
	s.Len(s.pub.to(testQueue), 1)
}

func (s *retrySuite) TestUnknownErrorStopsAfterThePolicysCap() {
	p := fixedPolicy(5)
	p.UnknownMaxRetries = 2 // as the tiers have it
	unknown := policy.Failure{HTTPStatus: 500, Reason: "internal error"}
	s.failAt(15*time.Second, p, 1, unknown)
	s.failAt(30*time.Second, p, 2, unknown)
	st := s.startQueryingAt(31*time.Second, report(p, 0, unknown))

	s.result()
	s.Len(s.pub.to(testQueue), 2)
	s.assertExhausted(st, policy.Unknown)
}

func (s *retrySuite) TestMaxWindowSendsToDead() {
	p := fixedPolicy(10)
	p.MaxWindow = 20 * time.Second
	// First retry at 10 s is inside the window; the failure at 15 s would retry at 25 s: outside.
	s.failAt(15*time.Second, p, 1, transient)
	st := s.startQueryingAt(16*time.Second, report(p, 0, transient))

	s.result()
	s.Len(s.pub.to(testQueue), 1)
	s.assertDead(st, policy.CauseMaxWindow)
}

func (s *retrySuite) TestDuplicateReportsCountOnce() {
	p := fixedPolicy(3)
	first := report(p, 0, transient)
	s.at(time.Second, SignalFailureReport, first) // RabbitMQ redelivered the same report
	s.failAt(15*time.Second, p, 1, transient)
	s.failAt(16*time.Second, p, 1, transient) // and the failure of retry 1, twice
	st := s.startQueryingAt(17*time.Second, first)

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 2)
	s.Equal(2, st.DuplicateReports)
	s.Equal(map[string]int{SetAsideRetryPending: 2}, st.SetAside)
	s.Len(st.Attempts, 2)
	s.Equal(1, st.RetryCount)
}

func (s *retrySuite) TestReportWithStaleRetryKeyIsDuplicate() {
	p := fixedPolicy(3)
	stale := report(p, 1, transient)
	stale.RetryKey = testID + ":7"
	s.at(15*time.Second, SignalFailureReport, stale)
	fresh := report(p, 1, transient)
	fresh.RetryKey = testID + ":1"
	s.at(16*time.Second, SignalFailureReport, fresh)
	st := s.startQueryingAt(17*time.Second, report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(1, st.DuplicateReports)
	s.Equal(map[string]int{SetAsideOtherKey: 1}, st.SetAside)
	s.Len(st.Attempts, 2)
}

func (s *retrySuite) TestReportForDeadMessageStaysDead() {
	p := fixedPolicy(0)
	s.failAt(time.Minute, p, 0, transient)
	st := s.startQueryingAt(2*time.Minute, report(p, 0, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.Equal(StatusDead, st.Status)
	s.Equal(1, st.DuplicateReports)
	s.Equal(map[string]int{SetAsideDead: 1}, st.SetAside)
	last := st.Events[len(st.Events)-1]
	s.Equal("report-set-aside", last.Kind)
	s.Contains(last.Detail, "dead: the message is dead")
	s.Contains(last.Detail, transient.Reason)
	s.Len(s.envelopes(), 1)
	s.Empty(s.pub.to(testQueue))
}

func (s *retrySuite) TestSkipWhileScheduledGoesToDead() {
	s.at(5*time.Second, SignalSkip, OperatorAction{Actor: "alice", Reason: "known bad"})
	st := s.startQueryingAt(6*time.Second, report(fixedPolicy(3), 0, transient))

	s.result()
	s.Empty(s.pub.to(testQueue))
	s.assertDead(st, CauseSkipped)
	s.Contains(st.DeadDetail, "alice")
	envs := s.envelopes()
	s.Require().Len(envs, 1)
	s.Equal(CauseSkipped, envs[0].DeadReason)
}

func (s *retrySuite) TestRetryNowWhileScheduledRepublishesAtOnce() {
	s.at(2*time.Second, SignalRetryNow, OperatorAction{Actor: "bob"})
	st := s.startQueryingAt(3*time.Second, report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusAwaitingOutcome, st.Status) // at 3 s, long before the 10 s delay
	s.Len(s.pub.to(testQueue), 1)
}

func (s *retrySuite) TestRetryFromDeadResetsCount() {
	p := fixedPolicy(1)
	s.failAt(15*time.Second, p, 1, transient) // retry 1 failed: dead (max 1)
	s.at(20*time.Second, SignalRetryNow, OperatorAction{Actor: "carol", Reason: "payments fixed"})
	st := s.startQueryingAt(21*time.Second, report(p, 0, transient))

	r := s.result()
	s.Equal(StatusDelivered, r.Status)
	s.Equal(1, r.RetryCount)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 2)
	s.EqualValues(1, got[1].Msg.Headers[message.HeaderRetryCount])
	s.Equal(testID+":2", got[1].Msg.Headers[message.HeaderRetryKey], "a reset never reuses a key")
	s.Equal(1, st.Resets)
	s.Equal(StatusAwaitingOutcome, st.Status)
}

func (s *retrySuite) TestResolveFromDead() {
	s.at(time.Minute, SignalResolve, OperatorAction{Actor: "dave", Reason: "fixed by hand"})
	s.start(report(fixedPolicy(0), 0, transient))
	s.Equal(StatusResolved, s.result().Status)
}

func (s *retrySuite) TestDiscardFromDead() {
	s.at(time.Minute, SignalDiscard, OperatorAction{Actor: "erin"})
	s.start(report(fixedPolicy(0), 0, transient))
	s.Equal(StatusDiscarded, s.result().Status)
}

func (s *retrySuite) TestRetentionExpiry() {
	st := s.startQueryingAt(59*time.Minute, report(fixedPolicy(0), 0, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.Equal(StatusDead, st.Status, "still parked just before the one-hour retention ends")
}

// The end of the retention is counted, by original queue; a dead message an operator
// decided on is not.
func (s *retrySuite) TestRetentionExpiryIsCounted() {
	expired := MetricDeadLettersExpired + "{queue=" + testQueue + "}"
	rec := s.recordCounters()
	s.start(report(fixedPolicy(0), 0, transient))
	s.Equal(StatusExpired, s.result().Status)
	s.EqualValues(1, rec.get(expired))

	rec = s.recordCounters()
	s.at(time.Minute, SignalResolve, OperatorAction{Actor: "dave"})
	s.start(report(fixedPolicy(0), 0, transient))
	s.Equal(StatusResolved, s.result().Status)
	s.Zero(rec.get(expired))
}

func (s *retrySuite) TestIllegalSignalsAreRefusedNotApplied() {
	s.at(time.Second, SignalResolve, OperatorAction{Actor: "frank"})
	st := s.startQueryingAt(2*time.Second, report(fixedPolicy(3), 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusScheduled, st.Status)
	s.Require().NotEmpty(st.Events)
	s.Equal("refused", st.Events[0].Kind)
	s.Equal("frank", st.Events[0].Actor)
}

func (s *retrySuite) TestManualPolicyNeverRetriesByItself() {
	builtins := policy.Builtins()
	st := s.startQueryingAt(time.Minute, report(builtins["manual"], 0, transient))

	s.Equal(StatusExpired, s.result().Status)
	s.Empty(s.pub.to(testQueue))
	s.Equal(policy.CauseManual, st.DeadReason)
}

func (s *retrySuite) TestNewRunContinuesTheCount() {
	p := fixedPolicy(3)
	// An earlier run already republished twice; this run's first report says so.
	s.failAt(15*time.Second, p, 3, transient)
	s.start(report(p, 2, transient))

	s.Equal(StatusExpired, s.result().Status)
	got := s.pub.to(testQueue)
	s.Require().Len(got, 1, "only one retry was left")
	s.EqualValues(3, got[0].Msg.Headers[message.HeaderRetryCount])
	s.Equal(testID+":3", got[0].Msg.Headers[message.HeaderRetryKey])
	s.Len(s.envelopes(), 1)
}

func (s *retrySuite) TestNewRunCarriesTheEarlierRunsAttempts() {
	p := fixedPolicy(3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.hist.attempts = []message.Attempt{
		{Attempt: 1, Timestamp: t0, Error: "first", Category: "transient"},
		{Attempt: 2, Timestamp: t0.Add(time.Minute), Error: "second", Category: "transient"},
	}
	s.failAt(15*time.Second, p, 3, transient)
	s.start(report(p, 2, transient))

	s.result()
	envs := s.envelopes()
	s.Require().Len(envs, 1)
	e := envs[0]
	s.Require().Len(e.RetryAttempts, 4, "the dead letter tells the whole story across runs")
	for i, a := range e.RetryAttempts {
		s.Equal(i+1, a.Attempt)
	}
	s.Equal("first", e.RetryAttempts[0].Error)
	s.Equal(t0, e.FirstFailureAt.UTC())
}

func (s *retrySuite) TestUnroutableDestinationIsPermanent() {
	s.pub.unroutable[testQueue] = true
	st := s.startQueryingAt(11*time.Second, report(fixedPolicy(3), 0, transient))

	s.result()
	s.assertDead(st, CauseUnroutable)
}

// A message whose own content cannot be published (a correlation id over AMQP's 255-byte
// short strings) is dead at once, with a reason naming the field: no publish loop.
func (s *retrySuite) TestUnpublishableMessageIsDeadLettered() {
	var st State
	s.queryAt(11*time.Second, &st)
	r := report(fixedPolicy(3), 0, transient)
	r.Message.CorrelationID = strings.Repeat("c", 300)
	s.start(r)

	s.result()
	s.assertDead(&st, CauseUnpublishable)
	s.Contains(st.DeadDetail, "correlation_id is 300 bytes")
	s.Empty(s.pub.to(testQueue), "nothing reached the publisher")
	envs := s.envelopes()
	s.Require().Len(envs, 1, "dead-lettered, its envelope published")
	s.Equal(CauseUnpublishable, envs[0].DeadReason)
}

func (s *retrySuite) TestFirstReportBySignalWithStart() {
	p := fixedPolicy(3)
	s.at(0, SignalFailureReport, report(p, 0, transient))
	s.env.ExecuteWorkflow(RetryWorkflowName, Input{})
	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 1)
}

func TestRetryKey(t *testing.T) {
	require.Equal(t, "m:3", RetryKey("m", 3))
}

// jitteredPolicy spreads its delays, so that a decision depends on the workflow ID.
func jitteredPolicy() policy.Policy {
	p := fixedPolicy(3)
	p.Backoff = policy.Backoff{Kind: policy.Exponential, Initial: 10 * time.Second, Multiplier: 2, Max: time.Minute}
	p.Jitter = policy.Jitter{Mode: policy.Proportional, Fraction: 0.2}
	return p
}

// The reporter starts a run with the first delay it computes (PlanStart); the run must
// come to the same delay, or the retry fires at the start delay but is recorded otherwise.
func (s *retrySuite) TestFirstDelayIsTheRunsFirstDecision() {
	id := message.WorkflowID(testQueue, testID)
	s.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	rep := report(jitteredPolicy(), 0, transient)
	d, ok := firstDelay(id, rep, time.Now())
	s.Require().True(ok)
	scheduled := s.startQueryingAt(time.Second, rep)

	s.Equal(StatusDelivered, s.result().Status)
	s.NotEqual(10*time.Second, d.Delay, "the jitter should move the delay")
	s.Equal(d.Delay, scheduled.NextRetryAt.Sub(scheduled.FirstFailureAt))
	s.Equal(string(d.Category), scheduled.Category)
}

func (s *retrySuite) TestFirstDelayOnlyForANewCountThatRetries() {
	id := message.WorkflowID(testQueue, testID)
	_, ok := firstDelay(id, report(fixedPolicy(3), 1, transient), time.Now())
	s.False(ok, "a continued count looks up the earlier run first")
	_, ok = firstDelay(id, report(fixedPolicy(3), 0, policy.Failure{Category: "permanent", Reason: "bad schema"}), time.Now())
	s.False(ok, "a failure that goes to dead has no delay")
	_, ok = firstDelay(id, report(fixedPolicy(0), 0, transient), time.Now())
	s.False(ok, "no retries allowed")
}

// A run started with its first delay as the start delay takes its report as accepted at the
// start: the retry is due start + delay, whenever the first task runs (here at once, as when
// a signal ends the delay early; the timer covers the rest).
func (s *retrySuite) TestDelayedStartRetriesAtStartPlusDelay() {
	first := report(fixedPolicy(3), 0, transient)
	var scheduled, after State
	s.queryAt(9*time.Second, &scheduled)
	s.queryAt(11*time.Second, &after)
	s.env.ExecuteWorkflow(RetryWorkflowName, Input{Report: &first, Retention: time.Hour, StartDelay: 10 * time.Second})

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusScheduled, scheduled.Status)
	s.Equal(scheduled.FirstFailureAt.Add(10*time.Second), scheduled.NextRetryAt)
	s.Equal(StatusAwaitingOutcome, after.Status)
	s.Require().Len(after.Attempts, 1)
	s.Equal(scheduled.FirstFailureAt, after.Attempts[0].Timestamp)
	s.Len(s.pub.to(testQueue), 1)
}
