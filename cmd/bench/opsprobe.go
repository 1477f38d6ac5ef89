package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// The operator probe of the overload phase: an operator at the ops API (which the `all`
// process serves on its HTTP address, as deployed) who, every second of the load, reads one
// message (GET /api/messages/{id}) and then retries it now (POST /api/messages/{id}/retry).
// The messages are the bench's own, reported before the load as rate limited with a
// Retry-After of an hour, so that each waits in its workflow's timer (scheduled) until the
// probe's retry-now: the action an operator takes on a waiting message.
const (
	// opsProbeName is the probe token's name, the actor the service's audit log names.
	opsProbeName = "bench-probe"
	// opsProbeWait is how long each probe message waits unless retried: longer than any run.
	opsProbeWait = time.Hour
	// opsProbeSpare are probe messages beyond one per second of load (a slow start).
	opsProbeSpare = 5
	// opsProbeCallTimeout bounds one call: above the service's 30 s bound on a request.
	opsProbeCallTimeout = 35 * time.Second
	// opsProbeReadyTimeout bounds the wait for the probe messages to be scheduled.
	opsProbeReadyTimeout = 60 * time.Second
	// opsProbeErrorsKept is how many distinct error answers the JSON keeps.
	opsProbeErrorsKept = 5
)

// newAPIToken is a fresh bearer token for the probe (the service gets it as API_TOKENS).
func newAPIToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// apiTokensEnv is the service setting that gives the probe's token the operator role.
func apiTokensEnv(token string) string {
	return "API_TOKENS=" + opsProbeName + ":operator=" + token
}

// opsProbe calls the ops API at base with token, on the probe messages ids (workflow IDs by
// sequence number), and records what it met.
type opsProbe struct {
	base, token string
	client      *http.Client
	ids         []string

	mu             sync.Mutex
	rounds         int
	get, retry     []time.Duration
	getErrors      int
	retryErrors    int
	errors         []string
	retried        map[int]time.Time
	arrived        map[int]time.Time
	setupError     string
	unexpectedSeqs int
}

func newOpsProbe(httpAddr, token string, ids []string) *opsProbe {
	return &opsProbe{
		base: "http://" + httpAddr, token: token, ids: ids,
		client:  &http.Client{Timeout: opsProbeCallTimeout},
		retried: map[int]time.Time{}, arrived: map[int]time.Time{},
	}
}

// messageURL is the API's path of message id, the id escaped into one segment.
func (o *opsProbe) messageURL(id, suffix string) string {
	return o.base + "/api/messages/" + url.PathEscape(id) + suffix
}

// call makes one API call and returns its answer's status and body (status 0: no answer).
func (o *opsProbe) call(ctx context.Context, method, u string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+o.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// statusOf reads the state's status out of a GET /api/messages/{id} answer.
func statusOf(body []byte) string {
	var m struct {
		State *struct {
			Status string `json:"status"`
		} `json:"state"`
	}
	if json.Unmarshal(body, &m) != nil || m.State == nil {
		return ""
	}
	return m.State.Status
}

// awaitScheduled waits until the last probe message is scheduled (its workflow started and
// waiting), at most opsProbeReadyTimeout; the others were reported before it.
func (o *opsProbe) awaitScheduled(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, opsProbeReadyTimeout)
	defer cancel()
	last := o.ids[len(o.ids)-1]
	var said string
	for {
		code, body, err := o.call(ctx, http.MethodGet, o.messageURL(last, "?payload=false"), nil)
		switch {
		case err != nil:
			said = err.Error()
		case code == http.StatusOK && statusOf(body) == "scheduled":
			return nil
		default:
			said = fmt.Sprintf("%d %s", code, clip(body))
		}
		if code == http.StatusUnauthorized || code == http.StatusForbidden {
			return fmt.Errorf("ops API refused the probe's token: %s", said)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("probe message %s not scheduled within %s: last answer %s", last, opsProbeReadyTimeout, said)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// run makes one round a second for d (open loop: a slow answer does not delay the next
// round), waits for the rounds in flight, then retries the probe messages no round took (not
// timed), so that none is left waiting its hour.
func (o *opsProbe) run(ctx context.Context, d time.Duration) {
	n := min(int(d/time.Second), len(o.ids))
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second)); wait > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(wait):
			}
		}
		wg.Go(func() { o.round(ctx, i) })
	}
	wg.Wait()
	for _, id := range o.ids[n:] {
		_, _, _ = o.call(ctx, http.MethodPost, o.messageURL(id, "/retry"), []byte(`{"reason":"bench operator probe: unused"}`))
	}
}

