package bridge

import (
	"encoding/json"
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// checkDecoded is the fuzz invariant: Decode never panics, fails only with a *PoisonError,
// and an accepted report names its message and queue and survives Temporal's JSON encoding.
func checkDecoded(t *testing.T, d Delivery) {
	rep, err := Decode(d, testOptions())
	if err != nil {
		var pe *PoisonError
		if !errors.As(err, &pe) {
			t.Fatalf("error is %T, not *PoisonError: %v", err, err)
		}
		if pe.Reason == "" || (pe.Kind != KindPoison && pe.Kind != KindOversize) {
			t.Fatalf("poison error without kind or reason: %+v", pe)
		}
		return
	}
	if rep.Message.MessageID == "" || rep.Message.OriginalQueue == "" {
		t.Fatalf("accepted report without id or queue: %+v", rep)
	}
	if len(rep.Message.OriginalQueue) > maxNameLen || len(rep.Message.OriginalExchange) > maxNameLen {
		t.Fatalf("accepted name over %d bytes", maxNameLen)
	}
	if rep.RetryCount < 0 || rep.RetryCount > message.MaxRetryCount || rep.Failure.RetryAfter < 0 || rep.Failure.RetryAfter > MaxRetryAfter {
		t.Fatalf("accepted out-of-range count or retry-after: %+v", rep)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("report does not encode as JSON: %v", err)
	}
	if n := tableSize(rep.Message.Headers); n > MaxHeaderBytes {
		t.Fatalf("accepted headers of %d bytes: the republish could not carry them", n)
	}
	if p, n := largestContainer(rep.Message.Headers, "headers"); n > MaxHeaderEntries {
		t.Fatalf("accepted %s with %d entries: amqp091-go consumers could not read the republish", p, n)
	}
	if d := amqpDepth(rep.Message.Headers, 0); d > 32 {
		t.Fatalf("accepted headers nested %d deep: amqp091-go consumers could not read the republish", d)
	}
	checkRepublishable(t, rep, testOptions().DefaultDeadLetterQueue)
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add(jsonBody(f, validRetryMessage()), "application/json")
	f.Add([]byte(`{"original_queue":"q","original_payload":"","original_headers":{"a":{"b":[1,2.5,null,true]}},"retry_after_ms":1e3}`), "")
	f.Add([]byte(`{"original_queue":"q","original_payload":"AA==","retry_count":-0,"max_retries":3.0}`), "application/json; charset=utf-8")
	f.Add([]byte(`{"original_queue":"q","original_payload":"AA==","http_status":1e400}`), "application/json")
	f.Add([]byte(`null`), "application/json")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		checkDecoded(t, Delivery{ContentType: contentType, Body: body, MessageID: "amqp-id"})
	})
}

func FuzzDecodeProtobuf(f *testing.F) {
	f.Add(protoMessage{id: "p-1", payload: []byte("x"), queue: "orders", reason: "boom", retryCount: 1, maxRet: 3}.encode())
	f.Add(protoMessage{queue: "orders", retryCount: -1}.encode())
	f.Add(protowire.AppendTag(nil, 1000, protowire.StartGroupType))
	f.Add([]byte{0x1a, 0x80})
	f.Fuzz(func(t *testing.T, body []byte) {
		checkDecoded(t, Delivery{ContentType: "application/x-protobuf", Body: body})
	})
}

func FuzzDecodeXDeath(f *testing.F) {
	f.Add([]byte("payload"), "orders", "orders.x", "orders.created", "3", "120", "503", "m-1", "application/json", int64(2))
	f.Add([]byte(`{"original_queue":"q","original_payload":""}`), "retry.delay", "", "", "", "Mon, 02 Jan 2006 15:04:05 GMT", "", "", "", int64(-1))
	f.Add([]byte{}, "", "", "", "x", "-1", "1e3", "", "application/x-protobuf", int64(1<<40))
	f.Fuzz(func(t *testing.T, body []byte, queue, exchange, key, retryCount, retryAfter, status, id, contentType string, n int64) {
		h := amqp.Table{
			"x-death": []any{amqp.Table{
				"queue":        queue,
				"exchange":     exchange,
				"routing-keys": []any{key},
				"count":        n,
			}},
			"x-retry-after": retryAfter,
			"x-http-status": status,
			"x-error-code":  float64(n) / 3,
			"x-tenant-id":   []byte(id),
			"trace":         amqp.Table{"n": n, "s": retryCount, "b": body},
		}
		if retryCount != "" {
			h["x-retry-count"] = retryCount
		} else {
			h["x-retry-count"] = n
		}
		checkDecoded(t, Delivery{ContentType: contentType, MessageID: id, Headers: h, Body: body})
	})
}

// amqpDepth is the deepest container's depth as amqp091-go counts it: the headers table is 0,
// a table or array value in it 1, and so on (it refuses more than 32).
func amqpDepth(v any, depth int) int {
	deepest := depth
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if _, ok := e.(map[string]any); ok {
				deepest = max(deepest, amqpDepth(e, depth+1))
			} else if _, ok := e.([]any); ok {
				deepest = max(deepest, amqpDepth(e, depth+1))
			}
		}
	case []any:
		for _, e := range x {
			if _, ok := e.(map[string]any); ok {
				deepest = max(deepest, amqpDepth(e, depth+1))
			} else if _, ok := e.([]any); ok {
				deepest = max(deepest, amqpDepth(e, depth+1))
			}
		}
	}
	return deepest
}
