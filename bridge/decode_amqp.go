package bridge

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// The checks of what a republish will write as AMQP short strings. amqp091-go refuses a
// short string over 255 bytes when it writes the frame, so a report carrying one would be
// accepted and then never republished nor dead-lettered: it is poison at ingress instead,
// with a reason naming the field.

// checkName refuses a routing key (or any short string naming something) that is empty when
// required or over the short-string limit.
func checkName(field, v string, required bool) *PoisonError {
	if required && v == "" {
		return poisonf("%s is empty", field)
	}
	return checkShort(field, v)
}

// checkEntityName refuses a queue or exchange name the broker would refuse or the scheduler
// could not keep: over the short-string limit, not UTF-8 (it is a Keyword search attribute
// and a label), or with a NUL (RabbitMQ refuses it; the workflow ID's hashed form separates
// the queue from the message id with one).
func checkEntityName(field, v string, required bool) *PoisonError {
	if pe := checkName(field, v, required); pe != nil {
		return pe
	}
	if !utf8.ValidString(v) {
		return poisonf("%s is not valid UTF-8", field)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return poisonf("%s contains a NUL byte, which AMQP names may not hold", field)
	}
	return nil
}

// checkShort refuses a value over AMQP's short-string limit as the republish will see it.
func checkShort(field, v string) *PoisonError {
	if n := storedLen(v); n > maxNameLen {
		return poisonf("%s is %d bytes long, over AMQP's short-string limit of %d", field, n, maxNameLen)
	}
	return nil
}

// storedLen is the length of s once it has been through the workflow's history: JSON
// coerces it to UTF-8, each invalid byte becoming U+FFFD (3 bytes), so a string that fits
// in 255 bytes on arrival may not fit on the republish.
func storedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			n += len(string(utf8.RuneError))
		} else {
			n += size
		}
		i += size
	}
	return n
}

// checkShortStrings refuses a message whose republish would carry a short string AMQP cannot
// encode: the destination's names, the properties, and every header name at any depth (an
// AMQP field table's keys are short strings). The message id is not checked here: an
// unusable one gets the deterministic fallback (message.MessageIDOrFallback).
func checkShortStrings(m message.Message) *PoisonError {
	if pe := checkEntityName("original queue", m.OriginalQueue, true); pe != nil {
		return pe
	}
	if pe := checkEntityName("original exchange", m.OriginalExchange, false); pe != nil {
		return pe
	}
	p := m.Properties
	for _, f := range []struct{ name, v string }{
		{"original routing key", m.OriginalRoutingKey},
		{"correlation id", m.CorrelationID},
		{"content type", p.ContentType},
		{"content encoding", p.ContentEncoding},
		{"type", p.Type},
		{"app id", p.AppID},
		{"reply-to", p.ReplyTo},
	} {
		if pe := checkShort(f.name, f.v); pe != nil {
			return pe
		}
	}
	return checkHeaderNames(m.Headers, "")
}

// checkHeaderNames refuses a header name, in the headers table or any table within, over the
// short-string limit; path is the enclosing value's, "" for the headers table.
func checkHeaderNames(v any, path string) *PoisonError {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if n := storedLen(k); n > maxNameLen {
				what := "header name"
				if path != "" {
					what = "name of a field in header " + truncate(path, 64)
				}
				return poisonf("%s %q is %d bytes long, over AMQP's short-string limit of %d", what, truncate(k, 40), n, maxNameLen)
			}
			if pe := checkHeaderNames(x[k], p); pe != nil {
				return pe
			}
		}
	case []any:
		for _, e := range x {
			if pe := checkHeaderNames(e, path+"[]"); pe != nil {
				return pe
			}
		}
	}
	return nil
}

// checkDestination refuses a report the operator's destinations do not allow: the
// scheduler's own queues never, and for the rest what guard's rules say.
func checkDestination(rep message.FailureReport, guard *policy.Guard) *PoisonError {
	m := rep.Message
	key := m.OriginalRoutingKey
	if key == "" {
		key = m.OriginalQueue // as the republish does
	}
	err := guard.Check(policy.Destination{
		Queue:      m.OriginalQueue,
		Exchange:   m.OriginalExchange,
		RoutingKey: key,
		Producer:   m.Producer,
		Tenant:     m.TenantID,
	})
	if err != nil {
		return poisonf("%v", err)
	}
	return nil
}
