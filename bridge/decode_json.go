package bridge

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// looksLikeRetryMessage reports whether body is a JSON object with an original_queue key: the
// mark of a RetryMessage when nothing else says what the body is.
func looksLikeRetryMessage(body []byte) bool {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return false
	}
	_, ok := probe["original_queue"]
	return ok
}

// retryMessageJSON is the JSON RetryMessage as the bridge reads it: message.RetryMessage's
// fields (a test keeps the two in step), typed so that encoding/json reads them and a value of
// the wrong type is an *json.UnmarshalTypeError naming its field. JSON null counts as absent,
// so that producers that serialise empty optionals as null are not poison; the pointers tell
// an absent field from an empty one where the two mean different things. Unknown fields are
// ignored, so producers may send more; as everywhere in encoding/json, a key matches its field
// in any letter case.
type retryMessageJSON struct {
	MessageID       string       `json:"message_id"`
	OriginalPayload *string      `json:"original_payload"` // standard base64
	OriginalQueue   *string      `json:"original_queue"`
	ErrorReason     string       `json:"error_reason"`
	RetryCount      *wholeNumber `json:"retry_count"`
	MaxRetries      *wholeNumber `json:"max_retries"`
	// NextRetryAtMs is the producer's own schedule; the policy decides here, so it is only
	// type-checked.
	NextRetryAtMs *wholeNumber `json:"next_retry_at_ms"`

	OriginalExchange    string       `json:"original_exchange"`
	OriginalRoutingKey  string       `json:"original_routing_key"`
	OriginalHeaders     jsonObject   `json:"original_headers"`
	OriginalContentType string       `json:"original_content_type"`
	ErrorCategory       string       `json:"error_category"`
	HTTPStatus          *wholeNumber `json:"http_status"`
	ErrorCode           string       `json:"error_code"`
	RetryAfterMs        *wholeNumber `json:"retry_after_ms"`
	Policy              string       `json:"policy"`
	TenantID            string       `json:"tenant_id"`
	CorrelationID       string       `json:"correlation_id"`
	RetryKey            string       `json:"retry_key"`
	Service             string       `json:"service"`
	ServiceVersion      string       `json:"service_version"`
	ErrorType           string       `json:"error_type"`
	StackTrace          string       `json:"stack_trace"`
	EventType           string       `json:"event_type"`
	RepublishedAtMs     *wholeNumber `json:"republished_at_ms"`
}

// wholeNumber is an integer field. JSON does not tell integers from floats, so a number with
// an integral value counts (3.0, 1e2); a fraction, a number beyond int64 or any other type is
// an *json.UnmarshalTypeError.
type wholeNumber int64

func (n *wholeNumber) UnmarshalJSON(b []byte) error {
	kind := jsonKind(b)
	if kind == "null" {
		return nil
	}
	if kind == "number" {
		if v, ok := parseInteger(string(b)); ok {
			*n = wholeNumber(v)
			return nil
		}
		kind = "number " + truncate(string(b), 40)
	}
	return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[wholeNumber]()}
}

// value is the number, or false when the field was absent or null.
func (n *wholeNumber) value() (int64, bool) {
	if n == nil {
		return 0, false
	}
	return int64(*n), true
}

// jsonObject is an object field whose numbers stay json.Number, so that an integer header
// keeps every digit (float64 would round those past 2^53).
type jsonObject map[string]any

func (o *jsonObject) UnmarshalJSON(b []byte) error {
	switch kind := jsonKind(b); kind {
	case "null":
		return nil
	case "object":
	default:
		return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[jsonObject]()}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return err
	}
	*o = m
	return nil
}

// jsonKind names the JSON type of a raw value as encoding/json's errors do ("string",
// "number", "bool", "array", "object", "null"). encoding/json hands an Unmarshaler the value
// alone, already checked to be valid JSON, so its first byte tells.
func jsonKind(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonPoison turns what encoding/json refused into a poison reason: a body that is not one
// JSON object says so, and a value of the wrong type names its field ("retry_count must be an
// integer, got a string").
func jsonPoison(err error) *PoisonError {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return poisonf("body is not a JSON object: %v", err)
	}
	if te.Field == "" {
		return poisonf("body is not a JSON object: got %s", describeJSONValue(te.Value))
	}
	return poisonf("%s must be %s, got %s", te.Field, describeJSONType(te.Type), describeJSONValue(te.Value))
}

// describeJSONType names what a field of the wire struct wants.
func describeJSONType(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[wholeNumber]():
		return "an integer"
	case reflect.TypeFor[jsonObject]():
		return "an object"
	case reflect.TypeFor[string]():
		return "a string"
	}
	return "of type " + t.String()
}

// describeJSONValue turns an UnmarshalTypeError's Value ("bool", "number 1.5") into words:
// "a boolean", "1.5".
func describeJSONValue(v string) string {
	if lit, ok := strings.CutPrefix(v, "number "); ok {
		return lit
	}
	switch v {
	case "bool":
		return "a boolean"
	case "array", "object":
		return "an " + v
	case "string", "number":
		return "a " + v
	}
	return v
}

