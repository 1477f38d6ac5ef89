package tracing

import (
	"context"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C trace-context header names, as the propagators write them.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// AMQPCarrier is a propagation.TextMapCarrier over AMQP message headers. Converting an
// amqp.Table to it copies nothing. AMQP header names are case-sensitive where the W3C ones
// are not, so Get falls back to a case-insensitive match, and Set replaces every spelling of
// the name. Values are read as strings (a byte-array value too); Set writes strings. Set on a
// nil table panics, like any write to a nil map.
type AMQPCarrier amqp.Table

var _ propagation.TextMapCarrier = AMQPCarrier(nil)

// Get returns the header's value as a string, "" when it is absent or not text.
func (c AMQPCarrier) Get(key string) string {
	v, ok := c[key]
	if !ok {
		for k, kv := range c {
			if strings.EqualFold(k, key) {
				v, ok = kv, true
				break
			}
		}
	}
	if !ok {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

// Set sets the header, removing any other spelling of its name.
func (c AMQPCarrier) Set(key, value string) {
	c.del(key)
	c[key] = value
}

// Keys lists the header names.
func (c AMQPCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// del removes the header in every spelling.
func (c AMQPCarrier) del(key string) {
	for k := range c {
		if strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
}

// ExtractAMQP returns ctx with the trace context (and baggage) of a message's headers, read
// with the global propagator: a no-op, and so free, while tracing is off.
func ExtractAMQP(ctx context.Context, headers amqp.Table) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, AMQPCarrier(headers))
}

// InjectAMQP writes ctx's trace context (and baggage) into headers with the global
// propagator, so that the message continues ctx's trace. When ctx has a span, a traceparent
// or tracestate the headers already carry (the failed message's, in any spelling) is removed
// first: it belongs to an earlier hop of the trace, and a stale tracestate must not travel
// with the new traceparent. Without a span (tracing off), or with a global propagator that
// does not write traceparent, the headers are left as they are. headers must not be nil.
func InjectAMQP(ctx context.Context, headers amqp.Table) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	p := otel.GetTextMapPropagator()
	if !slices.Contains(p.Fields(), HeaderTraceparent) {
		return
	}
	c := AMQPCarrier(headers)
	c.del(HeaderTraceparent)
	c.del(HeaderTracestate)
	p.Inject(ctx, c)
}
