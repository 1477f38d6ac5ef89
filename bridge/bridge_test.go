package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// fakeAck records how a delivery was settled.
type fakeAck struct {
	mu     sync.Mutex
	acks   int
	nacks  int
	requeu bool
	err    error
}

func (a *fakeAck) Ack(uint64, bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acks++
	return a.err
}

func (a *fakeAck) Nack(_ uint64, _ bool, requeue bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nacks++
	a.requeu = requeue
	return a.err
}

func (a *fakeAck) Reject(uint64, bool) error { panic("not used") }

// fakeReporter returns err (if any) and records reports.
type fakeReporter struct {
	mu      sync.Mutex
	err     error
	reports []message.FailureReport
}

func (s *fakeReporter) Report(_ context.Context, r message.FailureReport) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.reports = append(s.reports, r)
	return nil
}

type published struct {
	exchange, key string
	mandatory     bool
	msg           amqp.Publishing
}

type fakePublisher struct {
	mu   sync.Mutex
	err  error
	msgs []published
}

func (p *fakePublisher) Publish(_ context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.msgs = append(p.msgs, published{exchange, key, mandatory, msg})
	return nil
}

// onlyEnvelope is the one message published, decoded as an envelope.
func (p *fakePublisher) onlyEnvelope(t *testing.T) message.Envelope {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.msgs, 1)
	var env message.Envelope
	require.NoError(t, json.Unmarshal(p.msgs[0].msg.Body, &env))
	return env
}

// testSession is a session of a bridge whose channel is current, without a broker.
func testSession(t *testing.T, reporter Reporter, pub DeadLetterPublisher) (*session, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	b := New(Config{Decode: testOptions(), ReportTimeout: time.Second}, nil, reporter, pub, nil, m)
	b.gen = 1
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &session{b: b, gen: 1, ctx: ctx, cancel: cancel, results: make(chan result, 1)}, m
}