// decodeJSON decodes a JSON RetryMessage strictly: every wrong type or out-of-range value is
// poison, naming the field, because a producer sending it is broken and retrying cannot mend it.
func decodeJSON(d Delivery, opts DecodeOptions) (decoded, error) {
	var w *retryMessageJSON
	if err := json.Unmarshal(d.Body, &w); err != nil {
		pe := jsonPoison(err)
		pe.OriginalQueue, pe.MessageID = poisonNames(d.Body)
		return decoded{}, pe
	}
	if w == nil {
		return decoded{}, poisonf("body is JSON null, not a RetryMessage object")
	}
	rep, pe := w.report()
	if pe != nil {
		if w.OriginalQueue != nil {
			pe.OriginalQueue = *w.OriginalQueue
		}
		pe.MessageID = w.MessageID
		return decoded{}, pe
	}
	if rep.Message.CorrelationID == "" {
		rep.Message.CorrelationID = d.CorrelationID
	}
	if rep.Message.EventType == "" && w.OriginalHeaders != nil {
		// The original message's own header, as the dead-lettered form reads it.
		if v, ok := header(map[string]any(w.OriginalHeaders), message.HeaderEventType); ok {
			rep.Message.EventType, _ = headerString(v)
		}
	}
	rep.Notes = append(rep.Notes, setErrorDetail(&rep, w.ErrorType, w.StackTrace)...)
	var notes []string
	rep.Message.Headers, notes = jsonHeaders(w.OriginalHeaders, opts)
	rep.Notes = append(rep.Notes, notes...)
	rep.Source = SourceRetryMessage
	return decoded{rep: rep, policy: w.Policy, rawID: w.MessageID}, nil
}

// poisonNames reads the queue and id of a body whose fields do not all have their types, to
// name it in its envelope: a field of the wrong type here stays empty.
func poisonNames(body []byte) (queue, id string) {
	var names struct {
		OriginalQueue string `json:"original_queue"`
		MessageID     string `json:"message_id"`
	}
	_ = json.Unmarshal(body, &names) // the error is the poison already reported
	return names.OriginalQueue, names.MessageID
}

// report checks the values' ranges and copies them into a report; the caller adds what the
// delivery and the options contribute.
func (w *retryMessageJSON) report() (message.FailureReport, *PoisonError) {
	var rep message.FailureReport
	if w.OriginalQueue == nil {
		return rep, poisonf("original_queue is missing")
	}
	if pe := checkEntityName("original_queue", *w.OriginalQueue, true); pe != nil {
		return rep, pe
	}
	if w.OriginalPayload == nil {
		return rep, poisonf("original_payload is missing")
	}
	payload, err := base64.StdEncoding.DecodeString(*w.OriginalPayload)
	if err != nil {
		return rep, poisonf("original_payload is not standard base64: %v", err)
	}
	if pe := checkEntityName("original_exchange", w.OriginalExchange, false); pe != nil {
		return rep, pe
	}
	if pe := checkName("original_routing_key", w.OriginalRoutingKey, false); pe != nil {
		return rep, pe
	}
	for _, c := range []struct {
		key string
		n   *wholeNumber
		dst *int
	}{{"retry_count", w.RetryCount, &rep.RetryCount}, {"max_retries", w.MaxRetries, &rep.MaxRetries}} {
		n, ok := c.n.value()
		if !ok {
			continue
		}
		if pe := checkCount(c.key, n); pe != nil {
			return rep, pe
		}
		*c.dst = int(n)
	}
	if status, ok := w.HTTPStatus.value(); ok {
		if status < 0 || status > 999 {
			return rep, poisonf("http_status %d is not an HTTP status code", status)
		}
		rep.Failure.HTTPStatus = int(status)
	}
	if ms, ok := w.RetryAfterMs.value(); ok {
		if ms < 0 {
			return rep, poisonf("retry_after_ms is negative (%d)", ms)
		}
		if ms > MaxRetryAfter.Milliseconds() {
			return rep, poisonf("retry_after_ms is %d, over the limit of 30 days", ms)
		}
		rep.Failure.RetryAfter = time.Duration(ms) * time.Millisecond
	}

	m := &rep.Message
	m.Payload = payload
	m.OriginalQueue = *w.OriginalQueue
	m.OriginalExchange = w.OriginalExchange
	m.OriginalRoutingKey = w.OriginalRoutingKey
	m.TenantID = w.TenantID
	m.CorrelationID = w.CorrelationID
	m.EventType = w.EventType
	m.Properties.ContentType = w.OriginalContentType
	rep.Failure.Reason = w.ErrorReason
	rep.Failure.Category = w.ErrorCategory
	rep.Failure.ErrorCode = w.ErrorCode
	rep.RetryKey = w.RetryKey
	if ms, ok := w.RepublishedAtMs.value(); ok && ms != 0 {
		// A date only the breaker reads: a bad one is dropped with a note, not poison.
		if at, ok := republishedAtMs(ms); ok {
			rep.RepublishedAt = at
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("republished_at_ms ignored: %d is not a date after the epoch", ms))
		}
	}
	rep.Service = w.Service
	rep.ServiceVersion = w.ServiceVersion
	return rep, nil
}

// jsonHeaders converts original_headers into the report's headers: the kept ones, in a
// stable order, with notes on what was dropped.
func jsonHeaders(headers map[string]any, opts DecodeOptions) (map[string]any, []string) {
	if headers == nil {
		return nil, nil
	}
	var hc message.HeaderConverter
	out := hc.Convert(headers, opts.allowHeader)
	return out, hc.Notes
}
