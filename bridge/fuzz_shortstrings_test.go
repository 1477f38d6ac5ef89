package bridge

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// checkRepublishable is the invariant of an accepted report: every short string its
// republish writes fits AMQP's 255 bytes, names hold no NUL, its headers encode as an AMQP
// table after Temporal's JSON round trip, and its destination is none of the scheduler's own
// queues.
func checkRepublishable(t *testing.T, rep message.FailureReport, own ...string) {
	t.Helper()
	m := rep.Message
	key := m.OriginalRoutingKey
	if key == "" {
		key = m.OriginalQueue
	}
	p := m.Properties
	for name, v := range map[string]string{
		"message id": m.MessageID, "queue": m.OriginalQueue, "exchange": m.OriginalExchange, "routing key": key,
		"correlation id": m.CorrelationID, "content type": p.ContentType, "content encoding": p.ContentEncoding,
		"type": p.Type, "app id": p.AppID, "reply-to": p.ReplyTo,
	} {
		if len(v) > 255 {
			t.Fatalf("accepted a %s of %d bytes: the republish cannot carry it", name, len(v))
		}
	}
	if strings.IndexByte(m.OriginalQueue, 0) >= 0 || strings.IndexByte(m.OriginalExchange, 0) >= 0 {
		t.Fatalf("accepted a name with a NUL: %q %q", m.OriginalQueue, m.OriginalExchange)
	}
	for _, q := range own {
		if m.OriginalQueue == q {
			t.Fatalf("accepted the scheduler's own queue %q as a destination", q)
		}
	}
	if strings.HasPrefix(m.OriginalExchange, "amq.") {
		t.Fatalf("accepted exchange %q under the secure default", m.OriginalExchange)
	}
	b, err := json.Marshal(m.Headers)
	if err != nil {
		t.Fatalf("headers do not encode as JSON: %v", err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("headers do not decode: %v", err)
	}
	table, err := message.AMQPHeaders(back)
	if err != nil {
		t.Fatalf("accepted headers amqp091 refuses: %v", err)
	}
	if k, ok := longKey(table); ok {
		t.Fatalf("accepted a header name of %d bytes: an AMQP field table's keys are short strings", len(k))
	}
}

// longKey finds a key over 255 bytes in a table, at any depth.
func longKey(v any) (string, bool) {
	switch x := v.(type) {
	case amqp.Table:
		for k, e := range x {
			if len(k) > 255 {
				return k, true
			}
			if k, ok := longKey(e); ok {
				return k, true
			}
		}
	case []any:
		for _, e := range x {
			if k, ok := longKey(e); ok {
				return k, true
			}
		}
	}
	return "", false
}

// FuzzShortStrings: any delivery either decodes to a report whose every short string fits
// and whose headers encode with amqp091, aimed at none of the scheduler's own queues, or is
// poison. Each string may be stretched past the limit (n repeats it).
func FuzzShortStrings(f *testing.F) {
	f.Add("orders", "", "", "c-1", "application/json", "h", "n", "svc", "m-1", uint8(1))
	f.Add("retry.scheduled", "amq.direct", "retry.scheduled", "", "", "", "", "", "", uint8(1))
	f.Add("q\x00", "ex", "k", "c", "t", "x-death", "CC", "", "id", uint8(200))
	f.Add("manual-review.pending", "events", "", "cid", "text/plain", "a", "b", "u", "", uint8(30))
	f.Fuzz(func(t *testing.T, queue, exchange, key, corr, contentType, header, nested, user, id string, n uint8) {
		stretch := func(s string) string {
			if n > 1 && len(s) > 0 && len(s)*int(n) <= 4096 {
				return strings.Repeat(s, int(n))
			}
			return s
		}
		opts := Config{Queue: "retry.scheduled", DeadLetterQueue: "manual-review.pending",
			Decode: DecodeOptions{Resolver: policy.NewCatalog(), Now: testOptions().Now}}.withDefaults().Decode
		own := []string{"retry.scheduled", "manual-review.pending"}

		body, err := json.Marshal(map[string]any{
			"message_id": id, "original_payload": base64.StdEncoding.EncodeToString([]byte("p")),
			"original_queue": queue, "original_exchange": exchange, "original_routing_key": stretch(key),
			"correlation_id": stretch(corr), "original_content_type": stretch(contentType),
			"original_headers": map[string]any{stretch(header): map[string]any{stretch(nested): 1}},
		})
		if err != nil {
			t.Skip()
		}
		check := func(d Delivery) {
			rep, err := Decode(d, opts)
			if err != nil {
				requirePoison(t, err)
				return
			}
			checkRepublishable(t, rep, own...)
			if rep.Message.Producer != strings.ToValidUTF8(user, "\uFFFD") {
				t.Fatalf("producer %q recorded as %q", user, rep.Message.Producer)
			}
		}
		check(Delivery{ContentType: "application/json", Body: body, UserID: user, CorrelationID: corr})

		// The dead-lettered form: names from x-death, properties from the delivery.
		check(Delivery{
			Body: []byte("p"), UserID: user, MessageID: stretch(id),
			Headers: amqp.Table{
				"x-death": []any{amqp.Table{"queue": stretch(queue), "exchange": exchange, "routing-keys": []any{key}}},
				header:    amqp.Table{stretch(nested): "v"},
			},
			ContentType: stretch(contentType), CorrelationID: stretch(corr), Type: stretch(key), AppID: stretch(user), ReplyTo: stretch(exchange),
		})
	})
}
