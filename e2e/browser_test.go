//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// chromiumPath is Debian's chromium (apt-get install -y chromium; `make tools` installs it);
// CHROMIUM overrides it.
func chromiumPath(t *testing.T) string {
	p := os.Getenv("CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "no Chromium at %s (apt-get install -y chromium, or set CHROMIUM)", p)
	}
	return p
}

// browser starts a headless Chromium with a fresh profile for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelCtx()
		cancelAlloc()
	})
	// The first run starts the browser; it lives as long as ctx (no timeout on it).
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// newPage starts the test's browser (see browser) and a driver of its page.
func newPage(t *testing.T) *pageDriver {
	t.Helper()
	return &pageDriver{t: t, ctx: browser(t)}
}

// pageDriver drives the ops page.
type pageDriver struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	dialogs []string
	// clicks numbers clickNow's clicks: the page records each by its number (see clickNow).
	clicks int
}

// evalTimeout bounds one evaluation in the page; a wait (until) evaluates again.
const evalTimeout = 30 * time.Second

// acceptDialogs accepts every confirm() and keeps its text.
func (p *pageDriver) acceptDialogs() {
	opening := chromedp.Events(p.ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.dialogs = append(p.dialogs, ev.Message)
			p.mu.Unlock()
			go func() {
				_ = chromedp.Do(p.ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
					_, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
					return err
				}))
			}()
		}
	}()
}

func (p *pageDriver) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, patience)
	defer cancel()
	require.NoError(p.t, chromedp.Do(ctx, steps...))
}

// signIn opens the page at base, signs in with token and, unless landing is "", waits for
// the landing element to show.
func (p *pageDriver) signIn(base, token, landing string) {
	p.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + "/"),
		chromedp.WaitVisible(chromedp.CSS("#token-input")),
		chromedp.SendKeys(chromedp.CSS("#token-input"), token),
		chromedp.Click(chromedp.CSS("#sign-in")),
	}
	if landing != "" {
		steps = append(steps, chromedp.WaitVisible(chromedp.CSS(landing)))
	}
	p.do(steps...)
}

func (p *pageDriver) eval(expr string) (bool, error) {
	ctx, cancel := context.WithTimeout(p.ctx, evalTimeout)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
}

// clickNow clicks, once, the element sel matches in the page as it is when the click runs,
// waiting until one is there. The tables re-render on each refresh: a chromedp.Click finds its
// node first and may click it after the re-render removed it ("Could not find node with given
// id"), and a mouse click lands where the element was when its box was read, which a table
// above it growing moves. So the page's own script clicks, from a timer after the evaluation
// returned (a click that opens a confirm() dialog, which acceptDialogs answers, does not hold
// the evaluation up), and records the click under its number: an evaluation that timed out
// after it clicked is not followed by a second click, which would retry twice or undo a
// checkbox. What the click did is for the caller to wait for.
func (p *pageDriver) clickNow(what, sel string) {
	p.t.Helper()
	p.clicks++
	q, _ := json.Marshal(sel)
	p.until(what, fmt.Sprintf(`(() => {
		const done = window.__e2eClicks || (window.__e2eClicks = new Set());
		if (done.has(%d)) return true;
		const b = document.querySelector(%s);
		if (!b) return false;
		done.add(%d);
		setTimeout(() => b.click(), 0);
		return true;
	})()`, p.clicks, q, p.clicks))
}

// check ticks the checkbox sel matches, waiting until one is there and ticked: it clicks only
// an unticked box, so a repeated evaluation never unticks it.
func (p *pageDriver) check(what, sel string) {
	p.t.Helper()
	q, _ := json.Marshal(sel)
	p.until(what, fmt.Sprintf(`(() => { const b = document.querySelector(%s); if (b && !b.checked) b.click(); return !!b && b.checked; })()`, q))
}

// checkedExpr is a JavaScript expression: whether every checkbox sels match is there and ticked.
func checkedExpr(sels ...string) string {
	var conds []string
	for _, sel := range sels {
		q, _ := json.Marshal(sel)
		conds = append(conds, fmt.Sprintf(`!!(document.querySelector(%s) || {}).checked`, q))
	}
	return "(" + strings.Join(conds, " && ") + ")"
}

// bulk selects the rows ids of table with their checkboxes, sees every one ticked, clicks the
// bulk button btn once and waits until the action has started: the button disabled while it
// runs, or the progress line changed from what it said before the click.
func (p *pageDriver) bulk(table, btn string, ids ...string) {
	p.t.Helper()
	var boxes []string
	for _, id := range ids {
		box := rowSel(table, id) + ` input.row-select`
		p.check("the checkbox of "+id, box)
		boxes = append(boxes, box)
	}
	p.until("the selection of "+strings.Join(ids, ", "), checkedExpr(boxes...))
	before, _ := json.Marshal(p.text("#progress"))
	q, _ := json.Marshal(btn)
	p.clickNow("the bulk button "+btn, btn)
	p.until("the bulk action of "+btn+" started (its button disabled or the progress line changed)",
		fmt.Sprintf(`(document.querySelector(%s).disabled || document.querySelector("#progress").textContent.trim() !== %s)`, q, before))
}

