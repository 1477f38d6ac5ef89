package message

// RetryMessage is the ingress contract in its JSON form (content type application/json), as a
// producer writes it: the starter, the benchmarks, the soak and tests use it. The bridge reads
// the same fields into a wire type of its own that tells absent from empty and keeps every
// bad field's name for the poison reason; a bridge test keeps the two in step. The protobuf
// form is retrymessage.proto: its seven fields only.
type RetryMessage struct {
	MessageID       string `json:"message_id"`
	OriginalPayload []byte `json:"original_payload"` // base64 in JSON
	OriginalQueue   string `json:"original_queue"`
	ErrorReason     string `json:"error_reason"`
	RetryCount      int    `json:"retry_count"`
	MaxRetries      int    `json:"max_retries"`
	NextRetryAtMs   int64  `json:"next_retry_at_ms"`

	OriginalExchange    string         `json:"original_exchange,omitempty"`
	OriginalRoutingKey  string         `json:"original_routing_key,omitempty"`
	OriginalHeaders     map[string]any `json:"original_headers,omitempty"`
	OriginalContentType string         `json:"original_content_type,omitempty"`
	ErrorCategory       string         `json:"error_category,omitempty"`
	HTTPStatus          int            `json:"http_status,omitempty"`
	ErrorCode           string         `json:"error_code,omitempty"`
	RetryAfterMs        int64          `json:"retry_after_ms,omitempty"`
	Policy              string         `json:"policy,omitempty"`
	TenantID            string         `json:"tenant_id,omitempty"`
	CorrelationID       string         `json:"correlation_id,omitempty"`
	RetryKey            string         `json:"retry_key,omitempty"`
	Service             string         `json:"service,omitempty"`
	ServiceVersion      string         `json:"service_version,omitempty"`
	ErrorType           string         `json:"error_type,omitempty"`
	StackTrace          string         `json:"stack_trace,omitempty"`
	EventType           string         `json:"event_type,omitempty"`
	// RepublishedAtMs is the x-retry-republished-at header of the delivery that failed (unix
	// milliseconds), 0 when it had none: it dates the failure for the destination's breaker.
	RepublishedAtMs int64 `json:"republished_at_ms,omitempty"`
}
