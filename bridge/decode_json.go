package bridge

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"retry-scheduler/message"
	"retry-scheduler/policy"
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

// jsonFields reads typed fields from a JSON object, keeping the first problem. JSON null
// counts as absent, so that producers that serialise empty optionals as null are not poison.
type jsonFields struct {
	raw map[string]json.RawMessage
	err *PoisonError
}

func (f *jsonFields) get(key string) (json.RawMessage, bool) {
	if f.err != nil {
		return nil, false
	}
	v, ok := f.raw[key]
	if !ok || string(v) == "null" {
		return nil, false
	}
	return v, true
}

func (f *jsonFields) str(key string) string {
	v, ok := f.get(key)
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		f.err = poisonf("%s must be a string, got %s", key, jsonKind(v))
		return ""
	}
	return s
}

func (f *jsonFields) integer(key string) (int64, bool) {
	v, ok := f.get(key)
	if !ok {
		return 0, false
	}
	if jsonKind(v) != "a number" {
		f.err = poisonf("%s must be an integer, got %s", key, jsonKind(v))
		return 0, false
	}
	n, ok := parseInteger(string(v))
	if !ok {
		f.err = poisonf("%s must be an integer, got %s", key, truncate(string(v), 40))
		return 0, false
	}
	return n, true
}

func (f *jsonFields) object(key string) map[string]any {
	v, ok := f.get(key)
	if !ok {
		return nil
	}
	if jsonKind(v) != "an object" {
		f.err = poisonf("%s must be an object, got %s", key, jsonKind(v))
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		f.err = poisonf("%s must be an object: %v", key, err)
		return nil
	}
	return m
}

// decodeJSON decodes a JSON RetryMessage strictly: every wrong type or out-of-range value is
// poison, naming the field, because a producer sending it is broken and retrying cannot mend it.
func decodeJSON(d Delivery, opts DecodeOptions) (message.FailureReport, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(d.Body, &raw); err != nil {
		return message.FailureReport{}, poisonf("body is not a JSON object: %v", err)
	}
	if raw == nil {
		return message.FailureReport{}, poisonf("body is JSON null, not a RetryMessage object")
	}
	f := &jsonFields{raw: raw}

	queue := f.str("original_queue")
	id := f.str("message_id")
	fail := func(pe *PoisonError) (message.FailureReport, error) {
		pe.OriginalQueue, pe.MessageID = queue, id
		return message.FailureReport{}, pe
	}
	if f.err != nil {
		return fail(f.err)
	}
	if _, ok := f.get("original_queue"); !ok {
		return fail(poisonf("original_queue is missing"))
	}
	if pe := checkName("original_queue", queue, true); pe != nil {
		return fail(pe)
	}
	if _, ok := f.get("original_payload"); !ok {
		return fail(poisonf("original_payload is missing"))
	}
	payloadB64 := f.str("original_payload")
	if f.err != nil {
		return fail(f.err)
	}
	payload, err := base64.StdEncoding.DecodeString(payloadB64)
	if err != nil {
		return fail(poisonf("original_payload is not standard base64: %v", err))
	}

	var rep message.FailureReport
	m := &rep.Message
	m.Payload = payload
	m.OriginalQueue = queue
	m.OriginalExchange = f.str("original_exchange")
	m.OriginalRoutingKey = f.str("original_routing_key")
	m.TenantID = f.str("tenant_id")
	m.CorrelationID = f.str("correlation_id")
	m.Properties.ContentType = f.str("original_content_type")
	rep.Failure = policy.Failure{
		Reason:    f.str("error_reason"),
		Category:  f.str("error_category"),
		ErrorCode: f.str("error_code"),
	}
	rep.RetryKey = f.str("retry_key")
	rep.Service = f.str("service")
	rep.ServiceVersion = f.str("service_version")
	errorType, stackTrace := f.str("error_type"), f.str("stack_trace")
	m.EventType = f.str("event_type")
	policyName := f.str("policy")
	headers := f.object("original_headers")
	if f.err != nil {
		return fail(f.err)
	}
	if pe := checkName("original_exchange", m.OriginalExchange, false); pe != nil {
		return fail(pe)
	}
	if pe := checkName("original_routing_key", m.OriginalRoutingKey, false); pe != nil {
		return fail(pe)
	}

	for _, c := range []struct {
		key string
		dst *int
	}{{"retry_count", &rep.RetryCount}, {"max_retries", &rep.MaxRetries}} {
		n, ok := f.integer(c.key)
		if f.err != nil {
			return fail(f.err)
		}
		if !ok {
			continue
		}
		if pe := checkCount(c.key, n); pe != nil {
			return fail(pe)
		}
		*c.dst = int(n)
	}
	if status, ok := f.integer("http_status"); ok {
		if status < 0 || status > 999 {
			return fail(poisonf("http_status %d is not an HTTP status code", status))
		}
		rep.Failure.HTTPStatus = int(status)
	}
	if ms, ok := f.integer("retry_after_ms"); ok {
		if ms < 0 {
			return fail(poisonf("retry_after_ms is negative (%d)", ms))
		}
		if ms > MaxRetryAfter.Milliseconds() {
			return fail(poisonf("retry_after_ms is %d, over the limit of 30 days", ms))
		}
		rep.Failure.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	// next_retry_at_ms is the producer's own schedule; the policy decides here, so it is only
	// type-checked.
	f.integer("next_retry_at_ms")
	if f.err != nil {
		return fail(f.err)
	}

	if m.CorrelationID == "" {
		m.CorrelationID = d.CorrelationID
	}
	if m.EventType == "" && headers != nil {
		// The original message's own header, as the dead-lettered form reads it.
		if v, ok := header(headers, HeaderEventType); ok {
			m.EventType, _ = headerString(v)
		}
	}
	rep.Notes = append(rep.Notes, setErrorDetail(&rep, errorType, stackTrace)...)
	if headers != nil {
		hc := &headerConverter{}
		for _, k := range sortedKeys(headers) {
			if !opts.keepHeader(k) {
				continue
			}
			if v, ok := hc.value(headers[k], k, 0); ok {
				if m.Headers == nil {
					m.Headers = make(map[string]any, len(headers))
				}
				m.Headers[k] = v
			}
		}
		rep.Notes = append(rep.Notes, hc.notes...)
	}
	rep.Source = SourceRetryMessage
	return finish(rep, policyName, id, opts), nil
}

// jsonKind names the JSON type of a raw value for error messages.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// parseInteger accepts a decimal integer, or a number with an integral value ("3.0", "1e3"),
// since JSON does not tell integers from floats.
func parseInteger(s string) (int64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, ok := parseDecimal(s)
	if !ok {
		return 0, false
	}
	return integral(f)
}

// parseDecimal accepts JSON number syntax only: no hex, underscores, "Inf" or "NaN", which
// strconv.ParseFloat would take.
func parseDecimal(s string) (float64, bool) {
	if !isJSONNumber(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
