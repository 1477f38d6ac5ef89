package ops

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
)

// Decoding and checking what a request sends: bodies, query parameters and free text. Every
// refusal is a badRequest, answered 400 with its text.

// badRequest is a client error: its text goes back in a 400.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return badRequest{fmt.Sprintf(format, a...)} }

// Bounds of what a request may send.
const (
	// maxBodyBytes bounds a JSON body.
	maxBodyBytes = 1 << 20
	// maxTextLen bounds free-text filter values (RabbitMQ queue names are at most 255 bytes).
	maxTextLen = 255
	// maxReasonLen bounds an operator's reason, which every signal carries into the history.
	maxReasonLen = 1000
)

// readJSON decodes the request body into v: at most maxBodyBytes, no unknown fields, one
// value. An empty body leaves v as it is when emptyOK.
func readJSON(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	return readJSONUpTo(w, r, v, emptyOK, maxBodyBytes)
}

// readJSONUpTo is readJSON with a body of at most limit bytes.
func readJSONUpTo(w http.ResponseWriter, r *http.Request, v any, emptyOK bool, limit int64) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return badf("read the body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if emptyOK {
			return nil
		}
		return badf("the body is empty; send a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badf("the body is not the JSON this route takes: %v", err)
	}
	if dec.More() {
		return badf("the body holds more than one JSON value")
	}
	return nil
}

// readReason reads a body that holds at most a reason (ActionRequest, BreakerRequest,
// CancelRequest) and checks it; on a bad body it answers the error and ok is false.
func readReason(w http.ResponseWriter, r *http.Request) (reason string, ok bool) {
	var req ActionRequest
	if err := readJSON(w, r, &req, true); err != nil {
		fail(w, err)
		return "", false
	}
	if err := checkReason(req.Reason); err != nil {
		fail(w, err)
		return "", false
	}
	return req.Reason, true
}

// checkReason refuses a reason too long, or with control characters other than line breaks
// and tabs.
func checkReason(s string) error {
	if len(s) > maxReasonLen {
		return badf("reason is longer than %d bytes", maxReasonLen)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
		return badf("reason contains a control character")
	}
	return nil
}

// knownParams refuses query parameters a route does not take, so that a typo does not
// silently list everything.
func knownParams(q url.Values, allowed ...string) error {
	for k := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return badf("unknown query parameter %q (this route takes %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// checkText refuses values that cannot be a queue, tenant or event type filter: empty, too
// long, not UTF-8, holding control characters, or a value visibility cannot match
// (visibility.CheckMatchable: refused rather than answered with a list that silently misses
// items).
func checkText(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is empty", what)
	case len(v) > maxTextLen:
		return fmt.Errorf("%s is longer than %d bytes", what, maxTextLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("%s contains a control character", what)
	}
	if err := visibility.CheckMatchable(v); err != nil {
		return fmt.Errorf("%s %q: %w", what, v, err)
	}
	return nil
}

// parseText checks a free-text filter value (checkText).
func parseText(what, v string) (string, error) {
	if err := checkText(what, v); err != nil {
		return "", badRequest{err.Error()}
	}
	return v, nil
}

// parseCategory accepts a category name (any spelling policy.ParseCategory accepts) and
// returns its canonical name.
func parseCategory(v string) (string, error) {
	c, ok := policy.ParseCategory(v)
	if !ok {
		return "", badf("category %q is not one of transient, rate-limited, permanent, validation, client, configuration, unknown", v)
	}
	return string(c), nil
}
