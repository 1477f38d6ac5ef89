package ops

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/internal/ops/openapicheck"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// apiSpec checks every answer the harness gets (harness.do) against internal/ops/openapi.json.
var apiSpec = func() *openapicheck.Checker {
	c, err := openapicheck.New(openAPIDocument)
	if err != nil {
		panic(err)
	}
	return c
}()

// checkAnswer fails t when an answer does not match the description of its route.
func checkAnswer(t *testing.T, method, target string, rec *httptest.ResponseRecorder) {
	t.Helper()
	err := apiSpec.CheckResponse(method, openapicheck.PathOf(target), rec.Code, rec.Header(), rec.Body.Bytes())
	require.NoError(t, err, "%s %s: the answer does not match internal/ops/openapi.json", method, target)
}

// registeredRoutes are the patterns Register mounts under /api/.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	api, err := NewAPI(APIConfig{Client: newFake(), Auth: Disabled(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	api.Register(http.NewServeMux())
	require.NotEmpty(t, api.patterns)
	return api.patterns
}

// pathParams are sample values of the description's path parameters, ids with slashes
// percent-encoded as clients send them.
var pathParams = strings.NewReplacer("{id}", "retry%2Forders%2Fm-1", "{queue}", "orders")

// Every route the router registers is described, and every described route is one the
// router registers: each described path (with sample parameters) is matched against a mux of
// the registered patterns, the way the API's own mux matches it.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	routes := registeredRoutes(t)
	mux := http.NewServeMux()
	for _, p := range routes {
		mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	covered := map[string]bool{}
	var notRegistered []string
	for _, name := range apiSpec.Operations() {
		method, path, _ := strings.Cut(name, " ")
		_, pattern := mux.Handler(httptest.NewRequest(method, pathParams.Replace(path), nil))
		if pattern == "" {
			notRegistered = append(notRegistered, name)
			continue
		}
		covered[pattern] = true
	}
	var notDescribed []string
	for _, p := range routes {
		if !covered[p] {
			notDescribed = append(notDescribed, p)
		}
	}
	assert.Empty(t, notDescribed, "routes registered in internal/ops/api.go but not described in internal/ops/openapi.json")
	assert.Empty(t, notRegistered, "operations described in internal/ops/openapi.json that no route of internal/ops/api.go serves")
}

// The routes ending in an action ({rest...}) take the actions of their handler's table: each
// is described as a path of its own, and each described one is in the table.
func TestOpenAPIDescribesEveryAction(t *testing.T) {
	described := map[string]bool{}
	for _, name := range apiSpec.Operations() {
		described[name] = true
	}
	var want []string
	for name := range actionsByName {
		want = append(want, "POST /api/messages/{id}/"+name)
	}
	want = append(want, "POST /api/messages/{id}/"+actionSnooze.Name)
	for name := range breakerActions {
		want = append(want, "POST /api/breakers/{queue}/"+name)
	}
	for _, w := range want {
		assert.True(t, described[w], "%s is not described in internal/ops/openapi.json", w)
	}
	for name := range described {
		for _, prefix := range []string{"POST /api/messages/{id}/", "POST /api/breakers/{queue}/"} {
			if strings.HasPrefix(name, prefix) {
				assert.Contains(t, want, name, "described in internal/ops/openapi.json, but not an action of its route")
			}
		}
	}
}

// The document is OpenAPI 3.1, every $ref resolves (openapicheck.New), and each operation
// says what every call may answer: its role and the auth errors, 415 for a state-changing
// call, JSON bodies.
func TestOpenAPIDocumentIsComplete(t *testing.T) {
	var doc map[string]any
	require.NoError(t, json.Unmarshal(openAPIDocument, &doc))
	assert.Equal(t, "3.1.0", doc["openapi"])
	info := doc["info"].(map[string]any)
	assert.NotEmpty(t, info["title"])
	assert.NotEmpty(t, info["version"])
	scheme := doc["components"].(map[string]any)["securitySchemes"].(map[string]any)["bearerAuth"].(map[string]any)
	assert.Equal(t, map[string]any{"type": "http", "scheme": "bearer"}, map[string]any{"type": scheme["type"], "scheme": scheme["scheme"]})

	ids := map[string]string{}
	for _, name := range apiSpec.Operations() {
		op := apiSpec.Operation(name)
		id, _ := op["operationId"].(string)
		require.NotEmpty(t, id, name)
		assert.Empty(t, ids[id], "%s and %s share operationId %s", ids[id], name, id)
		ids[id] = name
		responses := op["responses"].(map[string]any)
		role, hasRole := op["x-required-role"].(string)
		if name == "GET /api/openapi.json" {
			assert.Equal(t, []any{}, op["security"], "the description is served without a token")
		} else {
			_, known := ParseRole(role)
			assert.True(t, hasRole && known, "%s: x-required-role %q", name, role)
			assert.Contains(t, responses, "401", name)
			assert.Contains(t, responses, "403", name)
		}
		if method, _, _ := strings.Cut(name, " "); mutating(method) {
			assert.Contains(t, responses, "415", "%s needs Content-Type: application/json", name)
			body, ok := op["requestBody"].(map[string]any)
			if assert.True(t, ok, "%s: no requestBody", name) {
				assert.Contains(t, body["content"], "application/json", name)
			}
		}
		assert.True(t, slices.ContainsFunc(keys(responses), func(k string) bool { return k[0] == '2' }), "%s: no success answer", name)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The description is served at /api/openapi.json without a token (it holds no data).
func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t)
	req := httptest.NewRequest("GET", "/api/openapi.json", nil)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, string(openAPIDocument), rec.Body.String())
	checkAnswer(t, "GET", "/api/openapi.json", rec)
}

