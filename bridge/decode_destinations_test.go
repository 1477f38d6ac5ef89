package bridge

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Every value the republish writes as an AMQP short string is checked at decode: over 255
// bytes (or, for names, with a NUL or not UTF-8) it is poison, with a reason naming the field.
func TestDecodeJSONShortStrings(t *testing.T) {
	long := strings.Repeat("c", 300)
	for _, tc := range []struct {
		name  string
		set   func(map[string]any)
		field string
	}{
		{"correlation id", func(f map[string]any) { f["correlation_id"] = long }, "correlation id is 300 bytes long, over AMQP's short-string limit of 255"},
		{"content type", func(f map[string]any) { f["original_content_type"] = "application/" + long }, "content type is 312 bytes long, over AMQP's short-string limit of 255"},
		{"header name", func(f map[string]any) { f["original_headers"] = map[string]any{long: "v"} }, `header name "cccccccccccccccccccccccccccccccccccccccc…" is 300 bytes long, over AMQP's short-string limit of 255`},
		{"nested header name", func(f map[string]any) {
			f["original_headers"] = map[string]any{"outer": []any{map[string]any{long: 1}}}
		}, `name of a field in header outer[] "cccccccccccccccccccccccccccccccccccccccc…" is 300 bytes long`},
		{"queue", func(f map[string]any) { f["original_queue"] = long }, "original_queue is 300 bytes long, over AMQP's short-string limit of 255"},
		{"exchange", func(f map[string]any) { f["original_exchange"] = long }, "original_exchange is 300 bytes long"},
		{"routing key", func(f map[string]any) {
			f["original_exchange"], f["original_routing_key"] = "events", long
		}, "original_routing_key is 300 bytes long"},
		{"NUL in queue", func(f map[string]any) { f["original_queue"] = "orders\x00eu" }, "original_queue contains a NUL byte"},
		{"NUL in exchange", func(f map[string]any) { f["original_exchange"] = "ev\x00" }, "original_exchange contains a NUL byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := validRetryMessage()
			tc.set(f)
			_, err := decodeJSONFields(t, f)
			pe := requirePoison(t, err)
			assert.Equal(t, KindPoison, pe.Kind)
			assert.Contains(t, pe.Reason, tc.field)
			assert.Equal(t, "m-1", pe.MessageID, "the envelope names the message")
		})
	}

	// At the limit, each is accepted.
	f := validRetryMessage()
	at := strings.Repeat("c", 255)
	f["correlation_id"], f["original_content_type"], f["original_headers"] = at, at, map[string]any{at: "v"}
	f["original_exchange"], f["original_routing_key"] = at, at
	rep, err := decodeJSONFields(t, f)
	require.NoError(t, err)
	assert.Equal(t, at, rep.Message.CorrelationID)
}

// The dead-lettered form copies the delivery's properties; they arrive as short strings, but
// a name can still hold what a name may not.
func TestDecodeXDeathShortStrings(t *testing.T) {
	long := strings.Repeat("p", 256)
	for _, tc := range []struct {
		name string
		set  func(*Delivery)
		want string
	}{
		{"type", func(d *Delivery) { d.Type = long }, "type is 256 bytes long"},
		{"app id", func(d *Delivery) { d.AppID = long }, "app id is 256 bytes long"},
		{"reply-to", func(d *Delivery) { d.ReplyTo = long }, "reply-to is 256 bytes long"},
		{"content encoding", func(d *Delivery) { d.ContentEncoding = long }, "content encoding is 256 bytes long"},
		{"correlation id", func(d *Delivery) { d.CorrelationID = long }, "correlation id is 256 bytes long"},
		// Each invalid byte becomes U+FFFD (3 bytes) in the workflow's history.
		{"correlation id once in the history", func(d *Delivery) { d.CorrelationID = strings.Repeat("\xff", 100) }, "correlation id is 300 bytes long"},
		{"header name once in the history", func(d *Delivery) { d.Headers["k"+strings.Repeat("\xfe", 90)] = "v" }, "is 271 bytes long"},
		{"NUL in queue", func(d *Delivery) { d.Headers = xDeath("orders\x00", "", "") }, "x-death[0].queue contains a NUL byte"},
		{"queue not UTF-8", func(d *Delivery) { d.Headers = xDeath("orders\xff", "", "") }, "x-death[0].queue is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Delivery{Body: []byte("body"), Headers: xDeath("orders", "orders.x", "k"), MessageID: "o-1"}
			tc.set(&d)
			_, err := Decode(d, testOptions())
			assert.Contains(t, requirePoison(t, err).Reason, tc.want)
		})
	}
}

