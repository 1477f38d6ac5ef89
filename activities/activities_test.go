package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

type published struct {
	exchange, key string
	mandatory     bool
	msg           amqp.Publishing
}

// fakePublisher records publishes and fails with err when set.
type fakePublisher struct {
	mu  sync.Mutex
	got []published
	err error
}

func (f *fakePublisher) Publish(_ context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.got = append(f.got, published{exchange, key, mandatory, msg})
	return nil
}

var testNow = time.Date(2026, 5, 1, 12, 0, 2, 500_000_000, time.UTC)

func newTestActivities(pub Publisher) (*Activities, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return &Activities{Publisher: pub, Metrics: NewMetrics(reg), Now: func() time.Time { return testNow }}, reg
}

func testMessage() message.Message {
	return message.Message{
		MessageID:        "m-1",
		Payload:          []byte{0, 1, 2, 0xff},
		OriginalQueue:    "orders",
		OriginalExchange: "",
		Headers:          map[string]any{"tenant": "acme", "count": 2, "cc": []any{"spy"}},
		Properties: message.Properties{
			ContentType: "application/json", ContentEncoding: "utf-8", Type: "order.created",
			AppID: "orders-svc", ReplyTo: "replies", Priority: 4, Timestamp: time.Unix(1_700_000_000, 0).UTC(),
		},
		CorrelationID: "corr-1",
	}
}

// run executes an activity the way a worker does: the input goes through the data converter.
func run(t *testing.T, acts *Activities, fn any, in any) (*testsuite.TestActivityEnvironment, func(any), error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	val, err := env.ExecuteActivity(fn, in)
	return env, func(out any) { require.NoError(t, val.Get(out)) }, err
}

func TestRepublish(t *testing.T) {
	pub := &fakePublisher{}
	acts, reg := newTestActivities(pub)
	in := RepublishInput{Message: testMessage(), Attempt: 2, Key: "m-1:2", ScheduledAt: testNow.Add(-1500 * time.Millisecond)}

	_, get, err := run(t, acts, acts.Republish, in)
	require.NoError(t, err)
	var res RepublishResult
	get(&res)
	assert.True(t, testNow.Equal(res.PublishedAt))

	require.Len(t, pub.got, 1)
	p := pub.got[0]
	assert.Equal(t, "", p.exchange)
	assert.Equal(t, "orders", p.key, "default exchange: the queue is the routing key")
	assert.True(t, p.mandatory)
	m := p.msg
	assert.Equal(t, in.Message.Payload, m.Body)
	assert.Equal(t, "m-1", m.MessageId)
	assert.Equal(t, "corr-1", m.CorrelationId)
	assert.Equal(t, amqp.Persistent, m.DeliveryMode)
	assert.Equal(t, "application/json", m.ContentType)
	assert.Equal(t, "utf-8", m.ContentEncoding)
	assert.Equal(t, "order.created", m.Type)
	assert.Equal(t, "orders-svc", m.AppId)
	assert.Equal(t, "replies", m.ReplyTo)
	assert.Equal(t, uint8(4), m.Priority)
	assert.True(t, in.Message.Properties.Timestamp.Equal(m.Timestamp))
	assert.Equal(t, amqp.Table{"tenant": "acme", "count": int64(2), "x-retry-count": int32(2), "x-retry-key": "m-1:2",
		"x-retry-republished-at": testNow.UnixMilli()}, m.Headers)

	assert.Equal(t, 1.0, metricValue(t, reg, "retries_executed_total", "queue", "orders", "status", "success"))
	assert.Equal(t, 1.0, metricValue(t, reg, "retry_lateness_seconds"), "one observation")
}

func TestRepublishRoutesToOriginalExchange(t *testing.T) {
	pub := &fakePublisher{}
	acts, _ := newTestActivities(pub)
	msg := testMessage()
	msg.OriginalExchange, msg.OriginalRoutingKey = "events", "order.created"
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: msg, Attempt: 1, Key: "m-1:1"})
	require.NoError(t, err)
	require.Len(t, pub.got, 1)
	assert.Equal(t, "events", pub.got[0].exchange)
	assert.Equal(t, "order.created", pub.got[0].key)
}

func TestRepublishUnroutableIsNonRetryable(t *testing.T) {
	acts, reg := newTestActivities(&fakePublisher{err: fmt.Errorf("publish to exchange \"\" key \"orders\": %w: 312 NO_ROUTE", broker.ErrUnroutable)})
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1"})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, ErrTypeUnroutable, appErr.Type())
	assert.Contains(t, appErr.Error(), "NO_ROUTE")
	assert.Equal(t, 1.0, metricValue(t, reg, "retries_executed_total", "queue", "orders", "status", "unroutable"))
}

