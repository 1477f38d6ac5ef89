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
func decodeProtobuf(d Delivery, _ DecodeOptions) (decoded, error) {
	var r protoReader
	m := &r.rep.Message
	fail := func(pe *PoisonError) (decoded, error) {
		pe.OriginalQueue, pe.MessageID = m.OriginalQueue, r.id
		return decoded{}, pe
	}
	b := d.Body
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fail(poisonf("malformed protobuf: %v", protowire.ParseError(n)))
		}
		b = b[n:]
		if _, known := protoFields[num]; !known {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fail(poisonf("malformed protobuf in unknown field %d: %v", num, protowire.ParseError(n)))
			}
			b = b[n:]
			continue
		}
		n, pe := r.field(num, typ, b)
		if pe != nil {
			return fail(pe)
		}
		b = b[n:]
	}
	if !r.hasQueue {
		return fail(poisonf("original_queue (field 3) is missing"))
	}
	if pe := checkEntityName("original_queue", m.OriginalQueue, true); pe != nil {
		return fail(pe)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	if r.badID {
		r.rep.Notes = append(r.rep.Notes, "message_id (field 1) is not valid UTF-8")
	}
	m.CorrelationID = d.CorrelationID
	r.rep.Source = SourceRetryMessage
	return decoded{rep: r.rep, rawID: r.id}, nil
}

// protoReader is a protobuf RetryMessage read so far.
type protoReader struct {
	rep      message.FailureReport
	id       string
	badID    bool
	hasQueue bool
}

// field reads the value of known field num, whose tag was just consumed, from b: it returns
// how many bytes the value took.
func (r *protoReader) field(num protowire.Number, typ protowire.Type, b []byte) (int, *PoisonError) {
	name := protoFields[num].name
	if want := protoFields[num].wireType(); typ != want {
		return 0, poisonf("%s (field %d) has wire type %d, want %s", name, num, typ, wireTypeName(want))
	}
	m := &r.rep.Message
	if typ == protowire.BytesType {
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, poisonf("malformed protobuf in %s (field %d): %v", name, num, protowire.ParseError(n))
		}
		switch num {
		case 1:
			// An id that is not UTF-8 is unusable, not poison: the fallback id takes over.
			r.id, r.badID = "", !utf8.Valid(v)
			if !r.badID {
				r.id = string(v)
			}
		case 2:
			m.Payload = append([]byte(nil), v...)
		case 3:
			if !utf8.Valid(v) {
				return 0, poisonf("original_queue (field 3) is not valid UTF-8")
			}
			m.OriginalQueue, r.hasQueue = string(v), true
		case 4:
			r.rep.Failure.Reason = strings.ToValidUTF8(string(v), "\uFFFD")
		}
		return n, nil
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, poisonf("malformed protobuf in %s (field %d): %v", name, num, protowire.ParseError(n))
	}
	switch num {
	case 5, 6:
		// int32 on the wire is the sign-extended 64-bit varint; proto truncates.
		c := int64(int32(v))
		if pe := checkCount(name, c); pe != nil {
			return 0, pe
		}
		if num == 5 {
			r.rep.RetryCount = int(c)
		} else {
			r.rep.MaxRetries = int(c)
		}
	case 7:
		// next_retry_at_ms: the producer's own schedule; the policy decides here.
	}
	return n, nil
}

func wireTypeName(t protowire.Type) string {
	if t == protowire.BytesType {
		return "length-delimited"
	}
	return "varint"
}