// until evaluates the JavaScript expression expr until it is true, pressing the page's Refresh
// button between tries (the page also refreshes itself, but only every 10 s). It waits
// patience: every page action is an API call, and each list a query of every row's workflow.
func (p *pageDriver) until(what, expr string) {
	p.t.Helper()
	p.untilWithin(what, expr, patience)
}

// untilWithin is until with its own limit.
func (p *pageDriver) untilWithin(what, expr string, limit time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := p.eval(expr)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("page: %s not seen within %s (last error %v; progress line %q)", what, limit, err, p.text("#progress"))
		}
		_, _ = p.eval(`(() => { const r = document.querySelector("#refresh"); if (r) r.click(); return true; })()`)
		time.Sleep(300 * time.Millisecond) // the pace of the tries
	}
}

func rowSel(table, id string) string {
	b, _ := json.Marshal(id)
	return fmt.Sprintf(`%s tbody tr[data-id=%s]`, table, b)
}

func rowExpr(table, id string) string {
	b, _ := json.Marshal(rowSel(table, id))
	return fmt.Sprintf(`(document.querySelector(%s) !== null)`, b)
}

// text is the element's visible text.
func (p *pageDriver) text(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, evalTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(p.t, err, sel)
	return strings.TrimSpace(s)
}

func TestOpsBrowser(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	p.acceptDialogs()

	// Sign in; nothing has failed yet: the empty state.
	p.signIn(api.base, opToken, "#dl-empty")
	assert.Equal(t, "No failed events. All integrations healthy.", p.text("#dl-empty"))
	assert.Equal(t, "op (operator)", p.text("#whoami"))

	// A dead letter shows with its columns (reason, event type, created at); Retry takes it
	// out of the table.
	one := s.dead(q, "", "b1")[0]
	p.until("dead letter "+one, rowExpr("#dl-table", one))
	row := p.text(rowSel("#dl-table", one))
	assert.Contains(t, row, "b1")
	assert.Contains(t, row, q)
	assert.Contains(t, row, "permanent")
	assert.Contains(t, row, "schema mismatch in b1")
	p.clickNow("retry now of "+one, rowSel("#dl-table", one)+` td.actions button:nth-child(2)`)
	p.until("dead letter "+one+" gone", "!"+rowExpr("#dl-table", one))
	// The retry's outcome ends its progress line (nobody fails it again: delivered once its
	// quiet window passed). Awaited before the next action: a later outcome would replace
	// that action's line.
	p.until("the outcome of the retry of "+one, jsText("#progress")+` === `+jsString("Retried "+one+": Retry successful."))
	st, err := s.state(one)
	require.NoError(t, err)
	assert.NotEqual(t, workflows.StatusDead, st.Status)
	assert.True(t, slices.ContainsFunc(st.Events, func(e workflows.Event) bool { return e.Kind == workflows.SignalRetryNow && e.Actor == "op" }),
		"the page's retry-now, by the token's name, in the run's record: %+v", st.Events)

	// Select three, bulk retry, see the progress line.
	many := s.dead(q, "", "b2", "b3", "b4")
	for _, id := range many {
		p.until("dead letter "+id, rowExpr("#dl-table", id))
	}
	p.bulk("#dl-table", "#dl-bulk-retry", many...)
	p.until("the bulk progress line", `document.querySelector("#progress").textContent.includes("3/3 succeeded")`)
	assert.Equal(t, "Bulk retry complete: 3/3 succeeded.", p.text("#progress"))

	// Delete asks first (the confirm dialog, which acceptDialogs answers).
	del := s.dead(q, "", "b5")[0]
	p.until("dead letter "+del, rowExpr("#dl-table", del))
	p.clickNow("delete of "+del, rowSel("#dl-table", del)+` td.actions button:nth-child(4)`)
	p.until("dead letter "+del+" gone", "!"+rowExpr("#dl-table", del))
	p.mu.Lock()
	assert.Contains(t, p.dialogs, "Permanently delete this entry?")
	p.mu.Unlock()
	st, err = s.state(del)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusDiscarded, st.Status)

	// All handled: the empty state again.
	p.until("the empty state", `!document.querySelector("#dl-empty").hidden`)
	assert.Equal(t, "No failed events. All integrations healthy.", p.text("#dl-empty"))
}

