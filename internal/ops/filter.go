package ops

import (
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/visibility"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Filter selects retry workflows. Zero fields do not filter. Its values come from requests
// checked by the parse functions below (statuses and categories from their lists, free text by
// checkText, times parsed); the visibility package quotes them into a query.
type Filter struct {
	// Statuses are RetryStatus values (OR'ed); empty means the list's own default.
	Statuses  []workflows.Status
	Queue     string
	Category  string
	Tenant    string
	EventType string
	// Service is the consuming service (ConsumerService) and ErrorType the last failure's
	// error type (ErrorType): exact, in visibility.
	Service   string
	ErrorType string
	// ErrorText is a substring of the last failure's error, matched case-insensitively after
	// the visibility query (matchErrorText), on at most maxErrorTextScan items.
	ErrorText string
	// DeadLetterID is a dlqId or dlqUuid: the dead letter whose envelope carries it.
	DeadLetterID string
	// DeadFrom and DeadTo bound DeadAt (inclusive from, exclusive to).
	DeadFrom, DeadTo time.Time
	// Closed selects runs that completed (delivered ones) instead of running ones; ClosedFrom
	// bounds their CloseTime (inclusive).
	Closed     bool
	ClosedFrom time.Time
}

// query is the visibility query for f within one deployment: its own workflows only (type and
// task queue), running ones only (a parked dead letter is a running workflow; a closed one
// keeps the status it had when it closed) unless f asks for completed ones.
func (f Filter) query(taskQueue string) string {
	executionStatus := visibility.Running
	if f.Closed {
		executionStatus = visibility.Completed
	}
	return visibility.RetryWorkflows(executionStatus, taskQueue).
		Statuses(f.Statuses...).
		Equal(workflows.SAOriginalQueue, f.Queue).
		Equal(workflows.SAErrorCategory, f.Category).
		Equal(workflows.SATenant, f.Tenant).
		Equal(workflows.SAEventType, f.EventType).
		Equal(workflows.SAConsumerService, f.Service).
		Equal(workflows.SAErrorType, f.ErrorType).
		Equal(workflows.SADeadLetterIDs, f.DeadLetterID).
		AtOrAfter(workflows.SADeadAt, f.DeadFrom).
		Before(workflows.SADeadAt, f.DeadTo).
		AtOrAfter(visibility.CloseTime, f.ClosedFrom).
		String()
}

// Query parameters of the lists.
const (
	paramStatus    = "status"
	paramQueue     = "queue"
	paramCategory  = "category"
	paramTenant    = "tenant"
	paramEventType = "event_type"
	paramService   = "service"
	paramErrorType = "error_type"
	paramErrorText = "error_text"
	paramDLQID     = "dlq_id"
	paramFrom      = "from"
	paramTo        = "to"
	paramSince     = "since"
	paramSort      = "sort"
	paramOrder     = "order"
	paramPageSize  = "page_size"
	paramPageToken = "next_page_token"
)

// commonParams are the parameters every list takes.
var commonParams = []string{paramQueue, paramCategory, paramTenant, paramEventType, paramService, paramErrorType,
	paramErrorText, paramPageSize, paramPageToken}

// parseRetryQueueFilter reads GET /api/retry-queue's filters: status, queue, category, tenant,
// event_type.
func parseRetryQueueFilter(q url.Values) (Filter, error) {
	if err := knownParams(q, append([]string{paramStatus}, commonParams...)...); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: visibility.RetryQueueStatuses}
	if v := q.Get(paramStatus); v != "" {
		f.Statuses = nil
		for _, s := range strings.Split(v, ",") {
			st := workflows.Status(strings.TrimSpace(s))
			if !visibility.InRetryQueue(st) {
				return Filter{}, badf("status %q is not one of %s (dead letters are listed by /api/dead-letters)", s, statusNames(visibility.RetryQueueStatuses, ", "))
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	if err := parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
	}
	return f, nil
}

// parseCommonFilter reads the filters every list takes: queue, category, tenant, event_type,
// service, error_type, error_text.
func parseCommonFilter(q url.Values, f *Filter) error {
	if err := f.setCommon(q.Get(paramQueue), q.Get(paramCategory), q.Get(paramTenant), q.Get(paramEventType)); err != nil {
		return err
	}
	return f.setFinding(q.Get(paramService), q.Get(paramErrorType), q.Get(paramErrorText))
}

// setFinding checks and sets the consuming service, error type and error text filters; empty
// ones stay unset.
func (f *Filter) setFinding(service, errorType, errorText string) error {
	var err error
	for _, p := range []struct {
		name, v string
		dst     *string
	}{{paramService, service, &f.Service}, {paramErrorType, errorType, &f.ErrorType}} {
		if p.v == "" {
			continue
		}
		if *p.dst, err = parseText(p.name, p.v); err != nil {
			return err
		}
	}
	if errorText != "" {
		if f.ErrorText, err = parseSearchText(paramErrorText, errorText); err != nil {
			return err
		}
	}
	return nil
}

// parseSearchText checks a substring to look for in what the state query answers (it never
// reaches visibility): at most maxTextLen bytes of UTF-8 without control characters, and not
// only blanks.
func parseSearchText(what, v string) (string, error) {
	switch {
	case len(v) > maxTextLen:
		return "", badf("%s is longer than %d bytes", what, maxTextLen)
	case !utf8.ValidString(v):
		return "", badf("%s is not valid UTF-8", what)
	case strings.ContainsFunc(v, unicode.IsControl):
		return "", badf("%s contains a control character", what)
	case strings.TrimSpace(v) == "":
		return "", badf("%s is only blanks", what)
	}
	return v, nil
}

// maxDeadLetterIDLen bounds a dlq_id: a dlqId is a workflow ID, "#" and a count, or a
// poison delivery's id.
const maxDeadLetterIDLen = 1100

// parseDeadLetterID checks a dlqId or dlqUuid.
func parseDeadLetterID(v string) (string, error) {
	switch {
	case len(v) > maxDeadLetterIDLen:
		return "", badf("%s is longer than %d bytes", paramDLQID, maxDeadLetterIDLen)
	case !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl):
		return "", badf("%s is not UTF-8 text without control characters", paramDLQID)
	}
	if err := visibility.CheckMatchable(v); err != nil {
		return "", badf("%s %q: %v", paramDLQID, v, err)
	}
	return v, nil
}

// setCommon checks and sets the filters lists and bulk actions share; empty ones stay unset.
func (f *Filter) setCommon(queue, category, tenant, eventType string) error {
	var err error
	for _, p := range []struct {
		name, v string
		dst     *string
	}{{paramQueue, queue, &f.Queue}, {paramTenant, tenant, &f.Tenant}, {paramEventType, eventType, &f.EventType}} {
		if p.v == "" {
			continue
		}
		if *p.dst, err = parseText(p.name, p.v); err != nil {
			return err
		}
	}
	if category != "" {
		if f.Category, err = parseCategory(category); err != nil {
			return err
		}
	}
	return nil
}

// parseDeadLetterFilter reads GET /api/dead-letters' filters: the common ones, dlq_id (a
// dlqId or dlqUuid), from, to (RFC 3339, on DeadAt). The order (sort, order) is read by
// parseDeadLetterOrder.
func parseDeadLetterFilter(q url.Values) (Filter, error) {
	if err := knownParams(q, append([]string{paramDLQID, paramFrom, paramTo, paramSort, paramOrder}, commonParams...)...); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: []workflows.Status{workflows.StatusDead}}
	if err := parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
	}
	if v := q.Get(paramDLQID); v != "" {
		var err error
		if f.DeadLetterID, err = parseDeadLetterID(v); err != nil {
			return Filter{}, err
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{paramFrom, &f.DeadFrom}, {paramTo, &f.DeadTo}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return Filter{}, badf("%s %q is not an RFC 3339 time (e.g. 2026-01-31T08:00:00Z)", p.name, v)
			}
			*p.dst = t
		}
	}
	if !f.DeadFrom.IsZero() && !f.DeadTo.IsZero() && !f.DeadFrom.Before(f.DeadTo) {
		return Filter{}, badf("from (%s) must be before to (%s)", q.Get(paramFrom), q.Get(paramTo))
	}
	return f, nil
}