func retryDelivery(t *testing.T, ack amqp.Acknowledger) amqp.Delivery {
	return amqp.Delivery{Acknowledger: ack, ContentType: "application/json", Body: jsonBody(t, validRetryMessage()), DeliveryTag: 7}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func outcomes(m *Metrics, o string) float64 {
	return counterValue(m.deliveries.WithLabelValues(o))
}

func TestProcessAccepted(t *testing.T) {
	st := &fakeReporter{}
	s, m := testSession(t, st, &fakePublisher{})
	ack := &fakeAck{}

	r := s.process(&entry{d: retryDelivery(t, ack)})

	assert.Equal(t, OutcomeAccepted, r.outcome)
	assert.Equal(t, 1, ack.acks)
	assert.Equal(t, 0, ack.nacks)
	require.Len(t, st.reports, 1)
	assert.Equal(t, "m-1", st.reports[0].Message.MessageID)
	assert.Equal(t, 1.0, outcomes(m, OutcomeAccepted))
	assert.Equal(t, 1.0, counterValue(m.scheduled.WithLabelValues("orders")))
}

func TestProcessStarterFailsHolds(t *testing.T) {
	probe := errors.New("temporal down")
	for name, cfg := range map[string]func(*Config){
		"no probe":               func(*Config) {},
		"probe fails":            func(c *Config) { c.Probe = func(context.Context) error { return probe } },
		"temporal says too busy": func(c *Config) { c.Probe = func(context.Context) error { return nil } },
	} {
		t.Run(name, func(t *testing.T) {
			err := errors.New("temporal unreachable")
			if name == "temporal says too busy" {
				err = Unavailable(err)
			}
			s, m := testSession(t, &fakeReporter{err: err}, &fakePublisher{})
			cfg(&s.b.cfg)
			ack := &fakeAck{}
			e := &entry{d: retryDelivery(t, ack)}

			r := s.process(e)

			assert.Equal(t, OutcomePaused, r.outcome)
			assert.Same(t, e, r.paused)
			assert.ErrorContains(t, r.err, "temporal unreachable")
			assert.Equal(t, 0, ack.acks+ack.nacks, "neither acked nor requeued: no delivery spent")
			assert.Equal(t, 0, e.strikes, "an outage is not the message's fault")
			assert.Equal(t, 1.0, outcomes(m, OutcomePaused))
		})
	}
}

func TestProcessRefusedWhileTemporalAnswersIsPoisonAfterTries(t *testing.T) {
	pub := &fakePublisher{}
	st := &fakeReporter{err: errors.New("context deadline exceeded")}
	s, m := testSession(t, st, pub)
	s.b.cfg.Probe = func(context.Context) error { return nil }
	s.b.cfg.ReportTries = 3
	s.b.cfg.ReconnectDelay = time.Millisecond
	ack := &fakeAck{}
	e := &entry{d: retryDelivery(t, ack)}

	r := s.process(e)

	assert.Equal(t, OutcomePoison, r.outcome)
	assert.Equal(t, 3, e.strikes)
	assert.Equal(t, 1, ack.acks)
	env := pub.onlyEnvelope(t)
	assert.Equal(t, "report failed 3 times while Temporal answered other calls: context deadline exceeded", env.DeadDetail)
	assert.Equal(t, "m-1", env.MessageID)
	assert.Equal(t, 1.0, outcomes(m, OutcomePoison))
}

func TestProcessStrikesSurviveAHold(t *testing.T) {
	st := &fakeReporter{err: errors.New("refused")}
	s, _ := testSession(t, st, &fakePublisher{})
	up := true
	s.b.cfg.Probe = func(context.Context) error {
		if up {
			up = false // Temporal goes down after the first failure
			return nil
		}
		return errors.New("down")
	}
	s.b.cfg.ReconnectDelay = time.Millisecond
	e := &entry{d: retryDelivery(t, &fakeAck{})}

	r := s.process(e)

	assert.Equal(t, OutcomePaused, r.outcome)
	assert.Equal(t, 1, e.strikes, "the try made while Temporal answered is kept")
}

func TestProcessStarterPermanent(t *testing.T) {
	pub := &fakePublisher{}
	s, m := testSession(t, &fakeReporter{err: Permanent(errors.New("invalid argument"))}, pub)
	ack := &fakeAck{}

	r := s.process(&entry{d: retryDelivery(t, ack)})

	assert.Equal(t, OutcomePoison, r.outcome)
	assert.Equal(t, 1, ack.acks)
	env := pub.onlyEnvelope(t)
	assert.Equal(t, "report rejected: invalid argument", env.DeadDetail)
	assert.Equal(t, "orders", env.OriginalQueue)
	assert.Equal(t, "m-1", env.MessageID)
	assert.Equal(t, 1.0, outcomes(m, OutcomePoison))
}

func TestProcessPoison(t *testing.T) {
	pub := &fakePublisher{}
	st := &fakeReporter{}
	s, m := testSession(t, st, pub)
	ack := &fakeAck{}
	body := []byte(`{"original_queue":"orders","original_payload":"!!"}`)
	d := amqp.Delivery{Acknowledger: ack, ContentType: "application/json", MessageId: "bad-1", CorrelationId: "c-1",
		Headers: amqp.Table{"trace": "t", "cc": "x"}, Body: body}

	r := s.process(&entry{d: d})

	assert.Equal(t, OutcomePoison, r.outcome)
	assert.Equal(t, 1, ack.acks)
	// Parked as a dead workflow: the raw bytes and the decode error, a retry routed back to
	// the ingress queue.
	require.Len(t, st.reports, 1)
	park := st.reports[0]
	require.NotNil(t, park.Poison)
	assert.Equal(t, message.PoisonKindPoison, park.Poison.Kind)
	assert.Contains(t, park.Poison.Reason, "original_payload is not standard base64")
	assert.Equal(t, len(body), park.Poison.Size)
	assert.False(t, park.Poison.Truncated)
	assert.Equal(t, "retry.scheduled", park.Poison.IngressQueue)
	assert.Equal(t, body, park.Message.Payload)
	assert.Equal(t, "bad-1", park.Message.MessageID)
	assert.Equal(t, "orders", park.Message.OriginalQueue)
	assert.Equal(t, "retry.scheduled", park.Message.OriginalRoutingKey)
	assert.Equal(t, "", park.Message.OriginalExchange)
	assert.Equal(t, SourcePoison, park.Source)
	assert.Equal(t, "manual-review.pending", park.DeadLetterQueue)
	require.Len(t, pub.msgs, 1)
	p := pub.msgs[0]
	assert.Equal(t, "", p.exchange)
	assert.Equal(t, "manual-review.pending", p.key)
	assert.True(t, p.mandatory)
	assert.Equal(t, amqp.Persistent, p.msg.DeliveryMode)
	assert.Equal(t, "application/json", p.msg.ContentType)
	assert.Equal(t, amqp.Table{"x-dead-reason": "poison", "x-original-queue": "orders"}, p.msg.Headers)

	var env message.Envelope
	require.NoError(t, json.Unmarshal(p.msg.Body, &env))
	assert.Equal(t, "poison", env.DeadReason)
	assert.Contains(t, env.DeadDetail, "original_payload is not standard base64")
	assert.Equal(t, "bad-1", env.MessageID)
	assert.Equal(t, "orders", env.OriginalQueue)
	assert.Equal(t, body, env.OriginalMessage.Payload)
	assert.Equal(t, map[string]any{"trace": "t"}, env.OriginalMessage.Headers)
	assert.Equal(t, "c-1", env.CorrelationID)
	assert.Equal(t, p.msg.MessageId, env.DLQID)
	assert.Equal(t, park.Poison.DLQID, env.DLQID)
	assert.Equal(t, "retry/retry.scheduled/orders/bad-1", env.WorkflowID, "parked under the ingress queue, never a reported message's workflow")
	assert.NotNil(t, env.RetryAttempts)
	assert.Equal(t, 1.0, outcomes(m, OutcomePoison))

	// A redelivered poison message yields the same envelope id, so duplicates are recognisable.
	s.process(&entry{d: d})
	require.Len(t, pub.msgs, 2)
	assert.Equal(t, pub.msgs[0].msg.MessageId, pub.msgs[1].msg.MessageId)
}

func TestProcessOversize(t *testing.T) {
	pub := &fakePublisher{}
	s, m := testSession(t, &fakeReporter{}, pub)
	s.b.cfg.Decode.MaxMessageBytes = 10
	ack := &fakeAck{}
	body := []byte("0123456789ABC")

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, Headers: xDeath("orders", "", "orders"), Body: body}})

	assert.Equal(t, OutcomeOversize, r.outcome)
	assert.Equal(t, 1, ack.acks)
	env := pub.onlyEnvelope(t)
	assert.Equal(t, "oversize", env.DeadReason)
	assert.Equal(t, body, env.OriginalMessage.Payload)
	assert.Equal(t, "orders", env.OriginalQueue)
	assert.Equal(t, "oversize", pub.msgs[0].msg.Headers["x-dead-reason"])
	assert.Equal(t, 1.0, outcomes(m, OutcomeOversize))
}