// round reads probe message i, then retries it now, timing each answer.
func (o *opsProbe) round(ctx context.Context, i int) {
	id := o.ids[i]
	began := time.Now()
	code, body, err := o.call(ctx, http.MethodGet, o.messageURL(id, "?payload=false"), nil)
	o.record(&o.get, &o.getErrors, "GET message", time.Since(began), code, body, err)

	began = time.Now()
	o.mu.Lock()
	o.retried[i] = began
	o.mu.Unlock()
	code, body, err = o.call(ctx, http.MethodPost, o.messageURL(id, "/retry"), []byte(`{"reason":"bench operator probe"}`))
	o.record(&o.retry, &o.retryErrors, "POST retry", time.Since(began), code, body, err)
	o.mu.Lock()
	o.rounds++
	o.mu.Unlock()
}

// record keeps one call's latency, and counts it as an error unless it answered 2xx.
func (o *opsProbe) record(into *[]time.Duration, errs *int, what string, took time.Duration, code int, body []byte, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	*into = append(*into, took)
	if err == nil && code >= 200 && code < 300 {
		return
	}
	*errs++
	said := fmt.Sprintf("%s: %d %s", what, code, clip(body))
	if err != nil {
		said = fmt.Sprintf("%s: %v", what, err)
	}
	if len(o.errors) < opsProbeErrorsKept && !containsPrefix(o.errors, said) {
		o.errors = append(o.errors, said)
	}
}

// arrivedAt records probe message seq's republish arriving on the probe queue.
func (o *opsProbe) arrivedAt(seq int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq < 0 || seq >= len(o.ids) {
		o.unexpectedSeqs++
		return
	}
	if _, ok := o.arrived[seq]; !ok {
		o.arrived[seq] = at
	}
}

func (o *opsProbe) failedSetup(err error) {
	o.mu.Lock()
	o.setupError = err.Error()
	o.mu.Unlock()
}

// opsProbeStats is what the operator probe met: the latency of each call, its errors, and
// (not judged) how long a retry-now took to reach the original queue.
type opsProbeStats struct {
	Rounds      int      `json:"rounds"`
	Get         latency  `json:"get_message"`
	Retry       latency  `json:"retry_now"`
	GetErrors   int      `json:"get_message_errors"`
	RetryErrors int      `json:"retry_now_errors"`
	Errors      []string `json:"errors,omitempty"`
	// RetryToArrival is a retry-now's call to its message's arrival on the original queue;
	// NotRepublished the retried messages that never arrived.
	RetryToArrival latency `json:"retry_now_to_republish"`
	NotRepublished int     `json:"retried_not_republished"`
	SetupError     string  `json:"setup_error,omitempty"`
}

func (o *opsProbe) stats() *opsProbeStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := &opsProbeStats{
		Rounds: o.rounds, Get: summarize(o.get), Retry: summarize(o.retry),
		GetErrors: o.getErrors, RetryErrors: o.retryErrors, Errors: o.errors, SetupError: o.setupError,
	}
	var toArrival []time.Duration
	for seq, at := range o.retried {
		if got, ok := o.arrived[seq]; ok {
			toArrival = append(toArrival, got.Sub(at))
		} else {
			st.NotRepublished++
		}
	}
	st.RetryToArrival = summarize(toArrival)
	return st
}

