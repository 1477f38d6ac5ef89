package deadletter

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter/schematest"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// workflowEnvelope is an envelope in the shape RetryWorkflow builds it, dead for reason.
func workflowEnvelope(reason string) message.Envelope {
	first, last := t0.Add(-time.Hour), t0.Add(-time.Minute)
	m := message.Message{
		MessageID: "m-" + reason, Payload: []byte(`{"order":1}`), OriginalQueue: "orders",
		Headers:    map[string]any{"trace": "t", "n": 3, "ok": true},
		Properties: message.Properties{ContentType: "application/json", Priority: 4},
		TenantID:   "acme", CorrelationID: "corr-1", EventType: "order.created", Producer: "orders-app",
	}
	return message.Envelope{
		DLQID: "retry:orders/m-" + reason + "#0", MessageID: m.MessageID, OriginalQueue: "orders",
		ConsumerService: "orders-svc", FailureCategory: string(policy.Transient),
		DeadReason: reason, DeadDetail: "why: " + reason, Policy: "default",
		RetryAttempts: []message.Attempt{
			{Attempt: 1, Timestamp: first, Error: "timeout", ErrorCode: "ETIMEDOUT", Category: "transient",
				RepublishedAt: first.Add(time.Second), RetryKey: "m:1"},
			{Attempt: 2, Timestamp: last, Error: "503", HTTPStatus: 503, Category: "transient",
				ErrorType: "HttpError", StackTrace: "HttpError: 503\n    at call"},
		},
		TotalRetries: 1, FirstFailureAt: first, RoutedToDlqAt: t0, CorrelationID: "corr-1",
		WorkflowID: "retry:orders/m-" + reason, RunID: "run-1", OriginalMessage: m,
		Metadata: message.Metadata{TenantID: "acme", Producer: "orders-app", DLQTimestamp: t0,
			Service: "orders-svc", ServiceVersion: "1.2.3", FirstAttemptTimestamp: first, LastAttemptTimestamp: last},
	}
}

// bridgeEnvelope is an envelope in the shape the bridge builds for a poison or oversize
// delivery: no attempts, no workflow, the raw bytes.
func bridgeEnvelope(kind string) message.Envelope {
	return message.Envelope{
		DLQID: kind + "-0123456789abcdef0123456789abcdef", MessageID: "raw-1", OriginalQueue: "orders",
		FailureCategory: string(policy.Unknown), DeadReason: kind, DeadDetail: "invalid JSON",
		RetryAttempts: []message.Attempt{}, FirstFailureAt: t0, RoutedToDlqAt: t0,
		OriginalMessage: message.Message{MessageID: "raw-1", Payload: []byte("{not json"), OriginalQueue: "orders",
			Properties: message.Properties{Timestamp: t0.Add(-time.Second)}},
		Metadata: message.Metadata{DLQTimestamp: t0, Service: "retry-scheduler",
			FirstAttemptTimestamp: t0, LastAttemptTimestamp: t0},
	}
}

// Every envelope as published, whatever its dead reason and writer, and with its payload
// inline or apart, matches docs/envelope.schema.json.
func TestPublishedEnvelopesMatchTheSchema(t *testing.T) {
	envs := map[string]message.Envelope{}
	for _, reason := range message.DeadReasons {
		envs["workflow/"+reason] = workflowEnvelope(reason)
	}
	for _, kind := range []string{message.PoisonKindPoison, message.PoisonKindOversize} {
		envs["bridge/"+kind] = bridgeEnvelope(kind)
	}
	for name, env := range envs {
		t.Run(name, func(t *testing.T) {
			p, err := Publishing(env, Options{AppID: "retry-scheduler"})
			require.NoError(t, err)
			require.NoError(t, schematest.Validate(p.Body))
		})
	}
	t.Run("payload apart", func(t *testing.T) {
		env := workflowEnvelope(policy.CauseExhausted)
		env.OriginalMessage.Payload = []byte(strings.Repeat("x", MinMaxBytes))
		parts, err := Split(env, "dead", Options{MaxBytes: MinMaxBytes})
		require.NoError(t, err)
		require.NotNil(t, parts.Payload, "the payload left the envelope")
		require.NoError(t, schematest.Validate(parts.Envelope.Body))
	})
}

// The schema is a live check: it refuses an envelope without a required field, with a field
// it does not describe, or with a malformed timestamp.
func TestTheSchemaRefusesWhatItDoesNotDescribe(t *testing.T) {
	p, err := Publishing(workflowEnvelope(policy.CauseExhausted), Options{})
	require.NoError(t, err)
	for name, edit := range map[string]func(map[string]any){
		"no dlqUuid":      func(m map[string]any) { delete(m, "dlqUuid") },
		"unknown field":   func(m map[string]any) { m["surprise"] = 1 },
		"bad time":        func(m map[string]any) { m["routedToDlqAt"] = "yesterday" },
		"bad dead reason": func(m map[string]any) { m["deadReason"] = "bored" },
		"no internal_id":  func(m map[string]any) { delete(m["metadata"].(map[string]any), "internal_id") },
		"negative count":  func(m map[string]any) { m["error_details"].(map[string]any)["retry_count"] = -1 },
	} {
		var m map[string]any
		require.NoError(t, json.Unmarshal(p.Body, &m))
		edit(m)
		body, err := json.Marshal(m)
		require.NoError(t, err)
		assert.Error(t, schematest.Validate(body), name)
	}
}

// The schema's dead reasons are the code's, no more and no fewer: a reason the workflow or
// the bridge emits that the schema lacks would make every such envelope invalid.
func TestTheSchemasDeadReasonsAreTheCodes(t *testing.T) {
	raw, err := os.ReadFile(schematest.Path())
	require.NoError(t, err)
	var doc struct {
		Properties struct {
			DeadReason struct {
				Enum []string `json:"enum"`
			} `json:"deadReason"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	assert.ElementsMatch(t, message.DeadReasons, doc.Properties.DeadReason.Enum)
}
