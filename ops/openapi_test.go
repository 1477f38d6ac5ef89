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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/ops/openapicheck"
	"github.com/retry-scheduler/retry-scheduler/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// apiSpec checks every answer the harness gets (harness.do) against ops/openapi.json.
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
	require.NoError(t, err, "%s %s: the answer does not match ops/openapi.json", method, target)
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

// jobsMerged says whether the router has the job routes: until then the description's job
// routes and its answers from before jobs (openapicheck.BeforeJobs) are expected.
func jobsMerged(routes []string) bool { return slices.Contains(routes, "GET /api/jobs") }

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
	merged := jobsMerged(routes)
	covered := map[string]bool{}
	var notRegistered []string
	for _, name := range apiSpec.Operations() {
		method, path, _ := strings.Cut(name, " ")
		if !merged && slices.Contains(tagsOf(apiSpec.Operation(name)), "jobs") {
			t.Logf("%s: described, registered once the job routes are merged", name)
			continue
		}
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
	assert.Empty(t, notDescribed, "routes registered in ops/api.go but not described in ops/openapi.json")
	assert.Empty(t, notRegistered, "operations described in ops/openapi.json that no route of ops/api.go serves")
	if merged {
		for _, name := range apiSpec.Operations() {
			assert.NotContains(t, apiSpec.Operation(name), openapicheck.BeforeJobs,
				"%s: the job routes are merged: delete %s from ops/openapi.json (the synchronous answer it allowed is gone)", name, openapicheck.BeforeJobs)
		}
	}
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
	for name := range breakerActions {
		want = append(want, "POST /api/breakers/{queue}/"+name)
	}
	for _, w := range want {
		assert.True(t, described[w], "%s is not described in ops/openapi.json", w)
	}
	for name := range described {
		for _, prefix := range []string{"POST /api/messages/{id}/", "POST /api/breakers/{queue}/"} {
			if strings.HasPrefix(name, prefix) {
				assert.Contains(t, want, name, "described in ops/openapi.json, but not an action of its route")
			}
		}
	}
}

func tagsOf(op map[string]any) []string {
	var tags []string
	for _, t := range op["tags"].([]any) {
		tags = append(tags, t.(string))
	}
	return tags
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
	merged := jobsMerged(registeredRoutes(t))
	for _, name := range apiSpec.Operations() {
		op := apiSpec.Operation(name)
		r, _ := op["x-required-role"].(string)
		role, ok := ParseRole(r)
		if !ok || (!merged && slices.Contains(tagsOf(op), "jobs")) {
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
		"BulkFilter": BulkFilter{}, "FilteredResult": FilteredResult{}, "CanaryResult": CanaryResult{},
		"BreakerProbe": workflows.BreakerProbe{}, "BreakerEvent": workflows.BreakerEvent{}, "BreakerView": BreakerView{},
		"BreakersResponse": BreakersResponse{}, "BreakerRequest": BreakerRequest{}, "BreakerActionResponse": BreakerActionResponse{},
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
