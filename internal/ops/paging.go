package ops

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sorting and keyset paging of the lists. SQL visibility cannot ORDER BY, so a list reads
// every match (scan) and sorts and pages it here.

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

// Sort keys: the time a list sorts on.
const (
	// sortNextRetry is the retry queue's: NextRetryTime.
	sortNextRetry = "next_retry_at"
	// sortDeadAt orders dead letters by when they died (DeadAt).
	sortDeadAt = "dead_at"
	// sortCreatedAt orders dead letters by when their first failure report started the
	// workflow: the run's StartTime, known to visibility for every row.
	sortCreatedAt = "created_at"
	// sortClosedAt is the delivered list's: CloseTime.
	sortClosedAt = "closed_at"
)

// Sort directions of the dead-letter list.
const (
	orderDesc = "desc"
	orderAsc  = "asc"
)

// order is how a list sorts: By names the time it sorts on, Desc puts the newest first. Items
// without that time sort last either way.
type order struct {
	By   string
	Desc bool
}

// parseDeadLetterOrder reads sort (dead_at, the default, or created_at) and order (desc, the
// default: newest first, or asc).
func parseDeadLetterOrder(q url.Values) (order, error) {
	o := order{By: sortDeadAt, Desc: true}
	switch v := q.Get(paramSort); v {
	case "", sortDeadAt:
	case sortCreatedAt:
		o.By = sortCreatedAt
	default:
		return order{}, badf("sort %q is not %s or %s", v, sortDeadAt, sortCreatedAt)
	}
	switch v := q.Get(paramOrder); v {
	case "", orderDesc:
	case orderAsc:
		o.Desc = false
	default:
		return order{}, badf("order %q is not %s or %s", v, orderDesc, orderAsc)
	}
	return o, nil
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

// cursor is the keyset position after the last item of a page: its sort time and workflow ID.
// Keyset, not offset, so that items that leave the list between pages do not shift the next
// page.
type cursor struct {
	// At is the sort key in Unix nanoseconds; Unset marks items without one (sorted last).
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

// cursorOf is its position under o.
func (o order) cursorOf(it *Item) cursor {
	t := o.key(it)
	if t == nil {
		return cursor{Unset: true, ID: it.ID}
	}
	return cursor{At: t.UnixNano(), ID: it.ID}
}

// compare orders two positions: by sort time in o's direction, items without one last, ties
// by workflow ID.
func (o order) compare(x, y cursor) int {
	switch {
	case x.Unset != y.Unset:
		if x.Unset {
			return 1
		}
		return -1
	case x.At != y.At:
		if (x.At < y.At) != o.Desc {
			return -1
		}
		return 1
	}
	return strings.Compare(x.ID, y.ID)
}

// page sorts items in o and returns the size items after cur (from the start when nil), and
// the token of the next page ("" on the last).
func (o order) page(items []Item, cur *cursor, size int) (page []Item, next string) {
	slices.SortFunc(items, func(x, y Item) int { return o.compare(o.cursorOf(&x), o.cursorOf(&y)) })
	start := 0
	if cur != nil {
		start = len(items)
		for i := range items {
			if o.compare(o.cursorOf(&items[i]), *cur) > 0 {
				start = i
				break
			}
		}
	}
	end := min(start+size, len(items))
	if end < len(items) {
		next = o.cursorOf(&items[end-1]).encode()
	}
	return items[start:end], next
}
