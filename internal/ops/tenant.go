package ops

import (
	"net/http"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Tenant scoping, in one place: a token with a tenant sees and acts on that tenant's items
// only. Lists and filtered actions are scoped in their query (scopeFilter); an item read by id
// is checked against its state's tenant (checkTenant).

// scopeFilter applies p's tenant to f: a scoped token's lists are filtered to its tenant, and
// asking for another is refused (403).
func scopeFilter(p Principal, f *Filter) error {
	if p.Tenant == "" {
		return nil
	}
	if f.Tenant != "" && f.Tenant != p.Tenant {
		return errorf(http.StatusForbidden, "%s is scoped to tenant %q", p.Name, p.Tenant)
	}
	f.Tenant = p.Tenant
	return nil
}

// checkTenant refuses p the item id of another tenant (403). st is the item's state, or nil
// when it could not be read (stateErr says why): a scoped token is then refused (503), since
// the item's tenant is unknown; an unscoped one may go on without it.
func checkTenant(p Principal, id string, st *workflows.State, stateErr error) error {
	if st == nil {
		if p.Tenant == "" {
			return nil
		}
		return stateUnreadable(id, stateErr)
	}
	if !p.Allows(st.TenantID) {
		return errorf(http.StatusForbidden, "message %q belongs to another tenant than %s's (%q)", id, p.Name, p.Tenant)
	}
	return nil
}

// stateUnreadable is the answer when an item's state is needed and cannot be read: 503, as a
// worker that answers the state query may be back soon.
func stateUnreadable(id string, err error) error {
	return errorf(http.StatusServiceUnavailable, "cannot read the state of %q: %v", id, err)
}
