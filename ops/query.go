package ops

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"retry-scheduler/policy"
	"retry-scheduler/workflows"
)

// Visibility queries are built here, and only here, from validated values: statuses and
// categories come from whitelists, free text (queue, tenant) is checked and quoted, times are
// formatted by us. Nothing from a request is pasted into a query as it came.

// liveStatuses are the retry queue's statuses: waiting, or being retried right now.
var liveStatuses = []workflows.Status{workflows.StatusScheduled, workflows.StatusRepublishing, workflows.StatusAwaitingOutcome}

// maxTextLen bounds free-text filter values (RabbitMQ queue names are at most 255 bytes).
const maxTextLen = 255

// checkText refuses values that cannot be a queue or tenant filter: empty, too long, not
// UTF-8, holding control characters, double quotes or backslashes.
func checkText(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is empty", what)
	case len(v) > maxTextLen:
		return fmt.Errorf("%s is longer than %d bytes", what, maxTextLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case strings.ContainsAny(v, `"\`):
		// Quoted and escaped, they would be safe, but SQL visibility does not match them
		// reliably: refuse rather than answer with a list that silently misses items.
		return fmt.Errorf(`%s contains " or \, which visibility queries cannot match`, what)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s contains a control character", what)
		}
	}
	return nil
}

// quote renders s as a visibility-query string literal: double quotes, with backslash and
// double quote escaped by a backslash. Values from requests have passed checkText (no control
// characters, quotes or backslashes), so the escaping is a second line of defence.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		if r == '\\' || r == '"' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

func timeLiteral(t time.Time) string { return quote(t.UTC().Format(time.RFC3339Nano)) }

// Filter selects retry workflows. Zero fields do not filter.
type Filter struct {
	// Statuses are RetryStatus values (OR'ed); empty means the list's own default.
	Statuses  []workflows.Status
	Queue     string
	Category  string
	Tenant    string
	EventType string
	// DeadFrom and DeadTo bound DeadAt (inclusive from, exclusive to).
	DeadFrom, DeadTo time.Time
	// Closed selects runs that completed (delivered ones) instead of running ones; ClosedFrom
	// bounds their CloseTime (inclusive).
	Closed     bool
	ClosedFrom time.Time
}

// scope is what every query of this deployment adds: its own workflows only (type and task
// queue), running ones only (a parked dead letter is a running workflow; a closed one keeps the
// status it had when it closed) unless the filter asks for completed ones.
type scope struct {
	TaskQueue string
}

// Query builds the visibility query for f.
func (s scope) Query(f Filter) string {
	execStatus := `ExecutionStatus = "Running"`
	if f.Closed {
		execStatus = `ExecutionStatus = "Completed"`
	}
	parts := []string{
		"WorkflowType = " + quote(workflows.RetryWorkflowName),
		execStatus,
	}
	if s.TaskQueue != "" {
		parts = append(parts, "TaskQueue = "+quote(s.TaskQueue))
	}
	switch len(f.Statuses) {
	case 0:
	case 1:
		parts = append(parts, workflows.SAStatus.GetName()+" = "+quote(string(f.Statuses[0])))
	default:
		q := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			q[i] = quote(string(st))
		}
		parts = append(parts, workflows.SAStatus.GetName()+" IN ("+strings.Join(q, ", ")+")")
	}
	if f.Queue != "" {
		parts = append(parts, workflows.SAOriginalQueue.GetName()+" = "+quote(f.Queue))
	}
	if f.Category != "" {
		parts = append(parts, workflows.SAErrorCategory.GetName()+" = "+quote(f.Category))
	}
	if f.Tenant != "" {
		parts = append(parts, workflows.SATenant.GetName()+" = "+quote(f.Tenant))
	}
	if f.EventType != "" {
		parts = append(parts, workflows.SAEventType.GetName()+" = "+quote(f.EventType))
	}
	if !f.DeadFrom.IsZero() {
		parts = append(parts, workflows.SADeadAt.GetName()+" >= "+timeLiteral(f.DeadFrom))
	}
	if !f.DeadTo.IsZero() {
		parts = append(parts, workflows.SADeadAt.GetName()+" < "+timeLiteral(f.DeadTo))
	}
	if !f.ClosedFrom.IsZero() {
		parts = append(parts, "CloseTime >= "+timeLiteral(f.ClosedFrom))
	}
	return strings.Join(parts, " AND ")
}