// An unusable message id is not poison: it keeps the documented fallback.
func TestDecodeLongMessageIDFallsBack(t *testing.T) {
	f := validRetryMessage()
	f["message_id"] = strings.Repeat("i", 300)
	rep, err := decodeJSONFields(t, f)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(rep.Message.MessageID), 255)
	assert.Equal(t, message.MessageIDOrFallback(f["message_id"].(string), "orders", []byte(`{"order":42}`)), rep.Message.MessageID)
}

func TestDecodeMessageIDNotUTF8FallsBack(t *testing.T) {
	rep, err := Decode(Delivery{Body: []byte("b"), Headers: xDeath("orders", "", ""), MessageID: "id-\xff"}, testOptions())
	require.NoError(t, err)
	assert.Equal(t, message.FallbackMessageID("orders", []byte("b")), rep.Message.MessageID)
	assert.Contains(t, strings.Join(rep.Notes, "\n"), "message id unusable")
}

// A short-string poison goes the way of all poison: its envelope publishes (every property a
// short string) and its parked report can be republished to the ingress by an operator.
func TestShortStringPoisonIsParkable(t *testing.T) {
	f := validRetryMessage()
	f["correlation_id"] = strings.Repeat("c", 300)
	body := jsonBody(t, f)
	d := amqp.Delivery{ContentType: "application/json", Body: body, MessageId: "m-1", CorrelationId: "c-amqp", UserId: "billing-svc"}
	_, err := Decode(DeliveryFrom(d), testOptions())
	pe := requirePoison(t, err)

	env := poisonEnvelope(d, pe, testOptions(), testNow)
	assert.Equal(t, "billing-svc", env.OriginalMessage.Producer, "the parked item names its producer")
	assert.Equal(t, "billing-svc", env.Metadata.Producer)
	pub, err := deadletter.Publishing(env, deadletter.Options{})
	require.NoError(t, err)
	for _, v := range []string{pub.CorrelationId, pub.MessageId, pub.ContentType, pub.AppId} {
		assert.LessOrEqual(t, len(v), 255)
	}
	var back message.Envelope
	require.NoError(t, json.Unmarshal(pub.Body, &back))
	assert.Equal(t, body, back.OriginalMessage.Payload, "the envelope keeps the raw bytes")
	assert.Contains(t, back.DeadDetail, "correlation id is 300 bytes long")

	park := parkReport(env, pe, "retry.scheduled", "manual-review.pending", testOptions(), nil, "")
	assert.Nil(t, checkShortStrings(park.Message), "the parked item's retry can be republished")
	assert.Equal(t, "retry.scheduled", park.Message.OriginalRoutingKey)
}

// destinationOptions decode as the bridge does with a policy file: Config wires the ingress
// and dead-letter queues into the guard.
func destinationOptions(t *testing.T, file string) DecodeOptions {
	t.Helper()
	c, err := policy.Parse([]byte(file))
	require.NoError(t, err)
	cfg := Config{Queue: "retry.scheduled", DeadLetterQueue: "manual-review.pending", Decode: DecodeOptions{Resolver: c, Now: testOptions().Now}}.withDefaults()
	return cfg.Decode
}

const routedDLQ = `
routes:
  - queue: "billing.*"
    policy: standard
    dead_letter_queue: billing.dead
`

