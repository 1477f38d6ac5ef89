package bridge

import (
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// republished is the republish time of these tests' reports: the scheduler stamps it in
// unix milliseconds.
var republished = testNow.Add(-7*time.Second - 250*time.Millisecond)

// A dead-lettered retry's x-retry-republished-at dates its report, in the forms a consumer
// that copies headers may re-encode it to; the header itself does not travel with the
// message (each republish stamps a fresh one).
func TestDecodeXDeathRepublishedAt(t *testing.T) {
	ms := republished.UnixMilli()
	for name, v := range map[string]any{
		"long, as stamped":        ms,
		"integral double":         float64(ms),
		"decimal string":          " 1772366392750 ",
		"bytes":                   []byte("1772366392750"),
		"RFC 3339":                republished.Format(time.RFC3339Nano),
		"RFC 3339 with an offset": republished.In(time.FixedZone("X", -5*3600)).Format(time.RFC3339Nano),
		"AMQP timestamp":          republished,
	} {
		h := xDeath("orders", "", "orders")
		h["X-Retry-Republished-At"] = v // any spelling
		h["x-retry-count"] = int32(1)
		rep, err := Decode(Delivery{MessageID: "o-1", Headers: h}, testOptions())
		require.NoError(t, err, name)
		assert.True(t, republished.Equal(rep.RepublishedAt), "%s: %v", name, rep.RepublishedAt)
		assert.Empty(t, rep.Notes, name)
		assert.NotContains(t, rep.Message.Headers, "X-Retry-Republished-At", name)
	}
	assert.Equal(t, int64(1772366392750), ms, "the decimal forms above spell this")
}

// A date that is not one is ignored with a note: the report is taken, dated at its arrival.
func TestDecodeXDeathRepublishedAtMalformed(t *testing.T) {
	for name, v := range map[string]any{
		"words":          "yesterday",
		"a fraction":     1.5,
		"zero":           int64(0),
		"before 1970":    int64(-5),
		"a boolean":      true,
		"a table":        amqp.Table{"at": int64(1)},
		"RFC 3339 epoch": "1970-01-01T00:00:00Z",
	} {
		h := xDeath("orders", "", "orders")
		h["x-retry-republished-at"] = v
		rep, err := Decode(Delivery{MessageID: "o-1", Headers: h}, testOptions())
		require.NoError(t, err, name)
		assert.Zero(t, rep.RepublishedAt, name)
		require.Len(t, rep.Notes, 1, name)
		assert.True(t, strings.HasPrefix(rep.Notes[0], "x-retry-republished-at header ignored: "), "%s: %s", name, rep.Notes[0])
	}
	h := xDeath("orders", "", "orders")
	rep, err := Decode(Delivery{MessageID: "o-1", Headers: h}, testOptions())
	require.NoError(t, err)
	assert.Zero(t, rep.RepublishedAt, "no header: no date")
	assert.Empty(t, rep.Notes)
}

// A RetryMessage carries the date as republished_at_ms; the header inside original_headers
// is dropped like every x-retry-* one.
func TestDecodeJSONRepublishedAt(t *testing.T) {
	f := validRetryMessage()
	f["republished_at_ms"] = republished.UnixMilli()
	f["original_headers"] = map[string]any{"x-retry-republished-at": 1, "trace-id": "t"}
	rep, err := decodeJSONFields(t, f)
	require.NoError(t, err)
	assert.True(t, republished.Equal(rep.RepublishedAt), "%v", rep.RepublishedAt)
	assert.Equal(t, map[string]any{"trace-id": "t"}, rep.Message.Headers)
	assert.Empty(t, rep.Notes)

	f["republished_at_ms"] = 0
	rep, err = decodeJSONFields(t, f)
	require.NoError(t, err)
	assert.Zero(t, rep.RepublishedAt, "0 is none, as a client that had no header sends")
	assert.Empty(t, rep.Notes)

	f["republished_at_ms"] = -1
	rep, err = decodeJSONFields(t, f)
	require.NoError(t, err, "a bad date is the breaker's loss, not the message's")
	assert.Zero(t, rep.RepublishedAt)
	assert.Equal(t, []string{"republished_at_ms ignored: -1 is not a date after the epoch"}, rep.Notes)

	f["republished_at_ms"] = "soon"
	_, err = decodeJSONFields(t, f)
	assert.Contains(t, requirePoison(t, err).Reason, "republished_at_ms", "a field of the wrong type is poison, as every other")
}

// datedBreakers records the dates of the failures counted.
type datedBreakers struct {
	fakeBreakers
	mu sync.Mutex
	at []time.Time
}

func (f *datedBreakers) FailedAt(queue string, settings policy.Breaker, at time.Time) {
	f.Failed(queue, settings)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, at)
}

// The bridge hands a counter that dates failures the republish each report answers, and a
// zero date for a report that does not say.
func TestProcessDatesBreakerFailuresByTheirRepublish(t *testing.T) {
	for name, tc := range map[string]struct {
		ms   any
		want time.Time
	}{
		"dated":   {ms: republished.UnixMilli(), want: republished.Truncate(time.Millisecond)},
		"undated": {},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := testSession(t, &fakeReporter{}, &fakePublisher{})
			counted := &datedBreakers{}
			s.b.cfg.Breakers = counted
			s.b.cfg.Decode.Resolver = breakerResolver{}
			fields := validRetryMessage()
			fields["retry_count"] = 1
			if tc.ms != nil {
				fields["republished_at_ms"] = tc.ms
			}
			s.process(&entry{d: amqp.Delivery{Acknowledger: &fakeAck{}, ContentType: "application/json", Body: jsonBody(t, fields), DeliveryTag: 7}})

			assert.Equal(t, 1, counted.failed["orders"])
			require.Len(t, counted.at, 1)
			assert.True(t, tc.want.Equal(counted.at[0]), "%v", counted.at[0])
		})
	}
}

// The name the header is stamped under and read by.
func TestRepublishedAtHeaderName(t *testing.T) {
	assert.Equal(t, "x-retry-republished-at", message.HeaderRetryRepublishedAt)
	assert.True(t, message.HeaderDenied(message.HeaderRetryRepublishedAt))
}
