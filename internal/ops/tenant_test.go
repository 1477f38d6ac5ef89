package ops

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func TestCheckTenant(t *testing.T) {
	all, acme := Principal{Name: "all"}, Principal{Name: "b", Tenant: "acme"}
	mine, theirs := &workflows.State{TenantID: "acme"}, &workflows.State{TenantID: "globex"}
	unread := errors.New("no worker")
	status := func(err error) int {
		var ae *apiError
		require.ErrorAs(t, err, &ae)
		return ae.Status
	}

	assert.NoError(t, checkTenant(all, "m", theirs, nil), "an unscoped token sees every tenant")
	assert.NoError(t, checkTenant(all, "m", nil, unread), "an unscoped token may go on without the state")
	assert.NoError(t, checkTenant(acme, "m", mine, nil))
	err := checkTenant(acme, "m", theirs, nil)
	assert.Equal(t, http.StatusForbidden, status(err))
	assert.Contains(t, err.Error(), "another tenant")
	err = checkTenant(acme, "m", nil, unread)
	assert.Equal(t, http.StatusServiceUnavailable, status(err), "a scoped token cannot be checked without the state")
	assert.Contains(t, err.Error(), "no worker")
}
