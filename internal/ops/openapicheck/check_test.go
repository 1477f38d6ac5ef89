package openapicheck

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const doc = `{
  "openapi": "3.1.0",
  "paths": {
    "/api/items/{id}": {"get": {"responses": {
      "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}}},
      "404": {"$ref": "#/components/responses/Err"}}}},
    "/api/items/{id}/retry": {"post": {"responses": {
      "202": {"description": "job", "headers": {"Location": {"required": true, "schema": {"type": "string"}}},
              "content": {"application/json": {"schema": {"type": "object", "properties": {"job": {"type": "string"}}, "required": ["job"]}}}}}}},
    "/api/items/{id}/skip": {"post": {"responses": {
      "202": {"description": "job", "headers": {"Location": {"$ref": "#/components/headers/Loc"}}}}}}
  },
  "components": {
    "schemas": {
      "Item": {"type": "object", "required": ["id", "n"], "properties": {
        "id": {"type": "string"}, "n": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
        "tags": {"type": ["array", "null"], "items": {"type": "string", "enum": ["a", "b"]}},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}}}},
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
    },
    "headers": {"Loc": {"required": true, "schema": {"type": "string"}}},
    "responses": {"Err": {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}
  }
}`

func TestCheckResponse(t *testing.T) {
	c, err := New([]byte(doc))
	require.NoError(t, err)
	js := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		wantErr            string
	}{
		{"valid", "GET", "/api/items/x", 200, js, `{"id": "x", "n": 1, "at": "2026-01-01T00:00:00.5Z", "tags": null, "extra": {"k": 2}}`, ""},
		{"id with raw slashes", "GET", "/api/items/retry/q/m", 200, js, `{"id": "x", "n": 1}`, ""},
		{"a query is ignored", "GET", "/api/items/x?y=1", 404, js, `{"error": "none"}`, ""},
		{"missing required", "GET", "/api/items/x", 200, js, `{"id": "x"}`, `property "n" is required`},
		{"undescribed property", "GET", "/api/items/x", 200, js, `{"id": "x", "n": 1, "new": true}`, `property "new" is not described`},
		{"not an integer", "GET", "/api/items/x", 200, js, `{"id": "x", "n": 1.5}`, `is not of type integer`},
		{"not in the enum", "GET", "/api/items/x", 200, js, `{"id": "x", "n": 1, "tags": ["c"]}`, `is not one of`},
		{"bad date-time", "GET", "/api/items/x", 200, js, `{"id": "x", "n": 1, "at": "yesterday"}`, `not an RFC 3339 date-time`},
		{"additionalProperties schema", "GET", "/api/items/x", 200, js, `{"id": "x", "n": 1, "extra": {"k": "v"}}`, `$.extra.k`},
		{"undescribed status", "GET", "/api/items/x", 500, js, `{"error": "x"}`, `status 500 is not described`},
		{"not JSON", "GET", "/api/items/x", 404, js, `oops`, `not JSON`},
		{"wrong content type", "GET", "/api/items/x", 404, http.Header{"Content-Type": {"text/plain"}}, `{"error": "x"}`, `Content-Type`},
		{"undescribed route, 404 error", "GET", "/api/nope", 404, js, `{"error": "no route"}`, ""},
		{"undescribed route, 200", "GET", "/api/nope", 200, js, `{}`, `is not described`},
		{"undescribed method", "DELETE", "/api/items/x", 200, js, `{}`, `is not described`},
		{"the action route wins over the id", "POST", "/api/items/retry/q/m/retry", 202, http.Header{"Content-Type": {"application/json"}, "Location": {"/j/1"}}, `{"job": "1"}`, ""},
		{"required header", "POST", "/api/items/x/retry", 202, js, `{"job": "1"}`, `header Location is required`},
		{"a required header by $ref", "POST", "/api/items/x/skip", 202, js, ``, `header Location is required`},
		{"a status the route does not answer", "POST", "/api/items/x/retry", 200, js, `{"job": "1"}`, `status 200 is not described`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.CheckResponse(tc.method, tc.path, tc.status, tc.header, []byte(tc.body))
			if tc.wantErr == "" {
				assert.NoError(t, err)
			} else if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}

func TestNewRefusesDanglingRefs(t *testing.T) {
	_, err := New([]byte(`{"openapi": "3.1.0", "paths": {"/a": {"get": {"responses": {"200": {"$ref": "#/components/responses/Gone"}}}}}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "#/components/responses/Gone")
	_, err = New([]byte(`{"openapi": "3.0.3", "paths": {}}`))
	assert.ErrorContains(t, err, "3.1")
}

func TestOneOf(t *testing.T) {
	c, err := New([]byte(`{"openapi": "3.1.0", "paths": {}}`))
	require.NoError(t, err)
	s := map[string]any{"oneOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "number"}}}
	assert.ErrorContains(t, c.Validate(s, 1.0), "matches 2 of oneOf")
	assert.NoError(t, c.Validate(s, 1.5))
	assert.ErrorContains(t, c.Validate(s, "x"), "matches none of oneOf")
}