func TestProcessOversizeIsParkedTruncated(t *testing.T) {
	pub := &fakePublisher{}
	st := &fakeReporter{}
	s, _ := testSession(t, st, pub)
	s.b.cfg.Decode.MaxMessageBytes = 1000
	ack := &fakeAck{}
	body := bytes.Repeat([]byte("x"), message.MaxPoisonPayloadBytes+100)

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, Headers: xDeath("orders", "", "orders"), MessageId: "big-1", Body: body}})

	assert.Equal(t, OutcomeOversize, r.outcome)
	assert.Equal(t, 1, ack.acks)
	env := pub.onlyEnvelope(t)
	assert.Equal(t, body, env.OriginalMessage.Payload, "the envelope keeps every byte")
	require.Len(t, st.reports, 1)
	park := st.reports[0]
	assert.Equal(t, message.PoisonKindOversize, park.Poison.Kind)
	assert.True(t, park.Poison.Truncated)
	assert.Equal(t, len(body), park.Poison.Size)
	assert.Len(t, park.Message.Payload, message.MaxPoisonPayloadBytes, "the workflow keeps at most 64 KiB")
	assert.Equal(t, message.PoisonWorkflowID("retry.scheduled", "orders", "big-1"), env.WorkflowID)
}

func TestProcessPoisonHeldWhileTemporalIsDown(t *testing.T) {
	pub := &fakePublisher{}
	st := &fakeReporter{err: errors.New("connection refused")}
	s, m := testSession(t, st, pub)
	ack := &fakeAck{}
	e := &entry{d: amqp.Delivery{Acknowledger: ack, ContentType: "text/plain", Body: []byte("junk")}}

	r := s.process(e)

	assert.Equal(t, OutcomePaused, r.outcome, "the envelope is on the queue, but the parked workflow is not: held like a failed report")
	assert.Equal(t, 0, ack.acks+ack.nacks)
	assert.Len(t, pub.msgs, 1)
	assert.Equal(t, 1.0, outcomes(m, OutcomePaused))

	// Temporal is back: the held delivery is parked and acked, its envelope not published twice.
	st.mu.Lock()
	st.err = nil
	st.mu.Unlock()
	r = s.process(r.paused)

	assert.Equal(t, OutcomePoison, r.outcome)
	assert.Equal(t, 1, ack.acks)
	assert.Len(t, pub.msgs, 1)
	assert.Len(t, st.reports, 1)
}

func TestProcessPoisonEnvelopeAloneWhenParkingFailsForGood(t *testing.T) {
	pub := &fakePublisher{}
	s, _ := testSession(t, &fakeReporter{err: errors.New("payload rejected")}, pub)
	s.b.cfg.Probe = func(context.Context) error { return nil } // Temporal answers: the failure is the message's
	ack := &fakeAck{}

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, ContentType: "text/plain", Body: []byte("junk")}})

	assert.Equal(t, OutcomePoison, r.outcome)
	assert.Equal(t, 1, ack.acks, "the envelope alone stands for the delivery")
	assert.Len(t, pub.msgs, 1)
}

