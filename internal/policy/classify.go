package policy

import "strings"

// categoryNames maps every accepted spelling to its category. Reporters written in
// different languages spell rate limiting three ways, so all three are accepted.
var categoryNames = map[string]Category{
	"transient":     Transient,
	"rate-limited":  RateLimited,
	"rate_limited":  RateLimited,
	"ratelimited":   RateLimited,
	"permanent":     Permanent,
	"validation":    Validation,
	"client":        Client,
	"configuration": Configuration,
	"unknown":       Unknown,
}

// ParseCategory reads a category name as reporters send it: case-insensitive, trimmed.
// It reports false for empty or unknown names so that junk never overrides classification.
func ParseCategory(s string) (Category, bool) {
	c, ok := categoryNames[strings.ToLower(strings.TrimSpace(s))]
	return c, ok
}

// Retryable reports whether retrying can help: transient and rate-limited failures pass
// with time, and unknown ones get a few chances (Decide caps them) before going to dead.
func (c Category) Retryable() bool {
	switch c {
	case Transient, RateLimited, Unknown:
		return true
	}
	return false
}

// transientCodes are socket-level error codes (Node.js and libc style) that mean the
// network or the peer hiccupped, not that the message is bad.
var transientCodes = map[string]bool{
	"ETIMEDOUT":       true,
	"ECONNRESET":      true,
	"ECONNREFUSED":    true,
	"ECONNABORTED":    true,
	"EPIPE":           true,
	"EAI_AGAIN":       true,
	"EHOSTUNREACH":    true,
	"ENETUNREACH":     true,
	"ESOCKETTIMEDOUT": true,
}

// reasonRule maps lower-case substrings of an error's text to a category.
type reasonRule struct {
	substrings []string
	category   Category
}

// reasonRules are tried in order; the first rule with a matching substring wins. Order
// matters: "invalid json" must be seen as Permanent before "invalid" means Validation.
var reasonRules = []reasonRule{
	{[]string{"too many requests", "rate limit", "throttl", "quota"}, RateLimited},
	{[]string{"timeout", "timed out", "connection reset", "connection refused", "unavailable", "temporar"}, Transient},
	{[]string{"deserializ", "unmarshal", "schema", "malformed", "invalid json", "parse error"}, Permanent},
	{[]string{"validation", "invalid"}, Validation},
	{[]string{"credential", "misconfigur", "configuration"}, Configuration},
}

// Rules is a version of the decision rules (Classify, Decide). A workflow that started under
// older rules keeps them on replay (it picks with workflow.GetVersion); everything else uses
// CurrentRules.
type Rules int

const (
	// RulesUnknownCapEverywhere are the older rules: unknown errors get at most 2
	// retries under every policy, and socket error codes count only in the error_code field.
	RulesUnknownCapEverywhere Rules = iota
	// RulesUnknownCapPerPolicy: the cap on unknown errors is the policy's UnknownMaxRetries
	// (none when 0), and socket error codes (and "socket hang up") in the reason text are
	// transient like the error_code field (Node.js consumers put them in the reason).
	RulesUnknownCapPerPolicy
	// CurrentRules are the rules new decisions follow.
	CurrentRules = RulesUnknownCapPerPolicy
)

// legacyUnknownMaxRetries is the cap RulesUnknownCapEverywhere puts on unknown errors.
const legacyUnknownMaxRetries = 2

// Classify puts a failure in a category under CurrentRules.
func Classify(f Failure) Category { return CurrentRules.Classify(f) }

// Classify puts a failure in a category by a fixed decision tree: an explicit category
// from the reporter wins, then the HTTP status, then the error code, then the reason
// text; anything unrecognised is Unknown, which is retried only briefly.
func (r Rules) Classify(f Failure) Category {
	if c, ok := ParseCategory(f.Category); ok {
		return c
	}
	if c, ok := classifyStatus(f.HTTPStatus); ok {
		return c
	}
	if transientCodes[strings.ToUpper(strings.TrimSpace(f.ErrorCode))] {
		return Transient
	}
	if r >= RulesUnknownCapPerPolicy && hasTransientCode(f.Reason) {
		return Transient
	}
	reason := strings.ToLower(f.Reason)
	for _, rule := range reasonRules {
		for _, s := range rule.substrings {
			if strings.Contains(reason, s) {
				return rule.category
			}
		}
	}
	return Unknown
}

// hasTransientCode reports whether an error's text names a socket error code as a word
// ("ECONNRESET: socket hang up", "connect ETIMEDOUT 10.0.0.1:443") or says "socket hang up"
// (Node.js's text for a reset connection). A word, so that "EPIPELINE" is not EPIPE.
func hasTransientCode(reason string) bool {
	if strings.Contains(strings.ToLower(reason), "socket hang up") {
		return true
	}
	words := strings.FieldsFunc(reason, func(c rune) bool {
		return !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_')
	})
	for _, w := range words {
		if transientCodes[strings.ToUpper(w)] {
			return true
		}
	}
	return false
}

// classifyStatus handles 4xx and 5xx statuses; others (0, 2xx, 3xx) say nothing.
func classifyStatus(status int) (Category, bool) {
	switch {
	case status == 429:
		return RateLimited, true
	case status == 408: // request timeout: the server gave up waiting, the request may be fine
		return Transient, true
	case status >= 400 && status < 500:
		return Permanent, true
	case status == 502, status == 503, status == 504:
		return Transient, true
	case status >= 500 && status < 600: // 500 may be a bug triggered by this message, or not
		return Unknown, true
	}
	return "", false
}
