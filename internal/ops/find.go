package ops

import (
	"context"
	"strings"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Finding items by what visibility cannot match: the text of their last error, and where
// they failed (the External System column).

// maxErrorTextScan bounds the items an error_text filter reads the state of: the visibility
// query of the other filters selects them, and each costs a state query. Custom Text search
// attributes are matched by word on PostgreSQL and by other rules on the dev server's SQLite,
// so a substring is looked for here, in the last error the state query answers.
const maxErrorTextScan = 1000

// errTooManyForText answers an error_text filter whose other filters match too many items.
func errTooManyForText(n int, truncated bool) error {
	more := ""
	if truncated {
		more = " or more"
	}
	return badf("error_text looks in the last error of at most %d items and the other filters match %d%s: narrow them (queue, service, error_type, category, event_type, from/to)",
		maxErrorTextScan, n, more)
}

// lastError is the error an item's error_text filter looks in: its last attempt's, else why
// it went dead.
func lastError(st workflows.State) string {
	if n := len(st.Attempts); n > 0 && st.Attempts[n-1].Error != "" {
		return st.Attempts[n-1].Error
	}
	return st.DeadDetail
}

// matchErrorText keeps the items whose last error holds text, case-insensitively, reading
// enrichParallel states at a time. An item whose state cannot be read is left out and
// counted in unchecked: a filter that acts (replay, purge) must not act on what it did not
// match.
func (a *API) matchErrorText(ctx context.Context, items []Item, text string) (matched []Item, unchecked int, err error) {
	want := strings.ToLower(text)
	keep := make([]bool, len(items))
	failed := make([]bool, len(items))
	readEach(ctx, len(items), enrichTimeout, func(qctx context.Context, i int) {
		if ctx.Err() != nil {
			failed[i] = true
			return
		}
		st, err := a.state(qctx, items[i].ID, items[i].StartDelayUntil)
		if err != nil {
			failed[i] = true
			return
		}
		keep[i] = strings.Contains(strings.ToLower(lastError(st)), want)
	})
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	for i, it := range items {
		if keep[i] {
			matched = append(matched, it)
		}
		if failed[i] {
			unchecked++
		}
	}
	return matched, unchecked, nil
}

// externalSystem is the destination a message failed against, as the External System
// column shows it: its queue on the default exchange, else "exchange:routing key".
func externalSystem(m message.Message) string {
	if m.OriginalExchange == "" {
		return m.OriginalQueue
	}
	key := m.OriginalRoutingKey
	if key == "" {
		key = m.OriginalQueue
	}
	return m.OriginalExchange + ":" + key
}

// lastErrorType is the last attempt's error type, "" when it named none.
func lastErrorType(st workflows.State) string {
	if n := len(st.Attempts); n > 0 {
		return st.Attempts[n-1].ErrorType
	}
	return ""
}
