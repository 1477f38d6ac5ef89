package retryclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// statusError is a third-party error carrying an HTTP status.
type statusError struct{ code int }

func (e statusError) Error() string   { return fmt.Sprintf("upstream said %d", e.code) }
func (e statusError) HTTPStatus() int { return e.code }

func TestClassify(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name string
		err  error
		want classification
	}{
		{"plain", errors.New("boom"), classification{}},
		{"nil", nil, classification{}},
		{"transient", Transient(errors.New("x")), classification{category: "transient"}},
		{"permanent wrapped", fmt.Errorf("handle: %w", Permanent(errors.New("bad"))), classification{category: "permanent"}},
		{"validation", Validation(errors.New("x")), classification{category: "validation"}},
		{"rate limited", RateLimited(errors.New("x"), 3*time.Second), classification{category: "rate-limited", retryAfter: 3 * time.Second}},
		{"http error", fmt.Errorf("call: %w", &HTTPError{Status: 503, RetryAfter: time.Second}), classification{httpStatus: 503, retryAfter: time.Second}},
		{"HTTPStatus method", statusError{429}, classification{httpStatus: 429}},
		{"status out of range", statusError{1000}, classification{}},
		{"category and status", Permanent(&HTTPError{Status: 503}), classification{category: "permanent", httpStatus: 503}},
		{"rate limit's retry-after wins", RateLimited(&HTTPError{Status: 429, RetryAfter: time.Second}, 2*time.Second), classification{category: "rate-limited", httpStatus: 429, retryAfter: 2 * time.Second}},
		{"ECONNRESET in a net.OpError", fmt.Errorf("call payments: %w", reset), classification{errorCode: "ECONNRESET"}},
		{"ECONNREFUSED", syscall.ECONNREFUSED, classification{errorCode: "ECONNREFUSED"}},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), classification{errorCode: "EPIPE"}},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), classification{errorCode: "ETIMEDOUT"}},
		{"canceled is no timeout", context.Canceled, classification{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, classify(tc.err))
		})
	}
}

func TestBuildMessage(t *testing.T) {
	d := amqp.Delivery{
		MessageId: "m-1", Body: []byte{0, 0xff, 'x'}, ContentType: "application/octet-stream",
		CorrelationId: "corr-7", Type: "order.created", Exchange: "orders-x", RoutingKey: "eu.orders",
		Headers: amqp.Table{
			"X-Retry-Count": int32(2), "x-retry-key": []byte("m-1:2"), "X-Retry-Republished-At": int64(1772366392750),
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=1",
			"x-death": []any{amqp.Table{"count": int64(1)}}, "x-error-reason": "old failure",
			"x-tenant": "acme", "x-amount": int64(10), "x-blob": []byte{0xff},
		},
	}
	m := BuildMessage(d, "orders", Transient(fmt.Errorf("payments: %w", syscall.ETIMEDOUT)), Options{Service: "svc", ServiceVersion: "1.2", Policy: "p", TenantID: "t"})
	require.Equal(t, "m-1", m.MessageID)
	require.Equal(t, d.Body, m.OriginalPayload)
	require.Equal(t, "orders", m.OriginalQueue)
	require.Empty(t, m.OriginalExchange, "a retry goes back to the queue unless ViaExchange")
	require.Empty(t, m.OriginalRoutingKey)
	require.Equal(t, "application/octet-stream", m.OriginalContentType)
	require.Equal(t, "corr-7", m.CorrelationID)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, 2, m.RetryCount)
	require.Equal(t, "m-1:2", m.RetryKey)
	require.Equal(t, int64(1772366392750), m.RepublishedAtMs)
	require.Equal(t, "transient", m.ErrorCategory)
	require.Equal(t, "ETIMEDOUT", m.ErrorCode)
	require.Equal(t, "payments: "+syscall.ETIMEDOUT.Error(), m.ErrorReason)
	require.Equal(t, "svc", m.Service)
	require.Equal(t, "1.2", m.ServiceVersion)
	require.Equal(t, "p", m.Policy)
	require.Equal(t, "t", m.TenantID)
	require.Equal(t, map[string]any{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=1",
		"x-tenant": "acme", "x-amount": int64(10), "x-blob": "/w==",
	}, m.OriginalHeaders, "the scheduler's own and failure headers are dropped, values made JSON")

	via := BuildMessage(d, "orders", nil, Options{ViaExchange: true})
	require.Equal(t, "orders-x", via.OriginalExchange)
	require.Equal(t, "eu.orders", via.OriginalRoutingKey)
	require.Empty(t, via.ErrorReason)

	d.Exchange = ""
	require.Empty(t, BuildMessage(d, "orders", nil, Options{ViaExchange: true}).OriginalExchange, "the default exchange routes by queue")
}

