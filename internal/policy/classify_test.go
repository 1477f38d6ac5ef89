package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseCategory(t *testing.T) {
	tests := []struct {
		in   string
		want Category
		ok   bool
	}{
		{"transient", Transient, true},
		{"  TRANSIENT\n", Transient, true},
		{"rate-limited", RateLimited, true},
		{"rate_limited", RateLimited, true},
		{"RateLimited", RateLimited, true},
		{"permanent", Permanent, true},
		{"Validation", Validation, true},
		{"client", Client, true},
		{"configuration", Configuration, true},
		{"unknown", Unknown, true},
		{"", "", false},
		{"   ", "", false},
		{"rate limited", "", false},
		{"fatal", "", false},
	}
	for _, tt := range tests {
		got, ok := ParseCategory(tt.in)
		assert.Equal(t, tt.ok, ok, "ParseCategory(%q) ok", tt.in)
		assert.Equal(t, tt.want, got, "ParseCategory(%q)", tt.in)
	}
}

func TestRetryable(t *testing.T) {
	want := map[Category]bool{
		Transient: true, RateLimited: true, Unknown: true,
		Permanent: false, Validation: false, Client: false, Configuration: false, "bogus": false,
	}
	for c, w := range want {
		assert.Equal(t, w, c.Retryable(), "%s.Retryable()", c)
	}
}

