package ops

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/config"
	"github.com/retry-scheduler/retry-scheduler/visibility"
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
	paramFrom      = "from"
	paramTo        = "to"
	paramSince     = "since"
	paramSort      = "sort"
	paramOrder     = "order"
	paramPageSize  = "page_size"
	paramPageToken = "next_page_token"
)

// commonParams are the parameters every list takes.
var commonParams = []string{paramQueue, paramCategory, paramTenant, paramEventType, paramPageSize, paramPageToken}

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

// parseCommonFilter reads the filters every list takes: queue, category, tenant, event_type.
func parseCommonFilter(q url.Values, f *Filter) error {
	return f.setCommon(q.Get(paramQueue), q.Get(paramCategory), q.Get(paramTenant), q.Get(paramEventType))
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

// parseDeadLetterFilter reads GET /api/dead-letters' filters: queue, category, tenant,
// event_type, from, to (RFC 3339, on DeadAt). The order (sort, order) is read by
// parseDeadLetterOrder.
func parseDeadLetterFilter(q url.Values) (Filter, error) {
	if err := knownParams(q, append([]string{paramFrom, paramTo, paramSort, paramOrder}, commonParams...)...); err != nil {
		return Filter{}, err
	}
	f := Filter{Statuses: []workflows.Status{workflows.StatusDead}}
	if err := parseCommonFilter(q, &f); err != nil {
		return Filter{}, err
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
