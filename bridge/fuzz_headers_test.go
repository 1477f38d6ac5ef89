package bridge

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/message/headertest"
)

// headerNames are the names the decoder looks at, in the spellings producers use, plus a
// denied one; other names come from the input.
var headerNames = []string{
	"x-death", "x-retry-count", "X-Retry-Count", "x-retry-after", "x-http-status", "x-error-code",
	"x-error-reason", "x-error-category", "x-retry-key", "x-retry-policy", "x-tenant-id", "CC",
}

// FuzzHeaders feeds arbitrary header tables to both forms of the decoder and to the dead-letter
// envelope: never a panic, only *PoisonError refusals, an accepted report that survives
// Temporal's JSON encoding with only JSON-safe header values, and an envelope that always
// encodes with its raw bytes.
func FuzzHeaders(f *testing.F) {
	f.Add([]byte{}, "application/json", []byte("body"))
	f.Add([]byte{3, 0, 17, 5, 'o', 'r', 'd', 'e', 'r', 0, 0, 3, 2, 11, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f}, "", []byte{0xff})
	f.Add([]byte{7, 0, 17, 1, 'q', 0, 0, 1, 2, 1, '7', 4, 1, 3, '1', 'e', '9', 6, 14, 2, 1, 0, 0, 0, 200, 15, 15, 15, 15}, "text/plain", []byte(`{"original_queue":"q","original_payload":""}`))
	f.Add([]byte{2, 0, 17, 3, 'a', 'b', 'c', 0, 0, 9, 8, 16, 3, 10, 0, 0, 128, 127, 11, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f}, "application/x-protobuf", []byte{})
	f.Fuzz(func(t *testing.T, spec []byte, contentType string, body []byte) {
		h := (&headertest.Gen{B: spec, Names: headerNames}).Table(0)

		checkDecoded(t, Delivery{Headers: h, ContentType: contentType, Body: body, MessageID: "fuzz"})
		rep, err := Decode(Delivery{Headers: h, ContentType: contentType, Body: body}, testOptions())
		if err == nil {
			b, err := json.Marshal(rep)
			if err != nil {
				t.Fatalf("report does not encode: %v", err)
			}
			var back message.FailureReport
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("report does not decode: %v", err)
			}
			for k, v := range rep.Message.Headers {
				if !jsonSafe(v, 0) {
					t.Fatalf("header %q kept with a value JSON cannot carry: %#v", k, v)
				}
			}
			return
		}
		var pe *PoisonError
		if !errors.As(err, &pe) {
			t.Fatalf("error is %T: %v", err, err)
		}
		env := poisonEnvelope(amqp.Delivery{Headers: h, Body: body, ContentType: contentType}, pe, testOptions(), testNow)
		pub, err := deadletter.Publishing(env, deadletter.Options{})
		if err != nil {
			t.Fatalf("envelope does not encode: %v", err)
		}
		if err := pub.Headers.Validate(); err != nil {
			t.Fatalf("envelope headers invalid: %v", err)
		}
		var back message.Envelope
		if err := json.Unmarshal(pub.Body, &back); err != nil {
			t.Fatalf("envelope does not decode: %v", err)
		}
		if string(back.OriginalMessage.Payload) != string(body) {
			t.Fatal("envelope lost the raw bytes")
		}
	})
}

// jsonSafe reports whether v is one of the types the header converter promises.
func jsonSafe(v any, depth int) bool {
	if depth > message.MaxHeaderDepth+1 {
		return false
	}
	switch x := v.(type) {
	case nil, string, bool, int64:
		return true
	case float64:
		return !math.IsNaN(x) && !math.IsInf(x, 0)
	case map[string]any:
		for _, e := range x {
			if !jsonSafe(e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !jsonSafe(e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}
