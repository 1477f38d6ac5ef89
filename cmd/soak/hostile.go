package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// hostile is one bad report the producer mixes into its traffic: a report a naive or hostile
// producer sends. None may be republished anywhere; each must end as exactly one envelope
// on the dead-letter queue with the reason it was refused.
type hostile struct {
	id, kind   string
	pub        amqp.Publishing
	deadReason string
}

// hostileKinds are the bad reports, cycled: each aims a publish where the rules forbid it or
// carries content AMQP cannot carry. A report aimed at the ingress carries a RetryMessage for
// an original queue with an id the soak never sent: if it were republished into the ingress,
// the smuggled message would arrive as an unknown id.
func hostileKinds(ingress, dlq string, originals []string) []func(id string) hostile {
	long := strings.Repeat("x", 300)
	report := func(id, kind, reason string, m message.RetryMessage) hostile {
		m.MessageID, m.ErrorReason = id, "hostile: "+kind
		if m.OriginalPayload == nil {
			m.OriginalPayload = []byte("junk")
		}
		body, _ := json.Marshal(m)
		return hostile{id: id, kind: kind, deadReason: reason,
			pub: amqp.Publishing{ContentType: "application/json", MessageId: id, Body: body, DeliveryMode: amqp.Persistent}}
	}
	return []func(string) hostile{
		func(id string) hostile {
			inner, _ := json.Marshal(message.RetryMessage{MessageID: "smuggled-" + id, OriginalPayload: []byte("x"), OriginalQueue: originals[0], ErrorReason: "x"})
			return report(id, "aimed at the ingress", "poison", message.RetryMessage{OriginalQueue: ingress, OriginalPayload: inner})
		},
		func(id string) hostile {
			return report(id, "aimed at the dead-letter queue", "poison", message.RetryMessage{OriginalQueue: dlq})
		},
		func(id string) hostile {
			return report(id, "through amq.direct", "poison", message.RetryMessage{OriginalQueue: originals[0], OriginalExchange: "amq.direct", OriginalRoutingKey: originals[0]})
		},
		func(id string) hostile {
			return report(id, "300-byte correlation id", "poison", message.RetryMessage{OriginalQueue: originals[0], CorrelationID: long})
		},
		func(id string) hostile {
			return report(id, "300-byte header name", "poison", message.RetryMessage{OriginalQueue: originals[0], OriginalHeaders: map[string]any{long: "v"}})
		},
		func(id string) hostile {
			return hostile{id: id, kind: "not JSON", deadReason: "poison",
				pub: amqp.Publishing{ContentType: "application/json", MessageId: id, Body: []byte("{not json"), DeliveryMode: amqp.Persistent}}
		},
	}
}

// makeHostile is the run's bad reports: n of them, the kinds in turn.
func makeHostile(n int, ingress, dlq string, originals []string) []hostile {
	kinds := hostileKinds(ingress, dlq, originals)
	out := make([]hostile, n)
	for i := range out {
		out[i] = kinds[i%len(kinds)](fmt.Sprintf("hostile-%06d", i))
	}
	return out
}

// publishHostile sends one bad report, retrying until the broker confirms it.
func (t *traffic) publishHostile(ctx context.Context, pub *broker.Publisher, h hostile) error {
	return t.publishRetrying(ctx, pub, h.id, h.pub)
}

// hostileRecord is what the soak saw of one bad report.
type hostileRecord struct {
	hostile
	published bool
	envelopes []hostileEnvelope
}

// hostileEnvelope is one envelope read for a bad report.
type hostileEnvelope struct {
	Reason string `json:"reason"`
	DLQID  string `json:"dlq_id"`
}

// hostileFigures are the bad reports' row of the result.
type hostileFigures struct {
	Sent int `json:"sent"`
	// DeadLettered ended as exactly one envelope with the expected reason.
	DeadLettered int `json:"dead_lettered"`
	// Missing never reached the dead-letter queue: a report dropped in silence (lost).
	Missing int `json:"missing"`
	// Wrong ended with another reason, or with envelopes of more than one dlqId (unexpected).
	Wrong int `json:"wrong"`
	// DuplicateEnvelopes are envelopes published again with the same dlqId (a bridge
	// restarted between its confirm and its ack): allowed, as for any dead letter.
	DuplicateEnvelopes int `json:"duplicate_envelopes"`
}

// judgeHostile counts the bad reports' ends; l.mu is held.
func judgeHostile(l *ledger) (hostileFigures, []problem) {
	var f hostileFigures
	var probs []problem
	for _, h := range l.hostileOrder {
		if !h.published {
			continue
		}
		f.Sent++
		switch {
		case len(h.envelopes) == 0:
			f.Missing++
			probs = append(probs, problem{MessageID: h.id, Check: "hostile report dead-lettered", Detail: h.kind + ": no envelope"})
		case sameEnvelope(h.envelopes, h.deadReason):
			f.DeadLettered++
			f.DuplicateEnvelopes += len(h.envelopes) - 1
		default:
			f.Wrong++
			probs = append(probs, problem{MessageID: h.id, Check: "hostile report dead-lettered",
				Detail: fmt.Sprintf("%s: envelopes %v, want %s under one dlqId", h.kind, h.envelopes, h.deadReason)})
		}
	}
	return f, probs
}

// sameEnvelope says whether envs are one envelope, published once or again with the same
// dlqId, with the reason want.
func sameEnvelope(envs []hostileEnvelope, want string) bool {
	for _, e := range envs {
		if e.Reason != want || e.DLQID != envs[0].DLQID {
			return false
		}
	}
	return len(envs) > 0
}
