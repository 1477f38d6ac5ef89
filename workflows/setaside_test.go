package workflows

import (
	"sort"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Reports that are not a new failure are never dropped in silence; a report that cannot be
// told from a redelivery, after the latest republish, counts as that republish's failure.

// naive is the report of a consumer that never copies the scheduler's headers: retry_count 0
// and no retry_key, whatever retry it failed.
func naive(p policy.Policy) message.FailureReport { return report(p, 0, transient) }

// counterRecorder is a metrics handler that keeps each counter's total by name and tags.
type counterRecorder struct {
	counts map[string]int64
	tags   map[string]string
}

func newCounterRecorder() *counterRecorder {
	return &counterRecorder{counts: map[string]int64{}}
}

func (c *counterRecorder) WithTags(tags map[string]string) client.MetricsHandler {
	merged := map[string]string{}
	for k, v := range c.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &counterRecorder{counts: c.counts, tags: merged}
}

// key is name{k=v,...} with the tags sorted.
func (c *counterRecorder) key(name string) string {
	var kv []string
	for k, v := range c.tags {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

func (c *counterRecorder) Counter(name string) client.MetricsCounter {
	return counterInc(func(d int64) {
		recorderMu.Lock()
		defer recorderMu.Unlock()
		c.counts[c.key(name)] += d
	})
}

// recorderMu guards the counts map shared by the handlers derived from one recorder.
var recorderMu sync.Mutex

func (c *counterRecorder) get(key string) int64 {
	recorderMu.Lock()
	defer recorderMu.Unlock()
	return c.counts[key]
}

func (c *counterRecorder) Gauge(name string) client.MetricsGauge {
	return client.MetricsNopHandler.Gauge(name)
}

func (c *counterRecorder) Timer(name string) client.MetricsTimer {
	return client.MetricsNopHandler.Timer(name)
}

type counterInc func(int64)

func (f counterInc) Inc(d int64) { f(d) }

// recordCounters gives this test an environment whose workflow counters go to a recorder.
func (s *retrySuite) recordCounters() *counterRecorder {
	rec := newCounterRecorder()
	s.SetMetricsHandler(rec)
	s.T().Cleanup(func() { s.SetMetricsHandler(nil) })
	s.SetupTest()
	return rec
}

// setAsideKey is the recorded series of MetricReportsSetAside for reason on testQueue.
func setAsideKey(reason string) string {
	return MetricReportsSetAside + "{queue=" + testQueue + ",reason=" + reason + "}"
}

// A naive report after the republish of retry 1 (at 10 s) is counted as retry 1's failure:
// retry 2 is scheduled, nothing is set aside.
func (s *retrySuite) TestNaiveReportAfterRepublishCountsAsItsFailure() {
	p := fixedPolicy(3)
	s.at(15*time.Second, SignalFailureReport, naive(p))
	st := s.startQueryingAt(16*time.Second, naive(p))

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 2, "retry 2 republished")
	s.Equal(StatusScheduled, st.Status)
	s.Equal(1, st.RetryCount)
	s.Require().Len(st.Attempts, 2)
	s.Equal(2, st.Attempts[1].Attempt)
	s.Equal(transient.Reason, st.Attempts[1].Error)
	s.Zero(st.DuplicateReports)
	s.Empty(st.SetAside)
	s.Require().NotEmpty(st.Events)
	note := st.Events[len(st.Events)-1]
	s.Equal("note", note.Kind)
	s.Contains(note.Detail, "counted as the failure of retry 1")
}

// A consumer that only ever reports retry_count 0 goes through the policy's retries to dead,
// never to delivered.
func (s *retrySuite) TestNaiveConsumerEndsDeadNeverDelivered() {
	p := fixedPolicy(3)
	// Republishes at 10 s, 25 s and 40 s; each fails 5 s later.
	for _, at := range []time.Duration{15, 30, 45} {
		s.at(at*time.Second, SignalFailureReport, naive(p))
	}
	st := s.startQueryingAt(50*time.Second, naive(p))

	s.Equal(StatusExpired, s.result().Status)
	s.assertDead(st, policy.CauseExhausted)
	s.Len(s.pub.to(testQueue), 3, "max_retries republishes")
	envs := s.envelopes()
	s.Require().Len(envs, 1)
	s.Equal(3, envs[0].TotalRetries)
	s.Require().Len(envs[0].RetryAttempts, 4)
	for i, a := range envs[0].RetryAttempts {
		s.Equal(i+1, a.Attempt)
	}
	s.Zero(st.DuplicateReports)
}

// A report naming an older republish's key can be told from a failure of the latest: it is
// set aside, counted by reason (state and metric) and shown as an event.
func (s *retrySuite) TestReportForAnOlderKeyIsSetAsideAndCounted() {
	rec := s.recordCounters()
	p := fixedPolicy(3)
	fail1 := report(p, 1, transient)
	fail1.RetryKey = testID + ":1"
	s.at(15*time.Second, SignalFailureReport, fail1) // retry 2 at 25 s
	s.at(27*time.Second, SignalFailureReport, fail1) // a redelivery, after retry 2 went out
	st := s.startQueryingAt(28*time.Second, report(p, 0, transient))

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 2)
	s.Equal(StatusAwaitingOutcome, st.Status)
	s.Equal(1, st.DuplicateReports)
	s.Equal(map[string]int{SetAsideOtherKey: 1}, st.SetAside)
	s.Require().NotNil(st.LastSetAside)
	s.Equal(SetAsideOtherKey, st.LastSetAside.Reason)
	s.Equal(testID+":1", st.LastSetAside.RetryKey)
	s.Contains(st.LastSetAside.Detail, "latest republish is "+testID+":2")
	last := st.Events[len(st.Events)-1]
	s.Equal("report-set-aside", last.Kind)
	s.Contains(last.Detail, "other-key: report for "+testID+":1")
	s.Equal(int64(1), rec.get(setAsideKey(SetAsideOtherKey)))
	s.Len(st.Attempts, 2)
}

// A key-less report the bridge received before the latest republish went out is not that
// republish's failure (a producer published its report twice): set aside. One received
// after it counts.
func (s *retrySuite) TestKeylessReportFromBeforeTheRepublishIsSetAside() {
	rec := s.recordCounters()
	p := fixedPolicy(3)
	var mid State
	s.env.RegisterDelayedCallback(func() {
		out := s.stateNow().Attempts[0].RepublishedAt
		s.Require().False(out.IsZero())
		early := naive(p)
		early.ReportedAt = out.Add(-time.Second)
		s.env.SignalWorkflow(SignalFailureReport, early)
	}, 12*time.Second)
	s.queryAt(13*time.Second, &mid)
	s.env.RegisterDelayedCallback(func() {
		late := naive(p)
		late.ReportedAt = s.stateNow().Attempts[0].RepublishedAt.Add(time.Second)
		s.env.SignalWorkflow(SignalFailureReport, late)
	}, 14*time.Second)
	after := s.startQueryingAt(15*time.Second, naive(p))

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusAwaitingOutcome, mid.Status)
	s.Equal(map[string]int{SetAsideBeforeRepublish: 1}, mid.SetAside)
	s.Len(mid.Attempts, 1)
	s.Equal(StatusScheduled, after.Status, "the later report is retry 1's failure")
	s.Len(after.Attempts, 2)
	s.Equal(int64(1), rec.get(setAsideKey(SetAsideBeforeRepublish)))
	s.Len(s.pub.to(testQueue), 2)
}

