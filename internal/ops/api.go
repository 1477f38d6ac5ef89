package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Temporal is the part of client.Client the API uses.
type Temporal interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
	CountWorkflow(ctx context.Context, request *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	QueryWorkflow(ctx context.Context, workflowID string, runID string, queryType string, args ...interface{}) (converter.EncodedValue, error)
	SignalWorkflow(ctx context.Context, workflowID string, runID string, signalName string, arg interface{}) error
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	NewWithStartWorkflowOperation(options client.StartWorkflowOptions, workflow any, args ...any) client.WithStartWorkflowOperation
	UpdateWithStartWorkflow(ctx context.Context, options client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error)
	GetWorkflowHistory(ctx context.Context, workflowID string, runID string, isLongPoll bool, filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow interface{}, args ...interface{}) (client.WorkflowRun, error)
	GetWorkflow(ctx context.Context, workflowID string, runID string) client.WorkflowRun
}

// APIConfig configures the operators' API.
type APIConfig struct {
	// Client reaches Temporal. Required.
	Client Temporal
	// Auth decides who calls. Required (NewAuth, or Disabled for development).
	Auth *Auth
	// Namespace is the Temporal namespace. Defaults to client.DefaultNamespace.
	Namespace string
	// TaskQueue scopes lists, replay and purge to this deployment's workflows, and actions to
	// workflows on it. Defaults to workflows.DefaultTaskQueue.
	TaskQueue string
	// ReplayRate is how many signals per second replay, purge and retry-matching send.
	// Defaults to DefaultReplayRate.
	ReplayRate float64
	// ActionWait bounds, with readTimeout for reading the item first, how long a single action
	// waits for its update's result before answering 503 (a stopped worker). Defaults to
	// DefaultActionWait.
	ActionWait time.Duration
	// MaxScans is how many list scans run at a time; a list asked for beyond them is answered
	// 503 with Retry-After. Defaults to DefaultMaxScans.
	MaxScans int
	// MaxScan is the most workflows one list reads to sort them (SQL visibility, the dev
	// server's and PostgreSQL's, cannot ORDER BY). Defaults to DefaultMaxScan.
	MaxScan int
	// Logger receives one audit line per mutating call. Required: an API that acts on
	// messages without an audit trail is refused.
	Logger *slog.Logger
	// DataConverter decodes workflow inputs read from histories: the client's (with the
	// payload codec when PAYLOAD_KEYS is set). Defaults to the SDK's default converter.
	DataConverter converter.DataConverter
	// Now is the clock for older_than and since. Defaults to time.Now.
	Now func() time.Time
	// BreakerSettings are the breaker settings a pause starts a destination's breaker with
	// when none runs: those of the policy the queue's messages are routed to. Defaults to the
	// built-in defaults (policy.Breaker.WithDefaults).
	BreakerSettings func(queue string) policy.Breaker
	// WebUIURL is the Temporal Web UI's base address (http://127.0.0.1:8233, say): items then
	// carry web_ui_url, a link to their workflow's history there. Defaults to "" (no links).
	WebUIURL string
	// Guard is the policy file's destinations guard with the scheduler's own queues, which an
	// edited retry's destination must pass as a producer's report does. Defaults to the
	// secure default (no amq.* exchange) with no queue of the scheduler's own: set it.
	Guard *policy.Guard
	// MaxMessageBytes bounds an edited retry's payload, as MAX_MESSAGE_BYTES bounds a
	// report's. Defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int
	// BridgeDeferMax is the bridges' BRIDGE_DEFER_MAX: when set, a new message's first retry
	// may be waited out by a bridge before its run exists, and the answer for an id Temporal
	// does not know says so. Defaults to 0 (no bridge deferrals).
	BridgeDeferMax time.Duration
	// Lagging reports whether Temporal lags past the process's admission bound (its bridge's
	// intake is limited). A single action then goes as a signal, durable once the server has
	// it, and is answered 202 at once: an Update waits for the run's next workflow task, which
	// waits in the engine's backlog. Nil: never (a process without a bridge).
	Lagging func() bool
}

// Defaults of APIConfig.
const (
	DefaultReplayRate = 20
	DefaultActionWait = 5 * time.Second
	DefaultMaxScan    = 10000
	// DefaultMaxMessageBytes is the bridge's default MAX_MESSAGE_BYTES.
	DefaultMaxMessageBytes = 512 << 10
)

