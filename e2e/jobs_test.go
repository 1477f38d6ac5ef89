//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/service"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// waitJob polls the job a 202 answered with until it ends, and returns it. Each read is a
// query of the job's workflow, so it reads once a second; a 2,000-item replay at 20/s took
// over 3 min on PostgreSQL in CI, so it waits while the job's count of done items rises.
func (a *opsAPI) waitJob(token string, started map[string]any) map[string]any {
	a.t.Helper()
	id := started["job"].(map[string]any)["id"].(string)
	var job map[string]any
	awaitProgress(a.t, 2*time.Minute, waitMax, func() (bool, int, string) {
		job = a.job(token, id)
		return job["state"] != "running", int(job["done"].(float64)),
			fmt.Sprintf("job %s still running: %v done", id, job["done"])
	})
	return job
}

// job reads one job.
func (a *opsAPI) job(token, id string) map[string]any {
	a.t.Helper()
	return a.must(200, token, "GET", "/api/jobs/"+url.PathEscape(id), nil)["job"].(map[string]any)
}

// proc is one service process of a test, stopped and started again at will.
type proc struct {
	t      *testing.T
	cfg    config.Config
	cancel context.CancelFunc
	done   chan error
}

// startProc runs the service in cfg's mode until stop (or the test's end).
func (s *stack) startProc(cfg config.Config) *proc {
	s.t.Helper()
	p := &proc{t: s.t, cfg: cfg}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- service.Run(ctx, cfg, discard()) }()
	s.t.Cleanup(p.stop)
	s.waitReady(cfg)
	return p
}

// stop shuts the process down gracefully and waits for it; a second stop does nothing.
func (p *proc) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	select {
	case err := <-p.done:
		assert.NoError(p.t, err, "%s process", p.cfg.Mode)
	case <-time.After(patience):
		p.t.Errorf("%s process did not stop within %s", p.cfg.Mode, patience)
	}
}

