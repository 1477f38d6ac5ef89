//go:build integration

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// rowLayout is what layoutJS measures of one row of a table on the page.
type rowLayout struct {
	ID         string  `json:"id"`
	Height     float64 `json:"height"`      // the row's height, px
	LineHeight float64 `json:"line_height"` // the computed line height of its Last error cell, px
	Limit      float64 `json:"limit"`       // two such lines, the cell's vertical padding and borders, and 1 px of rounding
	IDWidth    float64 `json:"id_width"`    // the ID cell's content box width, px
	IDChars    float64 `json:"id_chars"`    // how many characters of the ID cell's font fit in it
	IDTitle    string  `json:"id_title"`    // the ID cell's title: the whole ID
	IDText     string  `json:"id_text"`     // the ID cell's text: the whole message ID, however it shows
	ErrTitle   string  `json:"err_title"`   // the Last error cell's title
	ErrText    string  `json:"err_text"`    // the Last error cell's text
}

type tableLayout struct {
	Viewport   float64     `json:"viewport"`    // window.innerWidth
	PageHeight float64     `json:"page_height"` // the document's scroll height
	PageWidth  float64     `json:"page_width"`  // the document's scroll width
	TableWidth float64     `json:"table_width"`
	Rows       []rowLayout `json:"rows"`
}

// layoutJS measures the rows of the table (a selector) as the browser laid them out.
func layoutJS(table string) string {
	sel, _ := json.Marshal(table + " tbody tr")
	tsel, _ := json.Marshal(table)
	return `(() => {
  const px = v => parseFloat(v) || 0;
  const ctx = document.createElement('canvas').getContext('2d');
  const rows = Array.from(document.querySelectorAll(` + string(sel) + `)).map(tr => {
    const err = tr.querySelector('td.err');
    const es = getComputedStyle(err);
    let lh = parseFloat(es.lineHeight);
    if (isNaN(lh)) lh = 1.2 * px(es.fontSize); // "normal"
    const vpad = px(es.paddingTop) + px(es.paddingBottom) + px(es.borderTopWidth) + px(es.borderBottomWidth);
    const id = tr.querySelector('td.id');
    const is = getComputedStyle(id);
    ctx.font = is.fontStyle + ' ' + is.fontWeight + ' ' + is.fontSize + ' ' + is.fontFamily;
    const sample = (id.textContent + '0123456789ab').slice(0, 12);
    const perChar = ctx.measureText(sample).width / 12;
    const idWidth = id.getBoundingClientRect().width - px(is.paddingLeft) - px(is.paddingRight) - px(is.borderLeftWidth) - px(is.borderRightWidth);
    return {
      id: tr.dataset.id, height: tr.getBoundingClientRect().height, line_height: lh, limit: 2 * lh + vpad + 1,
      id_width: idWidth, id_chars: idWidth / perChar, id_title: id.title, id_text: id.textContent,
      err_title: err.title, err_text: err.textContent,
    };
  });
  const t = document.querySelector(` + string(tsel) + `);
  return JSON.stringify({viewport: window.innerWidth, page_height: document.documentElement.scrollHeight,
    page_width: document.documentElement.scrollWidth, table_width: t.getBoundingClientRect().width, rows});
})()`
}

func (p *pageDriver) layout(table string) tableLayout {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](layoutJS(table)))
	require.NoError(p.t, err)
	var l tableLayout
	require.NoError(p.t, json.Unmarshal([]byte(s), &l), s)
	return l
}