func TestProcessDeadLetterPublishFails(t *testing.T) {
	s, m := testSession(t, &fakeReporter{}, &fakePublisher{err: errors.New("unroutable")})
	ack := &fakeAck{}

	r := s.process(&entry{d: amqp.Delivery{Acknowledger: ack, ContentType: "text/plain", Body: []byte("junk")}})

	assert.Equal(t, OutcomePaused, r.outcome, "held, not dropped and not requeued")
	assert.Equal(t, 0, ack.acks+ack.nacks)
	assert.Equal(t, 1.0, outcomes(m, OutcomePaused))
}

func TestProcessStaleGeneration(t *testing.T) {
	st := &fakeReporter{}
	s, m := testSession(t, st, &fakePublisher{})
	ack := &fakeAck{}
	// A newer channel exists: this session's delivery tags mean other messages there.
	s.b.gen = 2

	r := s.process(&entry{d: retryDelivery(t, ack)})

	assert.Equal(t, OutcomeDroppedStale, r.outcome)
	assert.Equal(t, 0, ack.acks+ack.nacks)
	assert.Len(t, st.reports, 1, "reported; the redelivery will be deduplicated by workflow id")
	assert.Equal(t, 1.0, outcomes(m, OutcomeDroppedStale))
	assert.Equal(t, 0.0, counterValue(m.scheduled.WithLabelValues("orders")))
}

func TestRetireStopsAcks(t *testing.T) {
	s, _ := testSession(t, &fakeReporter{}, &fakePublisher{})
	ack := &fakeAck{}
	s.retire()
	assert.False(t, s.settle(amqp.Delivery{Acknowledger: ack}, true))
	assert.Equal(t, 0, ack.acks)
	assert.Error(t, s.ctx.Err(), "in-flight reports are cancelled")
}

func TestSettleChannelRefuses(t *testing.T) {
	s, _ := testSession(t, &fakeReporter{}, &fakePublisher{})
	ack := &fakeAck{err: amqp.ErrClosed}
	r := s.process(&entry{d: retryDelivery(t, ack)})
	assert.Equal(t, OutcomeDroppedStale, r.outcome)
}

func TestPermanent(t *testing.T) {
	assert.Nil(t, Permanent(nil))
	base := errors.New("bad")
	err := Permanent(base)
	assert.True(t, IsPermanent(err))
	assert.True(t, IsPermanent(errors.Join(errors.New("x"), err)))
	assert.ErrorIs(t, err, base)
	assert.False(t, IsPermanent(base))
}

func TestUnavailable(t *testing.T) {
	assert.Nil(t, Unavailable(nil))
	base := errors.New("busy")
	err := fmt.Errorf("report: %w", Unavailable(base))
	assert.True(t, IsUnavailable(err))
	assert.ErrorIs(t, err, base)
	assert.False(t, IsUnavailable(base))
	assert.False(t, IsPermanent(err))
}

func TestJitterSpreadsWithinHalf(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 200 {
		j := jitter(time.Second)
		require.GreaterOrEqual(t, j, 500*time.Millisecond)
		require.LessOrEqual(t, j, time.Second)
		seen[j] = true
	}
	assert.Greater(t, len(seen), 100, "not the same wait for every bridge")
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	assert.Equal(t, "retry.scheduled", c.Queue)
	assert.Equal(t, "manual-review.pending", c.DeadLetterQueue)
	assert.Equal(t, DefaultPrefetch, c.Prefetch)
	assert.Equal(t, 16, c.Workers)
	assert.Equal(t, 10*time.Second, c.ReportTimeout)
	assert.Equal(t, 500*time.Millisecond, c.ReconnectDelay)
	assert.Equal(t, DefaultReportTries, c.ReportTries)
	assert.Equal(t, DefaultMaxMessageBytes, c.Decode.MaxMessageBytes)
	assert.NotNil(t, c.Decode.Resolver)

	c = Config{DeadLetterQueue: "dlq"}.withDefaults()
	assert.Equal(t, "dlq", c.Decode.DefaultDeadLetterQueue)
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewMetrics(reg)
	b := NewMetrics(reg)
	a.outcome(OutcomeAccepted)
	assert.Equal(t, 1.0, outcomes(b, OutcomeAccepted))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "bridge_deliveries_total" {
			assert.Len(t, f.GetMetric(), 6, "every outcome is exported from the start")
		}
	}
}