// A run from before the change (no version marker on replay) sets the naive report aside as
// behind the count, and the quiet window ends it delivered; it is counted all the same.
func (s *retrySuite) TestNaiveReportOnARunFromBeforeTheChangeIsSetAside() {
	rec := s.recordCounters()
	s.env.OnGetVersion(changeKeylessReportCounts, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	p := fixedPolicy(3)
	s.at(15*time.Second, SignalFailureReport, naive(p))
	st := s.startQueryingAt(16*time.Second, naive(p))

	s.Equal(StatusDelivered, s.result().Status)
	s.Len(s.pub.to(testQueue), 1)
	s.Equal(map[string]int{SetAsideBehindCount: 1}, st.SetAside)
	s.Contains(st.LastSetAside.Detail, "retry_count 0 behind attempt 1")
	s.Equal(int64(1), rec.get(setAsideKey(SetAsideBehindCount)))
}

// The broker's redelivery of the run's first report (its ack was lost after the signal went
// in), arriving after retry 1 went out, has that report's bytes: it is the same report, set
// aside, and retry 1 is not spent. A redelivered report with other bytes still counts.
func (s *retrySuite) TestRedeliveredFirstReportIsSetAside() {
	rec := s.recordCounters()
	p := fixedPolicy(3)
	first := naive(p)
	first.Digest = "d-first"
	again := first
	again.Redelivered = true
	other := naive(p)
	other.Redelivered, other.Digest = true, "d-other"
	s.at(15*time.Second, SignalFailureReport, again)
	var st State
	s.queryAt(16*time.Second, &st)
	s.at(17*time.Second, SignalFailureReport, other)
	st2 := s.startQueryingAt(18*time.Second, first)

	s.Equal(StatusDelivered, s.result().Status)
	s.Equal(StatusAwaitingOutcome, st.Status, "retry 1 still awaits its outcome")
	s.Equal(map[string]int{SetAsideRedelivered: 1}, st.SetAside)
	s.Equal(int64(1), rec.get(setAsideKey(SetAsideRedelivered)))
	s.Equal(StatusScheduled, st2.Status, "a redelivered report with other bytes counts")
	s.Len(s.pub.to(testQueue), 2)
}