// Each operation's x-required-role is the role the router asks for: without a token 401, a
// role below it 403, the role itself gets past the check (whatever the call then answers on
// an empty Temporal). Every answer is checked against the description (harness.do).
func TestOpenAPIRolesAreTheRoutersRoles(t *testing.T) {
	h := newHarness(t)
	tokenOf := map[Role]string{RoleViewer: "v", RoleOperator: "o", RoleAdmin: "a"}
	for _, name := range apiSpec.Operations() {
		op := apiSpec.Operation(name)
		r, _ := op["x-required-role"].(string)
		role, ok := ParseRole(r)
		if !ok {
			continue
		}
		method, path, _ := strings.Cut(name, " ")
		path = pathParams.Replace(path)
		body := ""
		if mutating(method) {
			body = "{}"
		}
		code, out := h.do("", method, path, body)
		assert.Equal(t, http.StatusUnauthorized, code, "%s without a token: %v", name, out)
		if role > RoleViewer {
			code, out = h.do(tokenOf[role-1], method, path, body)
			assert.Equal(t, http.StatusForbidden, code, "%s as %s: %v", name, role-1, out)
		}
		code, out = h.do(tokenOf[role], method, path, body)
		assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "%s as %s: %v", name, role, out)
	}
}

// The schemas of the API's own types list exactly their JSON fields, and require exactly the
// fields always sent (those without omitempty or omitzero): a field added to a Go type fails
// here until it is described.
func TestOpenAPISchemasMatchTheGoTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
				Required   []string       `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openAPIDocument, &doc))
	for name, v := range map[string]any{
		"Item": Item{}, "ListResponse": ListResponse{}, "WorkflowInfo": WorkflowInfo{}, "MessageResponse": MessageResponse{},
		"State": workflows.State{}, "Message": message.Message{}, "Properties": message.Properties{}, "Policy": policy.Policy{},
		"Backoff": policy.Backoff{}, "Jitter": policy.Jitter{}, "BreakerSettings": policy.Breaker{}, "Attempt": message.Attempt{},
		"Event": workflows.Event{}, "OperatorAction": workflows.OperatorAction{}, "Poison": message.Poison{},
		"PayloadRef": message.PayloadRef{}, "SetAsideReport": workflows.SetAsideReport{},
		"ActionRequest": ActionRequest{}, "ActionResponse": ActionResponse{}, "BulkRequest": BulkRequest{}, "BulkResult": BulkResult{},
		"BulkFilter": BulkFilter{}, "FilteredResult": FilteredResult{}, "CancelRequest": CancelRequest{},
		"Job": jobs.Progress{}, "CanaryStatus": jobs.CanaryStatus{}, "JobResponse": JobResponse{}, "JobListResponse": JobListResponse{},
		"BreakerProbe": workflows.BreakerProbe{}, "BreakerEvent": workflows.BreakerEvent{}, "BreakerView": BreakerView{},
		"BreakersResponse": BreakersResponse{}, "BreakerRequest": BreakerRequest{}, "BreakerActionResponse": BreakerActionResponse{},
		"RetryRequest": RetryRequest{}, "SnoozeRequest": SnoozeRequest{}, "Edit": workflows.Edit{},
		"Destination": workflows.Destination{}, "PayloadDigest": message.PayloadDigest{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !assert.True(t, ok, "no schema %s", name) {
			continue
		}
		fields, always := jsonFields(reflect.TypeOf(v))
		assert.ElementsMatch(t, fields, keys(s.Properties), "schema %s: properties differ from %T's JSON fields", name, v)
		assert.ElementsMatch(t, always, s.Required, "schema %s: required differs from %T's fields sent always", name, v)
	}
}

// jsonFields are t's JSON field names, and those encoded even when zero.
func jsonFields(t reflect.Type) (fields, always []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			fs, as := jsonFields(f.Type)
			fields, always = append(fields, fs...), append(always, as...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			always = append(always, name)
		}
	}
	return fields, always
}

// The Job schema takes what jobs.Progress holds, its enums are the jobs package's constants,
// and a job's result, as the workflow ends it, matches it.
func TestOpenAPIJobSchema(t *testing.T) {
	enum := func(schema, prop string) []any {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(openAPIDocument, &doc))
		s := doc["components"].(map[string]any)["schemas"].(map[string]any)[schema].(map[string]any)
		return s["properties"].(map[string]any)[prop].(map[string]any)["enum"].([]any)
	}
	assert.ElementsMatch(t, []any{jobs.KindReplay, jobs.KindPurge, jobs.KindRetryMatching, jobs.KindBulkRetry, jobs.KindBulkSkip,
		jobs.KindBulkResolve, jobs.KindBulkDiscard}, enum("Job", "kind"))
	assert.ElementsMatch(t, []any{jobs.StateRunning, jobs.StateCompleted, jobs.StateCancelled, jobs.StateFailed}, enum("Job", "state"))
	assert.ElementsMatch(t, []any{jobs.VerdictPending, jobs.VerdictPassed, jobs.VerdictFailed}, enum("CanaryStatus", "verdict"))
	var actions []any
	for name := range actionsByName {
		actions = append(actions, name)
	}
	assert.ElementsMatch(t, actions, enum("Job", "action"))

	valid := func(schema string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var decoded any
		require.NoError(t, json.Unmarshal(b, &decoded))
		assert.NoError(t, apiSpec.Validate(map[string]any{"$ref": "#/components/schemas/" + schema}, decoded), "%s", b)
	}
	ended := t0.Add(time.Minute)
	valid("JobResponse", JobResponse{Job: jobs.Progress{ID: "job/replay/0b5e4d4c-7d5c-4a8e-9f3e-2f1d0c9b8a7f", Kind: jobs.KindReplay,
		Action: "retry", State: jobs.StateCancelled, Actor: "o", Tenant: "acme", Reason: "smtp back",
		Filter: map[string]string{"queue": "orders", "older_than": "1h"}, Rate: 2.5, Total: 10, Done: 3, Failed: 1,
		Errors:  map[string]string{"retry/orders/a": "409: resolved"},
		Canary:  &jobs.CanaryStatus{N: 2, MaxFailureRatio: 0.5, Timeout: "5m0s", Verdict: jobs.VerdictPassed, Delivered: 2},
		Stopped: "cancelled by o: enough", CancelledBy: "o", StartedAt: t0, EndedAt: &ended, Runs: 2}})
	valid("JobListResponse", JobListResponse{Jobs: []jobs.Progress{}})

	h := newHarness(t, item("orders", "d1", workflows.StatusDead, t0, ""), item("orders", "s1", workflows.StatusScheduled, t0, ""))
	code, out := h.do("o", "POST", "/api/dead-letters/bulk-resolve", `{"ids":["retry/orders/d1","retry/orders/s1"],"reason":"done"}`)
	require.Equal(t, http.StatusAccepted, code, out)
	p := h.runJob()
	require.Equal(t, 1, p.Failed, "%+v", p)
	valid("Job", p)
}

// Each long action (a route named by a job kind) is described as starting a job: 202 with
// Location, the Idempotency-Key header, and for a bulk action ?wait=true and its 200.
func TestOpenAPIDescribesTheLongActions(t *testing.T) {
	kinds := []string{jobs.KindReplay, jobs.KindPurge, jobs.KindRetryMatching, jobs.KindBulkRetry, jobs.KindBulkSkip,
		jobs.KindBulkResolve, jobs.KindBulkDiscard}
	var doc map[string]any
	require.NoError(t, json.Unmarshal(openAPIDocument, &doc))
	params := doc["components"].(map[string]any)["parameters"].(map[string]any)
	found := map[string]bool{}
	for _, name := range apiSpec.Operations() {
		kind := name[strings.LastIndex(name, "/")+1:]
		if !slices.Contains(kinds, kind) {
			continue
		}
		found[kind] = true
		op := apiSpec.Operation(name)
		var in []string
		for _, p := range op["parameters"].([]any) {
			ref := p.(map[string]any)["$ref"].(string)
			param := params[ref[strings.LastIndex(ref, "/")+1:]].(map[string]any)
			in = append(in, param["in"].(string)+" "+param["name"].(string))
		}
		assert.Contains(t, in, "header Idempotency-Key", name)
		responses := op["responses"].(map[string]any)
		accepted, ok := responses["202"].(map[string]any)
		if assert.True(t, ok, "%s: no 202", name) {
			assert.Contains(t, accepted["headers"], "Location", name)
		}
		assert.Contains(t, responses, "200", "%s: a dry run or ?wait=true answers 200", name)
		if strings.HasPrefix(kind, "bulk-") {
			assert.Contains(t, in, "query wait", name)
		} else {
			assert.NotContains(t, in, "query wait", name)
		}
	}
	assert.Len(t, found, len(kinds), "every kind of job has its route: %v", found)
}
