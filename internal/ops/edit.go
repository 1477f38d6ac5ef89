package ops

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// The single-item actions that carry more than a reason: a retry with an edited message
// (payload, headers, destination) and a snooze. Both are workflow updates; the API checks
// first what needs the deployment's configuration (the payload limit, the destinations
// guard), the workflow's validator what needs none.

// actionSnooze is the snooze's row: an update with no signal, legal while scheduled or dead
// (workflows.SnoozeRefusal).
var actionSnooze = action{Name: "snooze", Update: workflows.UpdateSnooze}

// actionEdit names an edited retry in the audit lines and the answer.
const actionEdit = "edit-retry"

// RetryRequest is the optional body of a single retry. Reason alone is a plain retry; any of
// the rest edits the message first (the edit is recorded in the item's state and events):
// Payload (text) or PayloadBase64 replaces the payload, Headers replaces the headers as a
// whole ({} removes them all), Destination sends the retry elsewhere.
type RetryRequest struct {
	Reason        string              `json:"reason,omitempty"`
	Payload       *string             `json:"payload,omitempty"`
	PayloadBase64 *string             `json:"payload_base64,omitempty"`
	Headers       json.RawMessage     `json:"headers,omitempty"`
	Destination   *DestinationRequest `json:"destination,omitempty"`
}

// DestinationRequest is where an edited retry goes: a queue (through the default exchange),
// or an exchange with a routing key, Queue then naming the destination (its breaker, its
// metrics; the message's own queue when empty).
type DestinationRequest struct {
	Queue      string `json:"queue,omitempty"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
}

// SnoozeRequest is the body of a snooze: Until (RFC 3339) or For (a Go duration, "1h30m"),
// one of them, at most the dead-letter retention ahead.
type SnoozeRequest struct {
	Until  string `json:"until,omitempty"`
	For    string `json:"for,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// edits reports whether req asks for an edit, not a plain retry.
func (req RetryRequest) edits() bool {
	return req.Payload != nil || req.PayloadBase64 != nil || req.hasHeaders() || req.Destination != nil
}

func (req RetryRequest) hasHeaders() bool {
	h := bytes.TrimSpace(req.Headers)
	return len(h) > 0 && !bytes.Equal(h, []byte("null"))
}

// readRetry reads a retry's optional body; on a bad body it answers the error and ok is false.
func (a *API) readRetry(w http.ResponseWriter, r *http.Request) (req RetryRequest, ok bool) {
	// A payload may be up to MaxMessageBytes, in base64 a third more.
	limit := max(int64(maxBodyBytes), int64(a.cfg.MaxMessageBytes)*4/3+64<<10)
	err := readJSONUpTo(w, r, &req, true, limit)
	if err == nil {
		err = checkReason(req.Reason)
	}
	if err != nil {
		fail(w, err)
		return req, false
	}
	return req, true
}

// editOf checks req's edit as ingress checks a report (payload size, header policy,
// short strings) and returns it as the workflow's EditRetry, by p.
func (a *API) editOf(p Principal, req RetryRequest) (workflows.EditRetry, error) {
	e := workflows.EditRetry{OperatorAction: workflows.OperatorAction{Actor: p.Name, Reason: req.Reason}}
	if p.Role < RoleAdmin {
		// An edit writes what producers never sent to where they never named: the admins',
		// as purging is. A plain retry stays the operators'.
		return e, errorf(http.StatusForbidden, "editing a message's payload, headers or destination before its retry needs the admin role (%s is %s)", p.Name, p.Role)
	}
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		return e, badf("payload and payload_base64 are both set: send one")
	case req.Payload != nil:
		e.ReplacePayload, e.Payload = true, []byte(*req.Payload)
	case req.PayloadBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return e, badf("payload_base64 is not standard base64: %v", err)
		}
		e.ReplacePayload, e.Payload = true, b
	}
	if e.ReplacePayload && len(e.Payload) > a.cfg.MaxMessageBytes {
		return e, badf("payload is %d bytes, over the %d-byte limit (MAX_MESSAGE_BYTES)", len(e.Payload), a.cfg.MaxMessageBytes)
	}
	if req.hasHeaders() {
		h, err := decodeHeaders(req.Headers)
		if err != nil {
			return e, err
		}
		if e.Headers, err = message.CheckEditedHeaders(h); err != nil {
			return e, badf("headers refused: %v", err)
		}
		e.ReplaceHeaders = true
	}
	if d := req.Destination; d != nil {
		for _, f := range []struct{ name, v string }{{"queue", d.Queue}, {"exchange", d.Exchange}, {"routing_key", d.RoutingKey}} {
			if err := checkName("destination."+f.name, f.v); err != nil {
				return e, err
			}
		}
		if d.Queue == "" && d.Exchange == "" {
			return e, badf("destination names neither a queue nor an exchange")
		}
		if d.Exchange != "" && d.RoutingKey == "" {
			return e, badf("destination.routing_key is empty: a retry through an exchange needs one")
		}
		e.Destination = &workflows.Destination{Queue: d.Queue, Exchange: d.Exchange, RoutingKey: d.RoutingKey}
	}
	return e, nil
}