// badRequest is a client error: its text goes back in a 400.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return badRequest{fmt.Sprintf(format, a...)} }

// parseCategory accepts a category name (any spelling policy.ParseCategory accepts) and
// returns its canonical name.
func parseCategory(v string) (string, error) {
	c, ok := policy.ParseCategory(v)
	if !ok {
		return "", badf("category %q is not one of transient, rate-limited, permanent, validation, client, configuration, unknown", v)
	}
	return string(c), nil
}

func parseText(what, v string) (string, error) {
	if err := checkText(what, v); err != nil {
		return "", badRequest{err.Error()}
	}
	return v, nil
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

// parseRetryQueueFilter reads GET /api/retry-queue's filters: status, queue, category, tenant,
// event_type.
func parseRetryQueueFilter(q url.Values) (Filter, error) {
	if err := knownParams(q, "status", "queue", "category", "tenant", "event_type", "page_size", "next_page_token"); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: liveStatuses}
	var err error
	if v := q.Get("status"); v != "" {
		f.Statuses = nil
		for _, s := range strings.Split(v, ",") {
			st := workflows.Status(strings.TrimSpace(s))
			if !isLive(st) {
				return Filter{}, badf("status %q is not one of scheduled, republishing, awaiting-outcome (dead letters are listed by /api/dead-letters)", s)
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	if err = parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
	}
	return f, nil
}

// parseCommonFilter reads the filters every list takes: queue, category, tenant, event_type.
func parseCommonFilter(q url.Values, f *Filter) error {
	var err error
	if v := q.Get("queue"); v != "" {
		if f.Queue, err = parseText("queue", v); err != nil {
			return err
		}
	}
	if v := q.Get("category"); v != "" {
		if f.Category, err = parseCategory(v); err != nil {
			return err
		}
	}
	if v := q.Get("tenant"); v != "" {
		if f.Tenant, err = parseText("tenant", v); err != nil {
			return err
		}
	}
	if v := q.Get("event_type"); v != "" {
		if f.EventType, err = parseText("event_type", v); err != nil {
			return err
		}
	}
	return nil
}

func isLive(st workflows.Status) bool {
	for _, l := range liveStatuses {
		if st == l {
			return true
		}
	}
	return false
}

// parseDeadLetterFilter reads GET /api/dead-letters' filters: queue, category, tenant,
// event_type, from, to (RFC 3339, on DeadAt). The order (sort, order) is read by
// parseDeadLetterOrder.
func parseDeadLetterFilter(q url.Values) (Filter, error) {
	if err := knownParams(q, "queue", "category", "tenant", "event_type", "from", "to", "sort", "order", "page_size", "next_page_token"); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: []workflows.Status{workflows.StatusDead}}
	var err error
	if err = parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &f.DeadFrom}, {"to", &f.DeadTo}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return Filter{}, badf("%s %q is not an RFC 3339 time (e.g. 2026-01-31T08:00:00Z)", p.name, v)
			}
			*p.dst = t
		}
	}
	if !f.DeadFrom.IsZero() && !f.DeadTo.IsZero() && !f.DeadFrom.Before(f.DeadTo) {
		return Filter{}, badf("from (%s) must be before to (%s)", q.Get("from"), q.Get("to"))
	}
	return f, nil
}

// Sort keys of the dead-letter list.
const (
	// sortDeadAt orders by when the item died (DeadAt).
	sortDeadAt = "dead_at"
	// sortCreatedAt orders by when its first failure report started the workflow (seed 003's
	// "Created At": the run's StartTime, known to visibility for every row).
	sortCreatedAt = "created_at"
)

// parseDeadLetterOrder reads sort (dead_at, the default, or created_at) and order (desc, the
// default: newest first, or asc).
func parseDeadLetterOrder(q url.Values) (order, error) {
	o := order{By: sortDeadAt, Desc: true}
	switch v := q.Get("sort"); v {
	case "", sortDeadAt:
	case sortCreatedAt:
		o.By = sortCreatedAt
	default:
		return order{}, badf("sort %q is not dead_at or created_at", v)
	}
	switch v := q.Get("order"); v {
	case "", "desc":
	case "asc":
		o.Desc = false
	default:
		return order{}, badf("order %q is not desc or asc", v)
	}
	return o, nil
}

// Defaults and bounds of the delivered list's window.
const (
	defaultDeliveredSince = 24 * time.Hour
	maxDeliveredSince     = 90 * 24 * time.Hour
)