// The republish time is copied in the forms a broker or library may have turned the
// scheduler's long into; anything else, or none, is 0: the scheduler dates the report at its
// arrival.
func TestRepublishedAtMs(t *testing.T) {
	at := time.UnixMilli(1772366392750)
	for v, want := range map[any]int64{
		int64(1772366392750):              1772366392750,
		float64(1772366392750):            1772366392750,
		"1772366392750":                   1772366392750,
		at.UTC().Format(time.RFC3339Nano): 1772366392750,
		int32(5):                          5,
		"soon":                            0,
		1.5:                               0,
		int64(-3):                         0,
		true:                              0,
	} {
		require.Equal(t, want, republishedAtMs(amqp.Table{"x-retry-republished-at": v}), "%#v", v)
	}
	require.Equal(t, int64(1772366392750), republishedAtMs(amqp.Table{"x-retry-republished-at": []byte("1772366392750")}))
	require.Equal(t, int64(1772366392750), republishedAtMs(amqp.Table{"x-retry-republished-at": at}), "an AMQP timestamp")
	require.Zero(t, republishedAtMs(nil))
}

func TestBuildMessageFirstDelivery(t *testing.T) {
	m := BuildMessage(amqp.Delivery{}, "q", errors.New("x"), Options{})
	require.Zero(t, m.RetryCount)
	require.Empty(t, m.RetryKey)
	require.Nil(t, m.OriginalHeaders)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	require.Equal(t, "", fields["original_payload"], "an empty body is an empty payload, not a missing one")
	require.Equal(t, "q", fields["original_queue"])
}

func TestRetryCountJunk(t *testing.T) {
	for _, v := range []any{"3", int64(-1), 2.5, nil} {
		require.Zero(t, retryCount(amqp.Table{"x-retry-count": v}), "%#v", v)
	}
	require.Equal(t, 7, retryCount(amqp.Table{"x-retry-count": uint8(7)}))
}

// A forged count past the service's limit must neither start the message over (0) nor be
// refused by the service as poison: the limit is past every policy's retries.
func TestRetryCountPastTheLimitIsTheLimit(t *testing.T) {
	for _, v := range []any{int32(message.MaxRetryCount + 1), int64(1 << 40), uint64(1 << 63)} {
		require.Equal(t, message.MaxRetryCount, retryCount(amqp.Table{"x-retry-count": v}), "%#v", v)
	}
	require.Equal(t, message.MaxRetryCount, retryCount(amqp.Table{"x-retry-count": int32(message.MaxRetryCount)}))
}

func TestRetryAfterCapped(t *testing.T) {
	m := BuildMessage(amqp.Delivery{}, "q", RateLimited(nil, 90*24*time.Hour), Options{})
	require.Equal(t, (30 * 24 * time.Hour).Milliseconds(), m.RetryAfterMs)
	require.Equal(t, "rate-limited", m.ErrorReason, "a nil cause reads as its category")
}

func TestReasonBounded(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	m := BuildMessage(amqp.Delivery{}, "q", errors.New(long), Options{})
	require.LessOrEqual(t, len(m.ErrorReason), DefaultMaxReasonBytes)
	require.True(t, utf8.ValidString(m.ErrorReason))
	require.True(t, strings.HasSuffix(m.ErrorReason, "…"))

	short := BuildMessage(amqp.Delivery{}, "q", errors.New("abcdef"), Options{MaxReasonBytes: 5})
	require.Equal(t, "ab…", short.ErrorReason)

	// Below the mark's 3 bytes the limit still holds, on a character boundary.
	for limit, want := range map[int]string{1: "a", 2: "a"} {
		m := BuildMessage(amqp.Delivery{}, "q", errors.New("aé"), Options{MaxReasonBytes: limit})
		require.Equal(t, want, m.ErrorReason, "limit %d", limit)
	}
}

func TestHTTPErrorText(t *testing.T) {
	require.Equal(t, "http status 503", (&HTTPError{Status: 503}).Error())
	err := &HTTPError{Status: 500, Err: errors.New("db down")}
	require.Equal(t, "http status 500: db down", err.Error())
	require.ErrorIs(t, Transient(err), err.Err)
}

func TestNewNeedsConnection(t *testing.T) {
	_, err := New(nil, Options{})
	require.Error(t, err)
}