// attr is the element's attribute value ("" when absent).
func (p *pageDriver) attr(sel, name string) string {
	p.t.Helper()
	b, _ := json.Marshal(sel)
	n, _ := json.Marshal(name)
	ctx, cancel := context.WithTimeout(p.ctx, evalTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {getAttribute: () => ""}).getAttribute(%s) || ""`, b, n)))
	require.NoError(p.t, err, sel)
	return v
}

// setValue sets a form control's value (text input or select).
func (p *pageDriver) setValue(sel, value string) {
	p.t.Helper()
	b, _ := json.Marshal(sel)
	v, _ := json.Marshal(value)
	ok, err := p.eval(fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false; el.value = %s; return true; })()`, b, v))
	require.NoError(p.t, err)
	require.True(p.t, ok, sel)
}

// The rest of the ops views on the page: each row's and the details' "View log" link into the Temporal
// Web UI, the attempts table, the event type column and filter, the created-at column, the
// recently delivered view, and "Retry all matching".
func TestOpsBrowserOperatorViews(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	s.cfg.TemporalUIURL = uiBase
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	other := s.queue(s.prefix+".other", nil)
	p.acceptDialogs()

	typed := s.typed(q, "t1", "permanent", "")
	plain := s.dead(q, "", "u1")[0]
	sch := []string{s.typed(q, "s1", "transient", "e2e-email"), s.typed(q, "s2", "transient", "e2e-email")}
	s.publishRetry(message.RetryMessage{MessageID: "ok", OriginalPayload: []byte("p"), OriginalQueue: other,
		ErrorReason: "503", EventType: "order.created"})
	delivered := message.WorkflowID(other, "ok")

	p.signIn(api.base, opToken, "#app")
	p.until("dead letter "+typed, rowExpr("#dl-table", typed)+" && "+rowExpr("#dl-table", plain))

	// The event type column, the created-at column and the View log link of a row.
	row := rowSel("#dl-table", typed)
	assert.Equal(t, "order.created", p.text(row+" td.event-type"))
	assert.Equal(t, "", p.text(rowSel("#dl-table", plain)+" td.event-type"))
	assert.NotEmpty(t, p.attr(row+" td.created", "title"), "created at: when it first failed")
	listed := rowOf(t, api.must(200, viewerToken, "GET", "/api/dead-letters?queue="+url.QueryEscape(q), nil), typed)
	wantLog := s.uiLink(typed, listed["run_id"].(string))
	assert.Equal(t, wantLog, p.attr(row+" a.view-log", "href"))
	assert.Equal(t, "View log", p.text(row+" a.view-log"))
	assert.Equal(t, "_blank", p.attr(row+" a.view-log", "target"))

	// Details: a summary, the View log link and the attempts as a table.
	p.clickNow("details of "+typed, row+` td.actions button:nth-child(1)`)
	p.until("the details dialog", `document.querySelector("#detail").open`)
	assert.Equal(t, wantLog, p.attr("#detail-log", "href"))
	assert.Contains(t, p.text("#detail-summary"), "order.created")
	attempt := p.text("#detail-attempts tbody tr:nth-child(1)")
	assert.Contains(t, attempt, "schema mismatch in t1")
	assert.Contains(t, attempt, "permanent")
	assert.Equal(t, "1", p.text("#detail-attempts tbody tr:nth-child(1) td:nth-child(1)"))
	ok, err := p.eval(`document.querySelectorAll("#detail-attempts thead th").length === 6`)
	require.NoError(t, err)
	assert.True(t, ok, "time, error, category, HTTP status, retry key and the attempt number")
	p.clickNow("the details' close button", "#detail form button")
	p.until("the details dialog closed", `!document.querySelector("#detail").open`)

	// The event type filter, on the dead letters and the retry queue.
	p.setValue("#dl-filters [name=event_type]", "order.created")
	p.clickNow("the dead letters' filter", `#dl-filters button[type=submit]`)
	p.until("the event type filter", rowExpr("#dl-table", typed)+" && !"+rowExpr("#dl-table", plain))
	p.until("scheduled retries "+strings.Join(sch, ", "), rowExpr("#rq-table", sch[0])+" && "+rowExpr("#rq-table", sch[1]))
	p.setValue("#rq-filters [name=event_type]", "order.paid")
	p.clickNow("the retry queue's filter", `#rq-filters button[type=submit]`)
	p.until("an empty filtered retry queue", `!document.querySelector("#rq-empty").hidden`)

	// Retry all matching: every scheduled order.created retry of the queue, after a count.
	p.setValue("#rq-filters [name=event_type]", "order.created")
	p.setValue("#rq-filters [name=queue]", q)
	p.clickNow("the retry queue's filter", `#rq-filters button[type=submit]`)
	p.until("the filtered retry queue", rowExpr("#rq-table", sch[0])+" && "+rowExpr("#rq-table", sch[1]))
	p.clickNow("retry all matching", "#rq-retry-matching")
	p.until("the retry-matching progress line", `document.querySelector("#progress").textContent.includes("Retry all matching complete")`)
	assert.Equal(t, "Retry all matching complete: 2/2 succeeded.", p.text("#progress"))
	p.mu.Lock()
	assert.Contains(t, p.dialogs, "Retry 2 scheduled or held retr(ies) matching the filter now, on every page?")
	p.mu.Unlock()
	for _, id := range sch {
		assert.NotEqual(t, workflows.StatusScheduled, s.retryStatus(id), id)
	}

	// Recently delivered: the retry that succeeded, the attempts, when, and the link.
	p.until("the delivered "+delivered, rowExpr("#dv-table", delivered))
	drow := rowSel("#dv-table", delivered)
	text := p.text(drow)
	assert.Contains(t, text, "Succeeded on retry attempt 1")
	assert.Contains(t, text, "order.created")
	assert.Equal(t, "2", p.text(drow+" td.attempts"), "the original delivery and one retry")
	assert.NotEmpty(t, p.attr(drow+" td.when", "title"))
	assert.Contains(t, p.attr(drow+" a.view-log", "href"), uiBase+"/namespaces/"+url.PathEscape(s.temporal.Namespace)+"/workflows/"+url.PathEscape(delivered)+"/")
}

