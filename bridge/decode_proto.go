package bridge

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// protoFields are the fields of RetryMessage's protobuf form by number, with their names and
// proto types as message/retrymessage.proto declares them (a test keeps the two in step).
var protoFields = map[protowire.Number]protoField{
	1: {"message_id", "string"},
	2: {"original_payload", "bytes"},
	3: {"original_queue", "string"},
	4: {"error_reason", "string"},
	5: {"retry_count", "int32"},
	6: {"max_retries", "int32"},
	7: {"next_retry_at_ms", "int64"},
}

// protoField is one field of RetryMessage's protobuf form.
type protoField struct {
	name, protoType string
}

// wireType is how the field is encoded: strings and bytes length-delimited, the integers as
// varints.
func (f protoField) wireType() protowire.Type {
	if f.protoType == "string" || f.protoType == "bytes" {
		return protowire.BytesType
	}
	return protowire.VarintType
}

// decodeProtobuf decodes RetryMessage from the wire format by hand (the contract is seven
// fields; generated code would be more to maintain than this). Unknown fields are skipped, so
// producers may extend the message; malformed wire data and known fields with the wrong wire
// type are poison. As in proto3, an absent original_payload is an empty payload. The JSON
// form's optional fields (event_type, error_type, stack_trace, service, ...) have no field
// number in the contract, so a protobuf report carries none of them; numbering them here
// would be a contract of our own.
func decodeProtobuf(d Delivery, opts DecodeOptions) (message.FailureReport, error) {
	var (
		rep      message.FailureReport
		id       string
		badID    bool
		hasQueue bool
	)
	m := &rep.Message
	fail := func(pe *PoisonError) (message.FailureReport, error) {
		pe.OriginalQueue, pe.MessageID = m.OriginalQueue, id
		return message.FailureReport{}, pe
	}
	b := d.Body
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fail(poisonf("malformed protobuf: %v", protowire.ParseError(n)))
		}
		b = b[n:]
		field, known := protoFields[num]
		if !known {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fail(poisonf("malformed protobuf in unknown field %d: %v", num, protowire.ParseError(n)))
			}
			b = b[n:]
			continue
		}
		name := field.name
		if want := field.wireType(); typ != want {
			return fail(poisonf("%s (field %d) has wire type %d, want %s", name, num, typ, wireTypeName(want)))
		}
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fail(poisonf("malformed protobuf in %s (field %d): %v", name, num, protowire.ParseError(n)))
			}
			b = b[n:]
			switch num {
			case 1:
				// An id that is not UTF-8 is unusable, not poison: the fallback id takes over.
				id, badID = "", !utf8.Valid(v)
				if !badID {
					id = string(v)
				}
			case 2:
				m.Payload = append([]byte(nil), v...)
			case 3:
				if !utf8.Valid(v) {
					return fail(poisonf("original_queue (field 3) is not valid UTF-8"))
				}
				m.OriginalQueue, hasQueue = string(v), true
			case 4:
				rep.Failure.Reason = strings.ToValidUTF8(string(v), "\uFFFD")
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fail(poisonf("malformed protobuf in %s (field %d): %v", name, num, protowire.ParseError(n)))
			}
			b = b[n:]
			switch num {
			case 5, 6:
				// int32 on the wire is the sign-extended 64-bit varint; proto truncates.
				c := int64(int32(v))
				if pe := checkCount(name, c); pe != nil {
					return fail(pe)
				}
				if num == 5 {
					rep.RetryCount = int(c)
				} else {
					rep.MaxRetries = int(c)
				}
			case 7:
				// next_retry_at_ms: the producer's own schedule; the policy decides here.
			}
		}
	}
	if !hasQueue {
		return fail(poisonf("original_queue (field 3) is missing"))
	}
	if pe := checkEntityName("original_queue", m.OriginalQueue, true); pe != nil {
		return fail(pe)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	if badID {
		rep.Notes = append(rep.Notes, "message_id (field 1) is not valid UTF-8")
	}
	m.CorrelationID = d.CorrelationID
	rep.Source = SourceRetryMessage
	return finish(rep, "", id, opts), nil
}

func wireTypeName(t protowire.Type) string {
	if t == protowire.BytesType {
		return "length-delimited"
	}
	return "varint"
}