// The older rules do not read socket codes in the reason text.
func TestClassifyUnknownCapEverywhere(t *testing.T) {
	old := RulesUnknownCapEverywhere
	assert.Equal(t, Unknown, old.Classify(Failure{Reason: "ECONNRESET: socket hang up"}))
	assert.Equal(t, Transient, old.Classify(Failure{ErrorCode: "ECONNRESET", Reason: "socket hang up"}))
	assert.Equal(t, Transient, old.Classify(Failure{Reason: "Connection reset by peer"}))
	assert.Equal(t, Transient, Classify(Failure{Reason: "ECONNRESET: socket hang up"}))
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		f    Failure
		want Category
	}{
		// Explicit category.
		{"explicit wins over status", Failure{Category: "permanent", HTTPStatus: 503}, Permanent},
		{"explicit alias", Failure{Category: " Rate_Limited ", Reason: "schema"}, RateLimited},
		{"explicit client", Failure{Category: "client"}, Client},
		{"junk category ignored", Failure{Category: "oops", HTTPStatus: 503}, Transient},
		{"junk category alone", Failure{Category: "oops"}, Unknown},

		// HTTP status.
		{"429", Failure{HTTPStatus: 429}, RateLimited},
		{"408", Failure{HTTPStatus: 408}, Transient},
		{"400", Failure{HTTPStatus: 400}, Permanent},
		{"404", Failure{HTTPStatus: 404}, Permanent},
		{"499", Failure{HTTPStatus: 499}, Permanent},
		{"500", Failure{HTTPStatus: 500}, Unknown},
		{"501", Failure{HTTPStatus: 501}, Unknown},
		{"502", Failure{HTTPStatus: 502}, Transient},
		{"503", Failure{HTTPStatus: 503}, Transient},
		{"504", Failure{HTTPStatus: 504}, Transient},
		{"599", Failure{HTTPStatus: 599}, Unknown},
		{"status beats code", Failure{HTTPStatus: 400, ErrorCode: "ETIMEDOUT"}, Permanent},
		{"status beats reason", Failure{HTTPStatus: 404, Reason: "timeout"}, Permanent},
		{"2xx falls through to reason", Failure{HTTPStatus: 200, Reason: "schema mismatch"}, Permanent},
		{"3xx falls through", Failure{HTTPStatus: 302}, Unknown},
		{"600 falls through", Failure{HTTPStatus: 600, ErrorCode: "EPIPE"}, Transient},

		// Error codes.
		{"ETIMEDOUT", Failure{ErrorCode: "ETIMEDOUT"}, Transient},
		{"ECONNRESET", Failure{ErrorCode: "ECONNRESET"}, Transient},
		{"ECONNREFUSED", Failure{ErrorCode: "ECONNREFUSED"}, Transient},
		{"ECONNABORTED", Failure{ErrorCode: "ECONNABORTED"}, Transient},
		{"EPIPE", Failure{ErrorCode: "EPIPE"}, Transient},
		{"EAI_AGAIN", Failure{ErrorCode: "EAI_AGAIN"}, Transient},
		{"EHOSTUNREACH", Failure{ErrorCode: "EHOSTUNREACH"}, Transient},
		{"ENETUNREACH", Failure{ErrorCode: "ENETUNREACH"}, Transient},
		{"ESOCKETTIMEDOUT", Failure{ErrorCode: "ESOCKETTIMEDOUT"}, Transient},
		{"code case-insensitive", Failure{ErrorCode: " econnreset "}, Transient},
		{"unknown code falls to reason", Failure{ErrorCode: "EACCES", Reason: "invalid field"}, Validation},
		{"unknown code alone", Failure{ErrorCode: "EACCES"}, Unknown},

		// Socket error codes in the reason text, as Node.js consumers report them.
		{"ECONNRESET in text", Failure{Reason: "ECONNRESET: socket hang up"}, Transient},
		{"socket hang up alone", Failure{Reason: "Error: Socket hang up"}, Transient},
		{"code inside a sentence", Failure{Reason: "connect ETIMEDOUT 10.0.0.7:443"}, Transient},
		{"lower-case code in text", Failure{Reason: "write epipe"}, Transient},
		{"EAI_AGAIN in text", Failure{Reason: "getaddrinfo EAI_AGAIN api.example.com"}, Transient},
		{"code in text beats schema", Failure{Reason: "ECONNREFUSED fetching schema"}, Transient},
		{"code must be a whole word", Failure{Reason: "EPIPELINE broke"}, Unknown},
		{"status beats code in text", Failure{HTTPStatus: 400, Reason: "ECONNRESET"}, Permanent},

		// Reason: rate limited.
		{"too many requests", Failure{Reason: "Too Many Requests"}, RateLimited},
		{"rate limit", Failure{Reason: "rate limit exceeded"}, RateLimited},
		{"throttl", Failure{Reason: "request was Throttled"}, RateLimited},
		{"quota", Failure{Reason: "daily quota used up"}, RateLimited},
		// Reason: transient.
		{"timeout", Failure{Reason: "read timeout"}, Transient},
		{"timed out", Failure{Reason: "operation timed out"}, Transient},
		{"connection reset", Failure{Reason: "Connection reset by peer"}, Transient},
		{"connection refused", Failure{Reason: "dial tcp: connection refused"}, Transient},
		{"unavailable", Failure{Reason: "Service Unavailable"}, Transient},
		{"temporar", Failure{Reason: "temporarily down"}, Transient},
		// Reason: permanent.
		{"deserializ", Failure{Reason: "cannot deserialize body"}, Permanent},
		{"unmarshal", Failure{Reason: "json: cannot unmarshal string"}, Permanent},
		{"schema", Failure{Reason: "Schema mismatch"}, Permanent},
		{"malformed", Failure{Reason: "malformed payload"}, Permanent},
		{"invalid json before invalid", Failure{Reason: "Invalid JSON at byte 3"}, Permanent},
		{"parse error", Failure{Reason: "parse error near }"}, Permanent},
		// Reason: validation.
		{"validation", Failure{Reason: "Validation failed: email"}, Validation},
		{"invalid", Failure{Reason: "invalid amount"}, Validation},
		// Reason: configuration.
		{"credential", Failure{Reason: "missing credentials"}, Configuration},
		{"misconfigur", Failure{Reason: "service misconfigured"}, Configuration},
		{"configuration", Failure{Reason: "bad configuration"}, Configuration},
		// Reason order: earlier rules win.
		{"rate limit before timeout", Failure{Reason: "rate limit timeout"}, RateLimited},
		{"timeout before schema", Failure{Reason: "schema registry timeout"}, Transient},

		// Nothing known.
		{"empty", Failure{}, Unknown},
		{"unmatched reason", Failure{Reason: "something odd happened"}, Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Classify(tt.f))
		})
	}
}