// Time bounds and concurrency of the API's calls to Temporal.
const (
	// readTimeout bounds reading one item (describe and state).
	readTimeout = 10 * time.Second
	// listTimeout bounds one list, or the scan of a filtered action, or its dry-run count.
	listTimeout = 30 * time.Second
	// scanPageSize is the page size of the visibility list calls a scan makes.
	scanPageSize = 1000
	// enrichParallel and enrichTimeout bound the per-row reads that complete a page: so many at
	// a time, each within so long.
	enrichParallel = 8
	enrichTimeout  = 3 * time.Second
	// bulkParallel is how many items of a bulk call are acted on at a time; bulkTimeout bounds
	// the whole call.
	bulkParallel = 8
	bulkTimeout  = 2 * time.Minute
)

func (c APIConfig) withDefaults() APIConfig {
	if c.DataConverter == nil {
		c.DataConverter = converter.GetDefaultDataConverter()
	}
	if c.Namespace == "" {
		c.Namespace = client.DefaultNamespace
	}
	if c.TaskQueue == "" {
		c.TaskQueue = workflows.DefaultTaskQueue
	}
	if c.ReplayRate <= 0 {
		c.ReplayRate = DefaultReplayRate
	}
	if c.ActionWait <= 0 {
		c.ActionWait = DefaultActionWait
	}
	if c.MaxScan <= 0 {
		c.MaxScan = DefaultMaxScan
	}
	if c.MaxScans <= 0 {
		c.MaxScans = DefaultMaxScans
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Guard == nil {
		c.Guard = policy.NewGuard(policy.Destinations{}, nil)
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.BreakerSettings == nil {
		c.BreakerSettings = func(string) policy.Breaker { return policy.Breaker{} }
	}
	c.WebUIURL = strings.TrimRight(c.WebUIURL, "/")
	return c
}

// API is the operators' JSON API over Temporal visibility, the state query and the operator
// signals and updates (see internal/ops/README.md for the routes).
type API struct {
	cfg APIConfig
	log *slog.Logger
	// settleEvery is how often a canary replay, or a call waiting for its retries' outcomes,
	// reads the retried items.
	settleEvery time.Duration
	// outcomes remembers the settled outcomes of the bulk retry jobs shown (jobOutcomes).
	outcomes outcomeCache
	// progress remembers the last progress of the running jobs shown (jobProgress).
	progress progressCache
	// scans holds a token per scan running (acquireScan).
	scans chan struct{}
	// patterns are the API's routes as Register mounted them ("GET /api/whoami", ...).
	patterns []string
}

// NewAPI returns the API; Register mounts it.
func NewAPI(cfg APIConfig) (*API, error) {
	if cfg.Client == nil {
		return nil, errors.New("ops api: no Temporal client")
	}
	if cfg.Auth == nil {
		return nil, errors.New("ops api: no Auth")
	}
	if cfg.Logger == nil {
		return nil, errors.New("ops api: no Logger for the audit lines")
	}
	cfg = cfg.withDefaults()
	return &API{cfg: cfg, log: cfg.Logger, settleEvery: defaultSettleEvery, scans: make(chan struct{}, cfg.MaxScans)}, nil
}

// Register mounts the API under /api/ and the web page at / on mux.
func (a *API) Register(mux *http.ServeMux) {
	auth := a.cfg.Auth
	// Every API route, behind one check that a state-changing call is JSON.
	// The route list is what is registered on api (routeMux, openapi.go): describe each route in internal/ops/openapi.json.
	api := &routeMux{ServeMux: http.NewServeMux()}
	mux.Handle("/api/", requireJSON(api))
	api.HandleFunc("GET /api/openapi.json", serveOpenAPI)
	api.HandleFunc("GET /api/whoami", auth.require(RoleViewer, a.whoami))
	api.HandleFunc("GET /api/retry-queue", auth.require(RoleViewer, a.listRetryQueue))
	api.HandleFunc("GET /api/dead-letters", auth.require(RoleViewer, a.listDeadLetters))
	api.HandleFunc("GET /api/delivered", auth.require(RoleViewer, a.listDelivered))
	// Workflow IDs hold slashes (retry/<queue>/<id>): the {id...} and {rest...} wildcards take
	// them percent-encoded in one segment (the mux matches escaped segments) or raw.
	api.HandleFunc("GET /api/messages/{id...}", auth.require(RoleViewer, a.getMessage))
	api.HandleFunc("POST /api/messages/{rest...}", auth.require(RoleOperator, a.postMessageAction))
	api.HandleFunc("DELETE /api/dead-letters/{id...}", auth.require(RoleOperator, a.deleteDeadLetter))
	// A held retry waits like a scheduled one: retry-now releases it, skip dead-letters it.
	api.HandleFunc("POST /api/retry-queue/bulk-retry", auth.require(RoleOperator, a.bulk(actionRetry, workflows.StatusScheduled, workflows.StatusHeld)))
	api.HandleFunc("POST /api/retry-queue/bulk-skip", auth.require(RoleOperator, a.bulk(actionSkip, workflows.StatusScheduled, workflows.StatusHeld)))
	api.HandleFunc("POST /api/retry-queue/retry-matching", auth.require(RoleOperator, a.filtered(actionRetry, workflows.StatusScheduled, workflows.StatusHeld)))
	api.HandleFunc("POST /api/dead-letters/bulk-retry", auth.require(RoleOperator, a.bulk(actionRetry, workflows.StatusDead)))
	api.HandleFunc("POST /api/dead-letters/bulk-resolve", auth.require(RoleOperator, a.bulk(actionResolve, workflows.StatusDead)))
	api.HandleFunc("POST /api/dead-letters/bulk-discard", auth.require(RoleOperator, a.bulk(actionDiscard, workflows.StatusDead)))
	api.HandleFunc("POST /api/dead-letters/replay", auth.require(RoleOperator, a.filtered(actionRetry, workflows.StatusDead)))
	api.HandleFunc("POST /api/dead-letters/purge", auth.require(RoleAdmin, a.filtered(actionDiscard, workflows.StatusDead)))
	// Long actions run as jobs: listed, read and cancelled here. Job IDs hold slashes
	// (job/<kind>/<uuid>), taken as the message IDs are.
	api.HandleFunc("GET /api/jobs", auth.require(RoleViewer, a.listJobs))
	api.HandleFunc("GET /api/jobs/{id...}", auth.require(RoleViewer, a.getJob))
	api.HandleFunc("POST /api/jobs/{rest...}", auth.require(RoleOperator, a.postJobAction))
	// Breakers are per destination, shared by every tenant: operators only (checkBreakerAccess).
	api.HandleFunc("GET /api/breakers", auth.require(RoleOperator, a.listBreakers))
	api.HandleFunc("GET /api/breakers/{queue...}", auth.require(RoleOperator, a.getBreaker))
	api.HandleFunc("POST /api/breakers/{rest...}", auth.require(RoleOperator, a.postBreakerAction))
	api.fallback("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s (GET /api/openapi.json describes the routes)", r.Method, r.URL.Path))
	})
	registerPage(mux)
	a.patterns = api.patterns
}

// apiError is an error with its HTTP status; Current, when set, is the item's status.
type apiError struct {
	Status  int
	Msg     string
	Current workflows.Status
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Msg }

func errorf(status int, format string, a ...any) *apiError {
	return &apiError{Status: status, Msg: fmt.Sprintf(format, a...)}
}

// fail writes err as JSON: an apiError with its status, a badRequest as 400, a deadline or
// cancellation as 503, anything else as 502 (Temporal answered with an error).
func fail(w http.ResponseWriter, err error) {
	var ae *apiError
	var br badRequest
	switch {
	case errors.As(err, &ae):
		if ae.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(ae.RetryAfter.Round(time.Second)/time.Second)))
		}
		body := map[string]any{"error": ae.Msg}
		if ae.Current != "" {
			body["current_status"] = ae.Current
		}
		writeJSON(w, ae.Status, body)
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, br.msg)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "Temporal did not answer in time: "+err.Error())
	default:
		writeError(w, http.StatusBadGateway, "Temporal: "+err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (a *API) whoami(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r.Context())
	auth := "tokens"
	if a.cfg.Auth.Off() {
		auth = "off"
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": p.Name, "role": p.Role.String(), "tenant": p.Tenant, "auth": auth})
}