func TestDecodeRefusesDestinations(t *testing.T) {
	secure := destinationOptions(t, routedDLQ)
	explicit := destinationOptions(t, routedDLQ+`
destinations:
  queues: ["orders.*", "billing.*"]
  producers:
    - user: billing-svc
      queues: ["billing.*"]
      tenants: [acme]
`)
	inner := base64JSON(t, map[string]any{"original_queue": "secret.queue", "original_payload": "", "message_id": "inner"})
	for _, tc := range []struct {
		name string
		opts DecodeOptions
		set  func(map[string]any, *Delivery)
		want string
	}{
		{"the ingress", secure, func(f map[string]any, _ *Delivery) {
			f["original_queue"], f["original_payload"] = "retry.scheduled", inner
		}, `destination not allowed: queue "retry.scheduled" is the scheduler's own ingress queue`},
		{"the manual-review queue", secure, func(f map[string]any, _ *Delivery) { f["original_queue"] = "manual-review.pending" },
			`destination not allowed: queue "manual-review.pending" is the scheduler's own manual-review queue`},
		{"a configured dead-letter queue", secure, func(f map[string]any, _ *Delivery) { f["original_queue"] = "billing.dead" },
			`destination not allowed: queue "billing.dead" is the scheduler's own dead-letter queue`},
		{"amq.direct", secure, func(f map[string]any, _ *Delivery) {
			f["original_exchange"], f["original_routing_key"] = "amq.direct", "retry.scheduled"
		}, `destination not allowed: exchange "amq.direct" with routing key "retry.scheduled"`},
		{"a queue outside an explicit block", explicit, func(f map[string]any, _ *Delivery) { f["original_queue"] = "audit" },
			`destination not allowed: queue "audit" matches no pattern in destinations.queues`},
		{"a producer outside its queues", explicit, func(f map[string]any, d *Delivery) { d.UserID = "billing-svc"; f["tenant_id"] = "acme" },
			`destination not allowed: producer "billing-svc" may not use queue "orders.eu"`},
		{"a producer outside its tenants", explicit, func(f map[string]any, d *Delivery) {
			d.UserID = "billing-svc"
			f["original_queue"], f["tenant_id"] = "billing.invoices", "globex"
		}, `destination not allowed: producer "billing-svc" may not use tenant "globex"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := validRetryMessage()
			f["original_queue"] = "orders.eu"
			d := Delivery{ContentType: "application/json"}
			tc.set(f, &d)
			d.Body = jsonBody(t, f)
			_, err := Decode(d, tc.opts)
			pe := requirePoison(t, err)
			assert.Equal(t, KindPoison, pe.Kind)
			assert.Contains(t, pe.Reason, tc.want)
		})
	}

	// The dead-lettered form is checked alike: a forged x-death naming the ingress.
	_, err := Decode(Delivery{Body: []byte("x"), Headers: xDeath("retry.scheduled", "", "")}, secure)
	assert.Contains(t, requirePoison(t, err).Reason, `queue "retry.scheduled" is the scheduler's own ingress queue`)

	// What the binding allows goes through, and the producer is recorded.
	f := validRetryMessage()
	f["original_queue"], f["tenant_id"] = "billing.invoices", "acme"
	rep, err := Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f), UserID: "billing-svc"}, explicit)
	require.NoError(t, err)
	assert.Equal(t, "billing-svc", rep.Message.Producer)
	assert.Equal(t, "billing.dead", rep.DeadLetterQueue)
}

func base64JSON(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

func TestDecodeCapsMaxRetries(t *testing.T) {
	opts := destinationOptions(t, `
policies:
  capped:
    backoff: {type: schedule, delays: [1s]}
    max_retries: 3
    max_retries_ceiling: 10
`)
	f := validRetryMessage()
	f["max_retries"] = 100
	rep, err := Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f)}, opts)
	require.NoError(t, err)
	assert.Equal(t, policy.DefaultMaxRetriesCeiling, rep.MaxRetries, "the default ceiling")
	assert.Contains(t, rep.Notes, `max_retries 100 capped to policy "default"'s ceiling of 25`)

	f["policy"] = "capped"
	rep, err = Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f)}, opts)
	require.NoError(t, err)
	assert.Equal(t, 10, rep.MaxRetries)

	f["max_retries"] = 7
	rep, err = Decode(Delivery{ContentType: "application/json", Body: jsonBody(t, f)}, opts)
	require.NoError(t, err)
	assert.Equal(t, 7, rep.MaxRetries, "under the ceiling, the message's own")
	for _, n := range rep.Notes {
		assert.NotContains(t, n, "capped")
	}
}

// A report carries the broker's redelivered flag and the digest of its bytes: the workflow
// knows a redelivery of a report it applied.
func TestDecodeCarriesRedeliveryAndDigest(t *testing.T) {
	body := jsonBody(t, validRetryMessage())
	d := amqp.Delivery{ContentType: "application/json", Body: body, MessageId: "m-1", Redelivered: true}
	rep, err := Decode(DeliveryFrom(d), testOptions())
	require.NoError(t, err)
	assert.True(t, rep.Redelivered)
	assert.Len(t, rep.Digest, 32)
	d.Redelivered = false
	again, err := Decode(DeliveryFrom(d), testOptions())
	require.NoError(t, err)
	assert.False(t, again.Redelivered)
	assert.Equal(t, rep.Digest, again.Digest, "the same bytes, the same digest")
	d.Body = jsonBody(t, func() map[string]any { f := validRetryMessage(); f["error_reason"] = "other"; return f }())
	other, err := Decode(DeliveryFrom(d), testOptions())
	require.NoError(t, err)
	assert.NotEqual(t, rep.Digest, other.Digest)
}