// parseDeliveredFilter reads GET /api/delivered's filters: since (a duration back from now,
// default 24h), queue, category, tenant, event_type.
func parseDeliveredFilter(q url.Values, now time.Time) (Filter, error) {
	if err := knownParams(q, "since", "queue", "category", "tenant", "event_type", "page_size", "next_page_token"); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: []workflows.Status{workflows.StatusDelivered}, Closed: true}
	if err := parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
	}
	since := defaultDeliveredSince
	if v := q.Get("since"); v != "" {
		d, err := parseAge(v)
		if err != nil || d <= 0 || d > maxDeliveredSince {
			return Filter{}, badf("since %q is not a duration from 1s to 90d (e.g. 30m, 24h, 7d)", v)
		}
		since = d
	}
	f.ClosedFrom = now.Add(-since)
	return f, nil
}

// Paging defaults.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

func parsePageSize(v string) (int, error) {
	if v == "" {
		return defaultPageSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPageSize {
		return 0, badf("page_size %q must be a whole number from 1 to %d", v, maxPageSize)
	}
	return n, nil
}

// order is how a list sorts: By names the time it sorts on, Desc puts the newest first. Items
// without that time sort last either way.
type order struct {
	By   string
	Desc bool
}

// key is its sort time under o: nil when it has none.
func (o order) key(it *Item) *time.Time {
	switch o.By {
	case sortDeadAt:
		return it.DeadAt
	case sortCreatedAt:
		t := it.StartedAt
		return &t
	case sortClosedAt:
		return it.ClosedAt
	default:
		return it.NextRetryAt
	}
}

// The other sort keys: the retry queue's and the delivered list's.
const (
	sortNextRetry = "next_retry_at"
	sortClosedAt  = "closed_at"
)

// cursor is the keyset position after the last item of a page: its sort time and workflow ID.
// Keyset, not offset, so that items that leave the list between pages do not shift the next
// page.
type cursor struct {
	// At is the sort key in Unix nanoseconds (NextRetryTime or DeadAt); Unset marks items
	// without one (sorted last).
	At    int64  `json:"t"`
	Unset bool   `json:"u,omitempty"`
	ID    string `json:"id"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(v string) (*cursor, error) {
	if v == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	var c cursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil && c.ID == "" {
		err = errors.New("no id")
	}
	if err != nil {
		return nil, badf("next_page_token is not a token this API returned")
	}
	return &c, nil
}

// BulkFilter is the body of replay, purge and retry-matching: which items.
type BulkFilter struct {
	Queue     string `json:"queue,omitempty"`
	Category  string `json:"category,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	EventType string `json:"event_type,omitempty"`
	// OlderThan selects dead letters dead for at least this long (a Go duration or whole days,
	// e.g. 90m, 24h, 7d). Replay and purge only.
	OlderThan string `json:"older_than,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// filter validates b and turns it into a Filter on items in status, relative to now.
// older_than applies to dead letters only.
func (b BulkFilter) filter(now time.Time, status workflows.Status) (Filter, error) {
	f := Filter{Statuses: []workflows.Status{status}}
	var err error
	if b.Tenant != "" {
		if f.Tenant, err = parseText("tenant", b.Tenant); err != nil {
			return Filter{}, err
		}
	}
	if b.EventType != "" {
		if f.EventType, err = parseText("event_type", b.EventType); err != nil {
			return Filter{}, err
		}
	}
	if b.OlderThan != "" && status != workflows.StatusDead {
		return Filter{}, badf("older_than applies to dead letters only (it is the time since an item died)")
	}
	if b.Queue != "" {
		if f.Queue, err = parseText("queue", b.Queue); err != nil {
			return Filter{}, err
		}
	}
	if b.Category != "" {
		if f.Category, err = parseCategory(b.Category); err != nil {
			return Filter{}, err
		}
	}
	if b.OlderThan != "" {
		d, err := parseAge(b.OlderThan)
		if err != nil || d <= 0 {
			return Filter{}, badf("older_than %q is not a positive duration (e.g. 30m, 24h, 7d)", b.OlderThan)
		}
		f.DeadTo = now.Add(-d)
	}
	return f, nil
}

// parseAge is time.ParseDuration plus whole days ("7d").
func parseAge(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n > 100000 {
			return 0, errors.New("bad days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}
