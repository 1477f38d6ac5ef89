package bridge

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// retryMessageProto is the protobuf contract shipped to producers.
const retryMessageProto = "../message/retrymessage.proto"

// jsonNames lists the JSON names of a struct type's fields.
func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// The producers' type and the bridge's wire type describe one JSON contract: the same fields.
func TestRetryMessageFieldsAgreeWithDecoder(t *testing.T) {
	assert.Equal(t, jsonNames(reflect.TypeFor[message.RetryMessage]()), jsonNames(reflect.TypeFor[retryMessageJSON]()))
}

// Every field a producer sets through message.RetryMessage arrives in the report.
func TestRetryMessageRoundTrip(t *testing.T) {
	in := message.RetryMessage{
		MessageID:           "m-1",
		OriginalPayload:     []byte{0, 1, 0xff},
		OriginalQueue:       "orders",
		ErrorReason:         "upstream timeout",
		RetryCount:          2,
		MaxRetries:          4,
		NextRetryAtMs:       1767225600000,
		OriginalExchange:    "orders.x",
		OriginalRoutingKey:  "orders.created",
		OriginalHeaders:     map[string]any{"trace-id": "abc", "big": int64(1<<53 + 1)},
		OriginalContentType: "application/json",
		ErrorCategory:       "transient",
		HTTPStatus:          503,
		ErrorCode:           "ETIMEDOUT",
		RetryAfterMs:        1500,
		Policy:              "patient",
		TenantID:            "t-9",
		CorrelationID:       "c-7",
		RetryKey:            "m-1:2",
		Service:             "order-service",
		ServiceVersion:      "1.2.3",
		ErrorType:           "java.io.IOException",
		StackTrace:          "at Foo.bar(Foo.java:1)",
		EventType:           "order.created",
		RepublishedAtMs:     1767225590250,
	}
	body, err := json.Marshal(in)
	require.NoError(t, err)
	rep, err := Decode(Delivery{ContentType: "application/json", Body: body}, testOptions())
	require.NoError(t, err)

	m := rep.Message
	assert.Equal(t, in.MessageID, m.MessageID)
	assert.Equal(t, in.OriginalPayload, m.Payload)
	assert.Equal(t, in.OriginalQueue, m.OriginalQueue)
	assert.Equal(t, in.OriginalExchange, m.OriginalExchange)
	assert.Equal(t, in.OriginalRoutingKey, m.OriginalRoutingKey)
	assert.Equal(t, map[string]any{"trace-id": "abc", "big": int64(1<<53 + 1)}, m.Headers, "integers keep every digit")
	assert.Equal(t, in.OriginalContentType, m.Properties.ContentType)
	assert.Equal(t, in.TenantID, m.TenantID)
	assert.Equal(t, in.CorrelationID, m.CorrelationID)
	assert.Equal(t, in.EventType, m.EventType)
	assert.Equal(t, policy.Failure{
		Reason: in.ErrorReason, Category: in.ErrorCategory, HTTPStatus: in.HTTPStatus, ErrorCode: in.ErrorCode,
		RetryAfter: 1500 * time.Millisecond,
	}, rep.Failure)
	assert.Equal(t, in.RetryCount, rep.RetryCount)
	assert.Equal(t, in.MaxRetries, rep.MaxRetries)
	assert.Equal(t, in.RetryKey, rep.RetryKey)
	assert.Equal(t, in.Policy, rep.Policy.Name)
	assert.Equal(t, in.Service, rep.Service)
	assert.Equal(t, in.ServiceVersion, rep.ServiceVersion)
	assert.Equal(t, in.ErrorType, rep.ErrorType)
	assert.Equal(t, in.StackTrace, rep.StackTrace)
	assert.Equal(t, time.UnixMilli(in.RepublishedAtMs).UTC(), rep.RepublishedAt)
	assert.Empty(t, rep.Notes)
}

// protoDecl is a field declaration of a .proto message.
type protoDecl struct {
	name, protoType string
	number          protowire.Number
}

var protoFieldLine = regexp.MustCompile(`^(\w+)\s+(\w+)\s*=\s*(\d+)\s*;$`)

