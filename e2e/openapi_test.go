//go:build integration

package e2e

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/internal/ops/openapicheck"
)

// opsSpec is the ops API's description; every answer opsAPI.call gets is checked against it.
var opsSpec = func() *openapicheck.Checker {
	c, err := openapicheck.New(ops.OpenAPIDocument())
	if err != nil {
		panic(err)
	}
	return c
}()

// checkOpsAnswer fails the test when an answer of the ops API does not match the description
// of its route and status (internal/ops/openapi.json).
func checkOpsAnswer(t *testing.T, method, path string, resp *http.Response, body []byte) {
	t.Helper()
	err := opsSpec.CheckResponse(method, openapicheck.PathOf(path), resp.StatusCode, resp.Header, body)
	require.NoError(t, err, "%s %s: the answer does not match internal/ops/openapi.json", method, path)
}