// deadMany publishes n messages that go dead at once, from a few goroutines.
func (s *stack) deadMany(queue string, n int) {
	s.t.Helper()
	const senders = 8
	errs := make(chan error, senders)
	for g := range senders {
		go func() {
			for i := g; i < n; i += senders {
				id := "m" + strconv.Itoa(i)
				if err := s.sendRetry(message.RetryMessage{MessageID: id, OriginalPayload: []byte(id), OriginalQueue: queue,
					ErrorReason: "schema mismatch", ErrorCategory: "permanent"}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range senders {
		require.NoError(s.t, <-errs)
	}
}

// waitDead waits until queue has n dead letters (a dry-run replay counts them), while the
// count moves towards n. In CI 2,000 dead letters were still settling after 4 min.
func (a *opsAPI) waitDead(queue string, n int, stall time.Duration) {
	a.t.Helper()
	awaitProgress(a.t, stall, waitMax, func() (bool, int, string) {
		out := a.must(200, opToken, "POST", "/api/dead-letters/replay", map[string]any{"queue": queue, "dry_run": true})
		got := int(out["count"].(float64))
		return got == n, -abs(got - n), fmt.Sprintf("%s: %d dead letters, want %d", queue, got, n)
	})
}

// waitMax bounds a wait whose count keeps moving.
const waitMax = 12 * time.Minute

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestReplayAsAJob: a replay of dead letters answers 202 with a running job, without waiting
// for it; its progress moves; the page follows it on a progress bar; the ops process restarts
// mid-job and nothing is lost: the job, still running when the process stopped, ends after the
// new process is up with every item replayed. A cancel stops another job.
//
// The job's rate makes it long by design, whatever the machine: its items go out replayRate
// a second, each batch followed by a durable timer, so replayMany items take at least
// replayMany/replayRate seconds (a minute) on any machine, and a slower machine only makes the
// job longer; the restart came 4 s into it on a 2-core machine with one core kept busy. The
// test awaits the job's progress before it restarts the ops process, and checks by the job's
// own record (running before the stop, ended after the restart) that the restart fell inside
// it. (It replayed 2,000 dead letters at 50/s before: over 4 minutes, mostly spent making and
// replaying them at the CPU's pace, and it judged the restart by the job's length.)
func TestReplayAsAJob(t *testing.T) {
	t.Parallel() // minutes of waiting, beside the other long waits (the package doc says why)
	const (
		replayMany  = 120 // dead letters of the replay: a minute at replayRate
		replayOther = 60  // dead letters of the cancelled purge: 30 s at replayRate
		replayRate  = 2
	)
	s := newStack(t)
	// The worker and the ops API (with the bridge) in two processes, as in production: the
	// ops one restarts mid-job.
	s.cfg.APITokens = opsTokens
	s.cfg.ReplayRate = replayRate
	workerCfg := s.cfg
	workerCfg.Mode = config.ModeWorker
	port, err := freeport.Get()
	require.NoError(t, err)
	workerCfg.HTTPAddr = "127.0.0.1:" + strconv.Itoa(port)
	opsCfg := s.cfg
	opsCfg.Mode = config.ModeBridge
	s.startProc(workerCfg)
	ops := s.startProc(opsCfg)
	api := &opsAPI{t: t, base: "http://" + opsCfg.HTTPAddr}

	q := s.queue(s.prefix+".orders", nil)
	q2 := s.queue(s.prefix+".invoices", nil)
	began := time.Now()
	s.deadMany(q, replayMany)
	s.deadMany(q2, replayOther)
	api.waitDead(q, replayMany, 2*time.Minute)
	api.waitDead(q2, replayOther, 2*time.Minute)
	t.Logf("%d dead letters in %s", replayMany+replayOther, time.Since(began).Round(time.Second))
	// The page is open and signed in before the job starts: Chromium's start is not the job's.
	p := newPage(t)
	p.signIn(api.base, opToken, "#jobs")

	// The replay answers with the job and its address, running: it does not wait for the job.
	body, _ := json.Marshal(map[string]any{"queue": q, "reason": "orders fixed"})
	req, err := http.NewRequest("POST", api.base+"/api/dead-letters/replay", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := opsClient.Do(req)
	require.NoError(t, err)
	answered := time.Since(sent)
	var started map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&started))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%v", started)
	startedJob := started["job"].(map[string]any)
	id := startedJob["id"].(string)
	assert.Regexp(t, `^job/replay/[0-9a-f-]{36}$`, id)
	assert.Equal(t, "/api/jobs/"+id, resp.Header.Get("Location"))
	assert.Equal(t, "running", startedJob["state"], "%v", startedJob)
	assert.EqualValues(t, 0, startedJob["done"], "%v", startedJob)
	// How soon it answered is the bench's figure (the ops API answering within 1 s).
	t.Logf("POST replay answered %s in %s", id, answered.Round(time.Millisecond))

	// Progress moves, while the job runs.
	progress := func(after float64) float64 {
		var done float64
		eventuallyEvery(t, patience, time.Second, func() error {
			j := api.job(viewerToken, id)
			done = j["done"].(float64)
			if done <= after {
				return fmt.Errorf("job %s: done %v, not past %v (%s)", id, done, after, j["state"])
			}
			return nil
		})
		return done
	}
	first := progress(0)
	second := progress(first)
	t.Logf("progress: %v then %v of %d", first, second, replayMany)

	// The page follows it on its progress bar.
	screenshot := followInBrowser(t, p, id)
	t.Logf("progress bar screenshot: %s", screenshot)

	// The ops process restarts mid-job: the job goes on, on the worker.
	before := api.job(viewerToken, id)
	require.Equal(t, "running", before["state"], "the job ended before the restart (%v): raise replayMany or lower replayRate", before)
	ops.stop()
	s.startProc(opsCfg) // stopped by the test's cleanup, like the first
	restarted := time.Now()
	t.Logf("ops process restarted %s after the replay's answer, the job at %v of %d", restarted.Sub(sent).Round(100*time.Millisecond), before["done"], replayMany)
	// While the job's progress query fails (on a loaded server it can outlast the API's read
	// timeout), the API answers what the job's memo says, total -1 (unknown) and no counts:
	// the restart is judged on an answer of the job's own.
	var mid map[string]any
	eventuallyEvery(t, patience, time.Second, func() error {
		mid = api.job(viewerToken, id)
		if mid["total"].(float64) < 0 {
			return fmt.Errorf("job %s: progress unknown (the progress query failed): %v", id, mid)
		}
		return nil
	})
	assert.GreaterOrEqual(t, mid["done"].(float64), before["done"].(float64), "progress went back across the restart")

	job := api.waitJob(viewerToken, map[string]any{"job": map[string]any{"id": id}})
	assert.Equal(t, "completed", job["state"], "%v", job)
	assert.EqualValues(t, replayMany, job["total"])
	assert.EqualValues(t, replayMany, job["done"], "%v", job["errors"])
	assert.EqualValues(t, 0, job["failed"])
	assert.EqualValues(t, 0, job["remaining"])
	assert.Equal(t, "op", job["actor"])
	ended, err := time.Parse(time.RFC3339Nano, job["ended_at"].(string))
	require.NoError(t, err, "ended_at of %v", job)
	assert.True(t, ended.After(restarted), "the job ended at %v, before the new ops process was up at %v: it did not run across the restart", ended, restarted)
	logJobRate(t, job, s.cfg.ReplayRate)
	api.waitDead(q, 0, 2*time.Minute)

	// A cancel stops another job: a purge of q2, cancelled as soon as it runs (it would take
	// replayOther/replayRate seconds).
	purge := api.must(202, adminToken, "POST", "/api/dead-letters/purge", map[string]any{"queue": q2, "reason": "test data"})
	pid := purge["job"].(map[string]any)["id"].(string)
	api.must(403, viewerToken, "POST", "/api/jobs/"+url.PathEscape(pid)+"/cancel", map[string]any{"reason": "x"})
	cancelled := api.must(200, opToken, "POST", "/api/jobs/"+url.PathEscape(pid)+"/cancel", map[string]any{"reason": "wrong queue"})
	t.Logf("cancel answered: %v", cancelled["job"])
	pj := api.waitJob(viewerToken, purge)
	assert.Equal(t, "cancelled", pj["state"], "%v", pj)
	assert.Equal(t, "op", pj["cancelled_by"])
	assert.Contains(t, pj["stopped"], "wrong queue")
	assert.Less(t, pj["done"].(float64), float64(replayOther), "the cancel stopped nothing")
	assert.Positive(t, pj["remaining"].(float64))
	out := api.must(409, opToken, "POST", "/api/jobs/"+url.PathEscape(pid)+"/cancel", map[string]any{})
	assert.Contains(t, out["error"], "cancelled")
	api.waitDead(q2, replayOther-int(pj["done"].(float64)), 2*time.Minute)
	// The histories a change to JobWorkflow must keep replaying: a replay's run to the end,
	// and a purge cancelled by an Update.
	s.recordHistory(id, "job-replay-completed")
	s.recordHistory(pid, "job-purge-cancelled")

	// Both are listed, newest first.
	list := api.must(200, viewerToken, "GET", "/api/jobs", nil)["jobs"].([]any)
	require.GreaterOrEqual(t, len(list), 2)
	assert.Equal(t, pid, list[0].(map[string]any)["id"])
	assert.Equal(t, id, list[1].(map[string]any)["id"])
}

// logJobRate logs how long an ended job ran and the rate it kept, beside the rate it was given.
func logJobRate(t *testing.T, job map[string]any, rate int) {
	t.Helper()
	started, err := time.Parse(time.RFC3339Nano, job["started_at"].(string))
	require.NoError(t, err)
	ended, err := time.Parse(time.RFC3339Nano, job["ended_at"].(string))
	require.NoError(t, err)
	took := ended.Sub(started)
	t.Logf("job %s: %v items in %s, %.1f/s at a rate of %v/s", job["id"], job["done"], took.Round(100*time.Millisecond),
		job["done"].(float64)/took.Seconds(), rate)
}

// followInBrowser follows job id on the signed-in page p from the jobs list, waits until its
// progress bar shows progress, and writes a screenshot to the test's artifact directory.
func followInBrowser(t *testing.T, p *pageDriver, id string) string {
	t.Helper()
	row := fmt.Sprintf(`#jobs-table tr[data-id=%q]`, id)
	p.until("the job in the jobs list", fmt.Sprintf(`!!document.querySelector(%q)`, row+" button"))
	p.clickNow("the job's follow button", row+" button")
	// The page reads the job every second, each read a query of the job's workflow, which
	// waits for the workflow's task in flight (on PostgreSQL under load one read took over
	// 30 s).
	p.until("the progress bar moving", `(() => { const b = document.querySelector("#job-bar"); return !document.querySelector("#job").hidden && b.value > 0 && b.max > 1; })()`)
	assert.Equal(t, id, p.text("#job-id"))
	assert.Contains(t, p.text("#progress"), "Replay: ")
	assert.True(t, mustEval(p, `!document.querySelector("#job-cancel").hidden`), "no cancel button on a running job")
	// The bar and the progress line are at the top of the page.
	scrolled, err := p.eval(`(() => { window.scrollTo(0, 0); return true; })()`)
	require.NoError(t, err)
	require.True(t, scrolled)
	sctx, cancel := context.WithTimeout(p.ctx, patience)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	path := filepath.Join(t.ArtifactDir(), "job-progress.png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	return path
}

func mustEval(p *pageDriver, expr string) bool {
	p.t.Helper()
	ok, err := p.eval(expr)
	require.NoError(p.t, err)
	return ok
}