func breakerRowSel(queue string) string {
	b, _ := json.Marshal(queue)
	return fmt.Sprintf(`#br-table tbody tr[data-queue=%s]`, b)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// jsText is a JavaScript expression: the trimmed text of sel ("" when absent).
func jsText(sel string) string {
	b, _ := json.Marshal(sel)
	return fmt.Sprintf(`((document.querySelector(%s) || {textContent: ""}).textContent.trim())`, b)
}

// The Destinations section: pause a destination from the page, see its breaker paused and a
// retry due for it held (in the retry queue and in the breaker's held count), resume it from
// the page, and the held retry goes out and is delivered.
func TestOpsBrowserBreakers(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".orders", nil)
	p.acceptDialogs()

	p.signIn(api.base, opToken, "#destinations")
	p.until("no breakers yet", `!document.querySelector("#br-empty").hidden`)

	// Pause by name: the breaker starts paused.
	p.setValue("#br-pause-form [name=queue]", q)
	p.setValue("#br-pause-form [name=reason]", "payments deploy")
	p.clickNow("pause", "#br-pause")
	row := breakerRowSel(q)
	p.until("the paused breaker of "+q, jsText(row+" td.state")+` === "paused"`)
	assert.Contains(t, p.text("#progress"), "Paused "+q)
	assert.Equal(t, "paused by op: payments deploy", p.attr(row+" td.state", "title"))
	p.mu.Lock()
	assert.Contains(t, p.dialogs, "Pause "+q+"? Its due retries are held until it is resumed.")
	p.mu.Unlock()

	// A failure on the paused destination: its retry is due, and held.
	s.publishRetry(message.RetryMessage{MessageID: "held-1", OriginalPayload: []byte("h"), OriginalQueue: q, ErrorReason: "503"})
	id := message.WorkflowID(q, "held-1")
	p.until("the held retry "+id, rowExpr("#rq-table", id)+" && "+jsText(rowSel("#rq-table", id)+" td.status")+` === "held"`)
	p.until("the held count of "+q, jsText(row+" td.held")+` === "1"`)
	p.setValue("#rq-filters [name=status]", "held")
	p.clickNow("the retry queue's filter", `#rq-filters button[type=submit]`)
	p.until("the held filter", rowExpr("#rq-table", id))
	st, err := s.state(id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusHeld, st.Status)

	// Resume from the row: closed, and the held retry is released and delivered.
	p.clickNow("resume of "+q, row+` td.actions button:nth-child(1)`)
	p.until("the resumed breaker of "+q, jsText(row+" td.state")+` === "closed"`)
	p.mu.Lock()
	assert.Contains(t, p.dialogs, "Resume "+q+"? Its held retries are released at the release rate.")
	p.mu.Unlock()
	require.Equal(t, workflows.StatusDelivered, s.workflowResult(id, patience).Status)
	p.until("the held count back to 0", jsText(row+" td.held")+` === "0"`)
	bst, err := s.breakerState(q)
	require.NoError(t, err)
	require.NotEmpty(t, bst.Events)
	last := bst.Events[len(bst.Events)-1]
	assert.Equal(t, workflows.BreakerClosed, last.To)
	assert.Equal(t, "op", last.Actor, "the resume is audited with the token's name")
}