// screenshotPath is where a test writes its screenshot named name: under E2E_SCREENSHOT_DIR
// when set, else under the system's temporary directory (t.TempDir is removed after the test).
func screenshotPath(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("E2E_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "retry-scheduler-e2e-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return filepath.Join(dir, name)
}

// The dead letters are the operators' main screen: in a 1280×800 window a page of 50 dead
// letters with long IDs and long errors reads at a glance. Every row is at most two lines
// tall, the ID column shows at least 12 characters, and what a cell cuts short is whole in
// its title (and in the details).
func TestOpsBrowserDeadLetterTableReadsAtAGlance(t *testing.T) {
	p := newPage(t)
	s := newStack(t)
	s.cfg.TemporalUIURL = uiBase // every row gets its View log link
	api := s.runWithOps()
	q := s.queue(s.prefix+".billing.invoice-events", nil)

	// Realistic IDs (an event name and a UUID) and errors (an HTTP call's whole complaint).
	services := []string{"billing-api", "invoice-renderer", "tax-calculator", "ledger-sync", "notifications"}
	errorTypes := []string{"UnprocessableEntityError", "TimeoutError", "ValidationError", "UpstreamServiceUnavailable", "SchemaMismatchError"}
	reasons := []string{
		"POST https://billing.internal.example.com/v2/invoices/INV-2024-004217/finalize: 422 Unprocessable Entity: field 'customer.tax_id' failed validation (expected ^[A-Z]{2}[0-9]{8,12}$, got \"n/a\"); request-id 9f1c2e7a-44b0-4d3e-8a51-0c6b2f9d1e37",
		"context deadline exceeded (Client.Timeout exceeded while awaiting headers) calling https://renderer.internal.example.com/render/pdf?template=invoice-eu-v7&locale=de-DE after 30.000s",
		"json: cannot unmarshal string into Go struct field LineItem.lines.amount of type decimal.Decimal at offset 18234 in payload of 48 KiB (schema invoice.finalized/v3, producer checkout-service@4.12.1)",
		"dial tcp 10.42.17.203:5432: connect: connection refused (ledger-primary.db.internal.example.com, pool ledger-sync-rw, 3 of 3 connections failed)",
		"smtp: 550 5.1.1 <accounts-payable@customer-with-a-very-long-domain-name.example.org>: Recipient address rejected: User unknown in virtual mailbox table",
	}
	const n = 50
	var ids []string
	for i := range n {
		id := fmt.Sprintf("invoice.finalized-%08x-%04x-4%03x-a%03x-%012x", 0x2f9c1e7a+i*7919, i*31, i, i*3, 0x5d6e7f8a9b0c+i)
		s.publishRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte(`{"invoice":"` + id + `"}`), OriginalQueue: q,
			EventType: "invoice.finalized", Service: services[i%len(services)], ErrorType: errorTypes[i%len(errorTypes)],
			ErrorReason: reasons[i%len(reasons)], ErrorCategory: "permanent"}) // permanent: dead at once
		ids = append(ids, message.WorkflowID(q, id))
	}
	// And a few retries waiting (the email policy's first is a minute away), in the retry
	// queue's table: the same rows, with Retry now, Skip, Edit & retry, Snooze and View log.
	var waiting []string
	for i := range 5 {
		id := fmt.Sprintf("invoice.emailed-%08x-%04x-4%03x-b%03x-%012x", 0x7a1e9c2f+i*104729, i*17, i, i*5, 0x0c9b8a7f6e5d+i)
		s.publishRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte(`{"invoice":"` + id + `"}`), OriginalQueue: q,
			EventType: "invoice.emailed", Service: "notifications", ErrorType: "SMTPTemporaryFailure",
			ErrorReason: reasons[4] + " (try " + fmt.Sprint(i+1) + ")", ErrorCategory: "transient", Policy: "email"})
		waiting = append(waiting, message.WorkflowID(q, id))
	}
	api.waitTotal(viewerToken, "/api/dead-letters?queue="+url.QueryEscape(q), n)

	// An admin sees every row action: Details, Retry, Resolve, Delete, Edit & retry, Snooze
	// and View log.
	p.do(chromedp.EmulateViewport(1280, 800))
	p.signIn(api.base, adminToken, "#dl-table")
	p.do(chromedp.Click(chromedp.CSS("#auto-refresh"))) // no re-render while measuring
	// The page shows the API's default page of 50, each row with its last error (read from
	// the message's state: a row whose read timed out shows why, until a refresh).
	known, _ := json.Marshal(reasons)
	p.until("a page of 50 dead letters, with their errors", `document.querySelectorAll("#dl-table tbody tr").length === 50 && `+
		`Array.from(document.querySelectorAll("#dl-table td.err")).every(td => `+string(known)+`.includes(td.textContent))`)
	for _, id := range ids {
		p.until("dead letter "+id, rowExpr("#dl-table", id))
	}
	for _, id := range waiting {
		p.until("waiting retry "+id, rowExpr("#rq-table", id)+" && "+jsText(rowSel("#rq-table", id)+" td.err")+`.startsWith("smtp: ")`)
	}

	l, rq := p.layout("#dl-table"), p.layout("#rq-table")
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := screenshotPath(t, t.Name()+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)

	require.Len(t, l.Rows, n)
	assert.Equal(t, 1280.0, l.Viewport)
	// Each check reports the rows it failed on once, with the worst of them.
	var tallest, narrowest rowLayout
	var tall, narrow, cut []string
	for i, r := range l.Rows {
		if i == 0 || r.Height-r.Limit > tallest.Height-tallest.Limit {
			tallest = r
		}
		if i == 0 || r.IDChars < narrowest.IDChars {
			narrowest = r
		}
		if r.Height > r.Limit {
			tall = append(tall, r.ID)
		}
		if r.IDChars < 12 {
			narrow = append(narrow, r.ID)
		}
		// What a cell cuts short is whole in the DOM: its text and its title.
		if r.IDTitle != r.ID || !strings.HasPrefix(r.IDText, "invoice.finalized-") || len(r.IDText) != len("invoice.finalized-")+36 {
			cut = append(cut, fmt.Sprintf("%s: ID %q, title %q", r.ID, r.IDText, r.IDTitle))
		}
		if !slices.Contains(reasons, r.ErrText) || !strings.Contains(r.ErrTitle, r.ErrText) {
			cut = append(cut, fmt.Sprintf("%s: last error %q, title %q", r.ID, r.ErrText, r.ErrTitle))
		}
	}
	t.Logf("at %.0f px wide: table %.0f px wide, page %.0f×%.0f px; tallest row %.1f px (limit %.1f: two %.1f-px lines and the padding); narrowest ID cell %.1f px, %.1f characters",
		l.Viewport, l.TableWidth, l.PageWidth, l.PageHeight, tallest.Height, tallest.Limit, tallest.LineHeight, narrowest.IDWidth, narrowest.IDChars)
	assert.Zero(t, len(tall), "rows more than two lines tall, of %d; row %s is %.1f px, over %.1f px (two %.1f-px lines and the padding)",
		len(l.Rows), tallest.ID, tallest.Height, tallest.Limit, tallest.LineHeight)
	assert.Zero(t, len(narrow), "ID cells under 12 characters wide, of %d; the cell of %s is %.1f px: %.1f characters",
		len(l.Rows), narrowest.ID, narrowest.IDWidth, narrowest.IDChars)
	if len(cut) > 3 {
		cut = append(cut[:3], fmt.Sprintf("and %d more", len(cut)-3))
	}
	assert.Empty(t, cut, "the whole ID and last error, in the cell's text and title")
	assert.LessOrEqual(t, l.PageWidth, l.Viewport, "no horizontal scrolling of the page")

	// The retry queue's rows are the same.
	require.Len(t, rq.Rows, len(waiting))
	for _, r := range rq.Rows {
		assert.LessOrEqual(t, r.Height, r.Limit, "retry queue row %s: more than two %.1f-px lines", r.ID, r.LineHeight)
		assert.GreaterOrEqual(t, r.IDChars, 12.0, "the ID cell of retry queue row %s: %.1f px", r.ID, r.IDWidth)
	}
	t.Logf("retry queue: tallest row %.1f px", slices.MaxFunc(rq.Rows, func(a, b rowLayout) int { return cmp.Compare(a.Height, b.Height) }).Height)

	// The row's actions: the first four in their places, visible; the rest in the row too.
	row := rowSel("#dl-table", ids[0])
	for i, label := range []string{"Details", "Retry", "Resolve", "Delete"} {
		assert.Equal(t, label, p.text(fmt.Sprintf("%s td.actions button:nth-child(%d)", row, i+1)))
	}
	for _, sel := range []string{"button.edit-retry", "button.snooze", "a.view-log"} {
		ok, err := p.eval(fmt.Sprintf(`document.querySelector(%q) !== null`, row+" td.actions "+sel))
		require.NoError(t, err)
		assert.True(t, ok, sel)
	}

	// The whole of what the row cuts short is a click away, in the details, with the actions
	// the row has.
	p.do(chromedp.Click(chromedp.CSS(row + ` td.actions button:nth-child(1)`)))
	p.until("the details dialog", `document.querySelector("#detail").open`)
	assert.Contains(t, p.text("#detail-title"), ids[0])
	assert.Contains(t, reasons, p.text("#detail-attempts tbody tr:nth-child(1) td:nth-child(3)"), "the whole last error")
	assert.Equal(t, "Retry Resolve Delete Edit & retry Snooze", strings.Join(strings.Fields(p.text("#detail-actions")), " "))
	p.do(chromedp.Click(chromedp.CSS("#detail form button")))
	p.until("the details dialog closed", `!document.querySelector("#detail").open`)
}
