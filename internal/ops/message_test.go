package ops

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// A viewer reads a message's metadata, not its payload or headers (they may carry personal
// data); an operator reads them too, and the read is audited; ?payload=false is the
// metadata alone, with no audit line.
func TestPayloadsNeedARoleAndTheirReadsAreAudited(t *testing.T) {
	st := item("orders", "p1", workflows.StatusDead, t0, "")
	st.Message.Payload = []byte(`{"email":"someone@example.com"}`)
	st.Message.Headers = map[string]any{"x-customer": "42"}
	h := newHarness(t, st)
	path := "/api/messages/" + url.PathEscape(st.WorkflowID)
	audits := func() int { return strings.Count(h.log.String(), `"action":"read-payload"`) }

	code, out := h.do("v", "GET", path, "")
	require.Equal(t, 200, code, out)
	msg := out["state"].(map[string]any)["message"].(map[string]any)
	assert.Nil(t, msg["payload"])
	assert.Nil(t, msg["headers"])
	assert.Equal(t, []any{"state.message.payload", "state.message.headers"}, out["redacted"])
	assert.Equal(t, "p1", msg["message_id"], "the metadata stays")
	assert.Zero(t, audits())

	code, out = h.do("o", "GET", path, "")
	require.Equal(t, 200, code, out)
	msg = out["state"].(map[string]any)["message"].(map[string]any)
	assert.NotEmpty(t, msg["payload"])
	assert.Equal(t, map[string]any{"x-customer": "42"}, msg["headers"])
	assert.Nil(t, out["redacted"])
	assert.Equal(t, 1, audits())
	assert.Contains(t, h.log.String(), `"actor":"o"`)

	code, out = h.do("o", "GET", path+"?payload=false", "")
	require.Equal(t, 200, code, out)
	assert.Nil(t, out["state"].(map[string]any)["message"].(map[string]any)["payload"])
	assert.Equal(t, 1, audits(), "a metadata read is not audited")

	code, out = h.do("o", "GET", path+"?payload=maybe", "")
	assert.Equal(t, 400, code, out)
}