func TestRepublishOtherErrorsAreRetryable(t *testing.T) {
	acts, reg := newTestActivities(&fakePublisher{err: fmt.Errorf("publish: %w", broker.ErrTimeout)})
	_, _, err := run(t, acts, acts.Republish, RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1"})
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		assert.False(t, appErr.NonRetryable(), "%v", err)
	}
	assert.Contains(t, err.Error(), "publisher confirm timed out")
	assert.Equal(t, 1.0, metricValue(t, reg, "retries_executed_total", "queue", "orders", "status", "failed"))
}

// Called directly (no data converter) a header that has no AMQP encoding is refused for good.
func TestRepublishInvalidHeadersAreNonRetryable(t *testing.T) {
	pub := &fakePublisher{}
	acts, _ := newTestActivities(pub)
	msg := testMessage()
	msg.Headers = map[string]any{"bad": struct{}{}}
	_, err := acts.Republish(context.Background(), RepublishInput{Message: msg, Attempt: 1, Key: "m-1:1"})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, ErrTypeInvalidMessage, appErr.Type())
	assert.Empty(t, pub.got)
}

// Activities built without logger, metrics or clock (as the workflow tests do) still work.
func TestRepublishZeroValueActivities(t *testing.T) {
	pub := &fakePublisher{}
	acts := &Activities{Publisher: pub}
	res, err := acts.Republish(context.Background(), RepublishInput{Message: testMessage(), Attempt: 1, Key: "m-1:1", ScheduledAt: time.Now()})
	require.NoError(t, err)
	assert.False(t, res.PublishedAt.IsZero())
}

func testEnvelope() message.Envelope {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	return message.Envelope{
		DLQID: "dlq-1", MessageID: "m-1", OriginalQueue: "orders", FailureCategory: "transient",
		DeadReason: "exhausted", Policy: "standard", TotalRetries: 3, FirstFailureAt: t0, RoutedToDlqAt: t0.Add(time.Minute),
		CorrelationID: "corr-1",
		RetryAttempts: []message.Attempt{
			{Attempt: 1, Timestamp: t0, Error: "timeout", Category: "transient", HTTPStatus: 504},
			{Attempt: 2, Timestamp: t0.Add(2 * time.Second), Error: "timeout", Category: "transient", RepublishedAt: t0.Add(time.Second), RetryKey: "m-1:1"},
		},
		OriginalMessage: testMessage(),
		Metadata:        message.Metadata{Service: "orders-svc", DLQTimestamp: t0.Add(time.Minute), FirstAttemptTimestamp: t0, LastAttemptTimestamp: t0.Add(2 * time.Second)},
	}
}

func TestDeadLetter(t *testing.T) {
	pub := &fakePublisher{}
	acts, reg := newTestActivities(pub)
	env := testEnvelope()
	_, _, err := run(t, acts, acts.DeadLetter, DeadLetterInput{Queue: "manual-review.pending", Envelope: env})
	require.NoError(t, err)

	require.Len(t, pub.got, 1)
	p := pub.got[0]
	assert.Equal(t, "", p.exchange)
	assert.Equal(t, "manual-review.pending", p.key)
	assert.True(t, p.mandatory)
	assert.Equal(t, amqp.Persistent, p.msg.DeliveryMode)
	assert.Equal(t, "application/json", p.msg.ContentType)
	assert.Equal(t, "dlq-1", p.msg.MessageId)
	assert.Equal(t, amqp.Table{"x-dead-reason": "exhausted", "x-original-queue": "orders"}, p.msg.Headers)

	var got message.Envelope
	require.NoError(t, json.Unmarshal(p.msg.Body, &got))
	// Headers went through JSON once more (the data converter): compare that way.
	want := env.Enriched() // the fields derived at publish time travel too
	want.OriginalMessage.Headers = map[string]any{"tenant": "acme", "count": 2.0, "cc": []any{"spy"}}
	assert.Equal(t, want, got)
	assert.Equal(t, 1.0, metricValue(t, reg, "dead_letters_total", "queue", "manual-review.pending", "reason", "exhausted"))
}

func TestDeadLetterUnroutableIsNonRetryable(t *testing.T) {
	acts, _ := newTestActivities(&fakePublisher{err: fmt.Errorf("x: %w", broker.ErrUnroutable)})
	_, _, err := run(t, acts, acts.DeadLetter, DeadLetterInput{Queue: "nowhere", Envelope: testEnvelope()})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, ErrTypeUnroutable, appErr.Type())
}

func TestDeadLetterWithoutQueue(t *testing.T) {
	acts, _ := newTestActivities(&fakePublisher{})
	err := acts.DeadLetter(context.Background(), DeadLetterInput{Envelope: testEnvelope()})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewMetrics(reg), NewMetrics(reg)
	assert.Same(t, a.RetriesExecuted, b.RetriesExecuted)
}

// metricValue reads a counter's value or a histogram's sample count from reg, for the series
// with the given label pairs; 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labelPairs ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labelPairs); i += 2 {
				if labels[labelPairs[i]] != labelPairs[i+1] {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