// mustShows: each call's p99 within opsProbeP99Bound, every call answered 2xx.
func (st *opsProbeStats) mustShows() []mustShow {
	one := func(what string, l latency, errs int) mustShow {
		m := mustShow{What: fmt.Sprintf("ops API %s p99 ≤ %s", what, opsProbeP99Bound)}
		switch {
		case st == nil:
			m.Detail = "the probe did not run"
		case st.SetupError != "":
			m.Detail = "the probe could not start: " + st.SetupError
		case l.Count == 0:
			m.Detail = "no call made"
		default:
			m.Pass = l.P99 <= ms(opsProbeP99Bound) && errs == 0
			m.Detail = fmt.Sprintf("p50/p99 %s/%s ms over %d calls, %d errors", fmtF(l.P50), fmtF(l.P99), l.Count, errs)
		}
		return m
	}
	if st == nil {
		return []mustShow{one("GET one message", latency{}, 0), one("retry-now", latency{}, 0)}
	}
	return []mustShow{one("GET one message", st.Get, st.GetErrors), one("retry-now", st.Retry, st.RetryErrors)}
}

// probeLine is the operator probe's account under the table.
func probeLine(label string, st *opsProbeStats) string {
	if st.SetupError != "" {
		return fmt.Sprintf("%s ops probe: could not start: %s", label, st.SetupError)
	}
	line := fmt.Sprintf("%s ops probe (%d rounds, one a second): GET one message p50/p99/max %s/%s/%s ms, %d errors; retry-now p50/p99/max %s/%s/%s ms, %d errors; retry-now to republish p50/p99 %s/%s ms, %d never republished",
		label, st.Rounds, fmtF(st.Get.P50), fmtF(st.Get.P99), fmtF(st.Get.Max), st.GetErrors,
		fmtF(st.Retry.P50), fmtF(st.Retry.P99), fmtF(st.Retry.Max), st.RetryErrors,
		fmtF(st.RetryToArrival.P50), fmtF(st.RetryToArrival.P99), st.NotRepublished)
	if len(st.Errors) > 0 {
		line += "; first errors: " + strings.Join(st.Errors, " | ")
	}
	return line
}

// clip is the start of an answer's body, for an error line.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func containsPrefix(list []string, s string) bool {
	for _, l := range list {
		if strings.HasPrefix(s, l[:min(len(l), 40)]) {
			return true
		}
	}
	return false
}

// probeMessageID is probe message seq's message id.
func probeMessageID(seq int) string { return "probe-" + strconv.Itoa(seq) }

// startOpsProbe reports n probe messages for the original queue probeQueue (rate limited,
// Retry-After opsProbeWait, so that each waits in its workflow's timer), attaches a consumer
// that records their republishes, and waits until they are scheduled. What fails is recorded
// in the probe (the load runs anyway).
func (p *pipeline) startOpsProbe(ctx context.Context, cctx context.Context, wg *sync.WaitGroup, probeQueue string, n int) *opsProbe {
	ids := make([]string, n)
	for seq := range n {
		ids[seq] = message.WorkflowID(probeQueue, probeMessageID(seq))
	}
	o := newOpsProbe(p.workerHTTP, p.apiToken, ids)
	consuming := make(chan struct{})
	wg.Go(func() {
		p.consume(cctx, probeQueue, consuming, func(d amqp.Delivery, at time.Time) {
			var pl payload
			if err := json.Unmarshal(d.Body, &pl); err == nil {
				o.arrivedAt(pl.Seq, at)
			}
		})
	})
	if err := awaitConsumer(ctx, "ops probe", probeQueue, consuming); err != nil {
		o.failedSetup(err)
		return o
	}
	for seq := range n {
		m := message.RetryMessage{
			MessageID:       probeMessageID(seq),
			OriginalPayload: mustJSON(payload{Seq: seq, SentAt: time.Now()}),
			OriginalQueue:   probeQueue,
			ErrorReason:     "429 from bench (operator probe)",
			HTTPStatus:      http.StatusTooManyRequests,
			ErrorCategory:   "rate_limited",
			RetryAfterMs:    opsProbeWait.Milliseconds(),
			Service:         "bench",
		}
		if err := p.publishRetryMessage(ctx, m); err != nil {
			o.failedSetup(fmt.Errorf("report probe message %d: %w", seq, err))
			return o
		}
	}
	if err := o.awaitScheduled(ctx); err != nil {
		o.failedSetup(err)
	}
	return o
}