// Defaults and bounds of the delivered list's window.
const (
	defaultDeliveredSince = 24 * time.Hour
	maxDeliveredSince     = 90 * 24 * time.Hour
)

// parseDeliveredFilter reads GET /api/delivered's filters: since (a duration back from now,
// default 24h), queue, category, tenant, event_type.
func parseDeliveredFilter(q url.Values, now time.Time) (Filter, error) {
	if err := knownParams(q, append([]string{paramSince}, commonParams...)...); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: []workflows.Status{workflows.StatusDelivered}, Closed: true}
	if err := parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
	}
	since := defaultDeliveredSince
	if v := q.Get(paramSince); v != "" {
		d, err := config.ParseDuration(v)
		if err != nil || d <= 0 || d > maxDeliveredSince {
			return Filter{}, badf("since %q is not a duration from 1s to 90d (e.g. 30m, 24h, 7d)", v)
		}
		since = d
	}
	f.ClosedFrom = now.Add(-since)
	return f, nil
}

// BulkFilter is the body of replay, purge and retry-matching: which items.
type BulkFilter struct {
	Queue     string `json:"queue,omitempty"`
	Category  string `json:"category,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Service   string `json:"service,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
	// ErrorText selects items whose last error holds it (case-insensitive); the job then acts
	// on the ids matched when it started, of at most maxErrorTextScan candidates.
	ErrorText string `json:"error_text,omitempty"`
	// OlderThan selects dead letters dead for at least this long (a Go duration or whole days,
	// e.g. 90m, 24h, 7d). Replay and purge only.
	OlderThan string `json:"older_than,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Canary, replay only: replay this many first, wait for their outcomes, and go on only
	// while fewer than MaxFailureRatio (default 0.5) of what was judged failed again; each
	// replayed item has CanaryTimeout to settle (default: the items' longest quiet window and
	// 30 s). 0: no canary.
	Canary          int      `json:"canary,omitempty"`
	MaxFailureRatio *float64 `json:"max_failure_ratio,omitempty"`
	CanaryTimeout   string   `json:"canary_timeout,omitempty"`
}

// filter validates b and turns it into a Filter on items in any of statuses, relative to
// now. older_than applies to dead letters only.
func (b BulkFilter) filter(now time.Time, statuses ...workflows.Status) (Filter, error) {
	f := Filter{Statuses: statuses}
	if err := f.setCommon(b.Queue, b.Category, b.Tenant, b.EventType); err != nil {
		return Filter{}, err
	}
	if err := f.setFinding(b.Service, b.ErrorType, b.ErrorText); err != nil {
		return Filter{}, err
	}
	if b.OlderThan != "" && !slices.Equal(statuses, []workflows.Status{workflows.StatusDead}) {
		return Filter{}, badf("older_than applies to dead letters only (it is the time since an item died)")
	}
	if b.OlderThan != "" {
		d, err := config.ParseDuration(b.OlderThan)
		if err != nil || d <= 0 {
			return Filter{}, badf("older_than %q is not a positive duration (e.g. 30m, 24h, 7d)", b.OlderThan)
		}
		f.DeadTo = now.Add(-d)
	}
	return f, nil
}
