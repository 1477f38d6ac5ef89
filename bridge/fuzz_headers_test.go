package bridge

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"retry-scheduler/message"
)

// tableGen turns fuzz bytes into AMQP header tables of every field type amqp091 can hand the
// bridge (and a few it cannot: NaN, Inf, deep nesting), under names the decoder reads.
type tableGen struct{ b []byte }

func (g *tableGen) next() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *tableGen) bytes(n int) []byte {
	n = min(n, len(g.b))
	out := g.b[:n]
	g.b = g.b[n:]
	return out
}

func (g *tableGen) u64() uint64 {
	var buf [8]byte
	copy(buf[:], g.bytes(8))
	return binary.LittleEndian.Uint64(buf[:])
}

func (g *tableGen) str() string { return string(g.bytes(int(g.next()) % 48)) }

// headerNames are the names the decoder looks at, in the spellings producers use, plus a
// denied one; other names come from the input.
var headerNames = []string{
	"x-death", "x-retry-count", "X-Retry-Count", "x-retry-after", "x-http-status", "x-error-code",
	"x-error-reason", "x-error-category", "x-retry-key", "x-retry-policy", "x-tenant-id", "CC",
}

func (g *tableGen) table(depth int) amqp.Table {
	t := amqp.Table{}
	for n := int(g.next() % 8); n > 0 && len(g.b) > 0; n-- {
		var k string
		if c := g.next(); int(c) < 2*len(headerNames) && c%2 == 0 {
			k = headerNames[int(c)/2]
		} else {
			k = g.str()
		}
		t[k] = g.value(depth + 1)
	}
	return t
}

func (g *tableGen) value(depth int) any {
	switch g.next() % 18 {
	case 0:
		return nil
	case 1:
		return g.str()
	case 2:
		return g.bytes(int(g.next()) % 32)
	case 3:
		return int8(g.next())
	case 4:
		return int16(g.u64())
	case 5:
		return int32(g.u64())
	case 6:
		return int64(g.u64())
	case 7:
		return uint8(g.next())
	case 8:
		return uint16(g.u64())
	case 9:
		return uint32(g.u64())
	case 10:
		return math.Float32frombits(uint32(g.u64()))
	case 11:
		return math.Float64frombits(g.u64())
	case 12:
		return g.next()%2 == 0
	case 13:
		return time.Unix(int64(g.u64()%(1<<40)), 0)
	case 14:
		return amqp.Decimal{Scale: g.next(), Value: int32(g.u64())}
	case 15:
		if depth > 40 {
			return "deep"
		}
		return g.table(depth)
	case 16:
		if depth > 40 {
			return nil
		}
		a := []any{}
		for n := int(g.next() % 4); n > 0; n-- {
			a = append(a, g.value(depth+1))
		}
		return a
	default:
		// A well-formed x-death entry list with a queue from the input.
		return []any{amqp.Table{"queue": g.str(), "exchange": g.str(), "routing-keys": []any{g.str()}, "count": int64(g.next())}}
	}
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
		g := &tableGen{b: spec}
		h := g.table(0)

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
		pub, err := envelopePublishing(env)
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
	if depth > maxHeaderDepth+1 {
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