// parseProtoMessage reads the fields of one message of a .proto file: enough for a flat
// message of scalar fields, which is what the contract is (no nesting, options or oneofs;
// a line it cannot read fails the test rather than being skipped).
func parseProtoMessage(t *testing.T, path, name string) []protoDecl {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var decls []protoDecl
	inside, found := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "//")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case !inside && line == "message "+name+" {":
			inside, found = true, true
		case inside && line == "}":
			inside = false
		case inside:
			m := protoFieldLine.FindStringSubmatch(line)
			require.NotNil(t, m, "%s:%d: not a scalar field declaration: %q", path, n, line)
			num, err := strconv.Atoi(m[3])
			require.NoError(t, err)
			decls = append(decls, protoDecl{protoType: m[1], name: m[2], number: protowire.Number(num)})
		}
	}
	require.NoError(t, sc.Err())
	require.True(t, found, "%s declares no message %s", path, name)
	require.False(t, inside, "%s: message %s is not closed", path, name)
	return decls
}

// protoWireTypes is how protobuf encodes each scalar type the contract may use.
var protoWireTypes = map[string]protowire.Type{
	"string": protowire.BytesType, "bytes": protowire.BytesType,
	"int32": protowire.VarintType, "int64": protowire.VarintType, "uint32": protowire.VarintType,
	"uint64": protowire.VarintType, "bool": protowire.VarintType,
	"sint32": protowire.VarintType, "sint64": protowire.VarintType,
	"fixed32": protowire.Fixed32Type, "sfixed32": protowire.Fixed32Type, "float": protowire.Fixed32Type,
	"fixed64": protowire.Fixed64Type, "sfixed64": protowire.Fixed64Type, "double": protowire.Fixed64Type,
}

// The .proto shipped to producers declares exactly the fields the decoder reads: same
// numbers, names, types and so wire types.
func TestRetryMessageProtoAgreesWithDecoder(t *testing.T) {
	decls := parseProtoMessage(t, retryMessageProto, "RetryMessage")
	require.NotEmpty(t, decls)
	declared := map[protowire.Number]bool{}
	for _, d := range decls {
		declared[d.number] = true
		f, ok := protoFields[d.number]
		if !assert.True(t, ok, "%s = %d is declared but the decoder skips it", d.name, d.number) {
			continue
		}
		assert.Equal(t, d.name, f.name, "name of field %d", d.number)
		assert.Equal(t, d.protoType, f.protoType, "type of %s", d.name)
		want, known := protoWireTypes[d.protoType]
		require.True(t, known, "%s has type %s, which the test does not know", d.name, d.protoType)
		assert.Equal(t, want, f.wireType(), "wire type of %s", d.name)
	}
	for num, f := range protoFields {
		assert.True(t, declared[num], "the decoder reads %s = %d, which the .proto does not declare", f.name, num)
	}
}

// A message encoded from the .proto's declarations, as a producer's generated code would,
// decodes with every field in place.
func TestRetryMessageProtoDecodes(t *testing.T) {
	values := map[string]any{
		"message_id": "p-1", "original_payload": []byte{0, 0xff}, "original_queue": "orders",
		"error_reason": "boom", "retry_count": int64(2), "max_retries": int64(5), "next_retry_at_ms": int64(1767225600000),
	}
	var body []byte
	for _, d := range parseProtoMessage(t, retryMessageProto, "RetryMessage") {
		v, ok := values[d.name]
		require.True(t, ok, "no test value for %s", d.name)
		body = protowire.AppendTag(body, d.number, protoWireTypes[d.protoType])
		switch x := v.(type) {
		case string:
			body = protowire.AppendString(body, x)
		case []byte:
			body = protowire.AppendBytes(body, x)
		case int64:
			body = protowire.AppendVarint(body, uint64(x))
		}
	}
	rep, err := decodeProto(body)
	require.NoError(t, err)
	assert.Equal(t, "p-1", rep.Message.MessageID)
	assert.Equal(t, []byte{0, 0xff}, rep.Message.Payload)
	assert.Equal(t, "orders", rep.Message.OriginalQueue)
	assert.Equal(t, "boom", rep.Failure.Reason)
	assert.Equal(t, 2, rep.RetryCount)
	assert.Equal(t, 5, rep.MaxRetries)
}