// decodeHeaders decodes a JSON object of headers, numbers kept exact.
func decodeHeaders(raw json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var h map[string]any
	if err := dec.Decode(&h); err != nil {
		return nil, badf("headers is not a JSON object of header names to values: %v", err)
	}
	if h == nil {
		h = map[string]any{}
	}
	return h, nil
}

// checkName refuses a queue, exchange or routing key AMQP cannot carry: over the short-string
// limit, or with control characters.
func checkName(field, v string) error {
	if len(v) > 255 {
		return badf("%s is %d bytes, over AMQP's 255-byte short-string limit", field, len(v))
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return badf("%s contains a control character", field)
	}
	return nil
}

// checkDestination applies the policy file's destinations guard to an edit's destination
// for the item in state st, as the bridge applies it to a producer's report (the
// scheduler's own queues and the broker's amq.* exchanges never): a 403 naming the rule.
func (a *API) checkDestination(e *workflows.EditRetry, st workflows.State) error {
	d := e.Destination
	if d == nil {
		return nil
	}
	if d.Queue == "" {
		d.Queue = st.Message.OriginalQueue
	}
	key := d.RoutingKey
	if key == "" {
		key = d.Queue // as the republish does
	}
	err := a.cfg.Guard.Check(policy.Destination{Queue: d.Queue, Exchange: d.Exchange, RoutingKey: key,
		Producer: st.Message.Producer, Tenant: st.Message.TenantID})
	if err != nil {
		return &apiError{Status: http.StatusForbidden, Current: st.Status, Msg: err.Error()}
	}
	return nil
}

// editRetry sends an edited retry of id; the answer is the state after it.
func (a *API) editRetry(ctx context.Context, p Principal, id string, e workflows.EditRetry) (workflows.State, error) {
	return a.updateItem(ctx, p, actionRetry, id, workflows.UpdateEditRetry, e, func(st workflows.State) error {
		return a.checkDestination(&e, st)
	})
}

// snoozeUntil reads a snooze's time: Until, or now plus For.
func snoozeUntil(req SnoozeRequest, now time.Time) (time.Time, error) {
	switch {
	case req.Until != "" && req.For != "":
		return time.Time{}, badf("until and for are both set: send one")
	case req.Until != "":
		t, err := time.Parse(time.RFC3339, req.Until)
		if err != nil {
			return time.Time{}, badf("until %q is not an RFC 3339 time (2026-01-02T15:04:05Z)", req.Until)
		}
		return t, nil
	case req.For != "":
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 {
			return time.Time{}, badf("for %q is not a positive duration (90m, 2h)", req.For)
		}
		return now.Add(d), nil
	}
	return time.Time{}, badf(`send {"until": "<RFC 3339 time>"} or {"for": "<duration>"}`)
}

// snooze answers POST /api/messages/{id}/snooze.
func (a *API) snooze(w http.ResponseWriter, r *http.Request, id string) {
	p := principalOf(r.Context())
	if err := knownParams(r.URL.Query()); err != nil {
		fail(w, err)
		return
	}
	var req SnoozeRequest
	err := readJSON(w, r, &req, false)
	if err == nil {
		err = checkReason(req.Reason)
	}
	var until time.Time
	if err == nil {
		until, err = snoozeUntil(req, a.cfg.Now())
	}
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+a.cfg.ActionWait)
	defer cancel()
	st, err := a.updateItem(ctx, p, actionSnooze, id, workflows.UpdateSnooze,
		workflows.Snooze{OperatorAction: workflows.OperatorAction{Actor: p.Name, Reason: req.Reason}, Until: until}, nil)
	if err != nil {
		a.audit(p, actionSnooze.Name, []string{id}, req.Reason, "refused", "until", until, "error", err.Error())
		fail(w, err)
		return
	}
	a.audit(p, actionSnooze.Name, []string{id}, req.Reason, "applied", "until", until, "status", string(st.Status))
	writeJSON(w, http.StatusOK, ActionResponse{ID: id, Action: actionSnooze.Name, Applied: true, State: st})
}

// auditEdit is the audit line's account of the last edit in st.
func auditEdit(st workflows.State) []any {
	if len(st.Edits) == 0 {
		return nil
	}
	e := st.Edits[len(st.Edits)-1]
	kv := []any{"edit", e.Summary()}
	if e.PayloadBefore != nil {
		kv = append(kv, "payload_before_sha256", e.PayloadBefore.SHA256, "payload_before_size", e.PayloadBefore.Size)
	}
	return kv
}

// invalidInput maps a workflow's refusal of what an update asks (not of the item's
// status) to a 400.
func invalidInput(id, msg string, cur workflows.Status) error {
	return &apiError{Status: http.StatusBadRequest, Current: cur, Msg: fmt.Sprintf("message %q: %s", id, msg)}
}
