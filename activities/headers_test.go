package activities

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stamp is the republish time of these tests' headers.
var stamp = time.Date(2026, 3, 1, 12, 0, 0, 250e6, time.UTC)

func TestRepublishHeadersFilters(t *testing.T) {
	in := map[string]any{
		"tenant": "acme", "X-Trace": "t-1",
		// Denied in any spelling.
		"CC": []any{"other"}, "bcc": []any{"x"}, "User-Id": "root", "x-death": []any{map[string]any{"count": 1.0}},
		"x-first-death-exchange": "dlx", "x-first-death-queue": "q", "x-first-death-reason": "rejected",
		"x-last-death-exchange": "dlx", "x-last-death-queue": "q", "X-Last-Death-Reason": "rejected",
		"x-delay": 5000.0,
		// Our own headers are replaced, not duplicated in another case.
		"X-Retry-Count": 7.0, "x-retry-key": "old:7", "X-Retry-Republished-At": 1.0,
	}
	got, err := republishHeaders(in, 3, "m-1:3", stamp)
	require.NoError(t, err)
	assert.Equal(t, amqp.Table{
		"tenant": "acme", "X-Trace": "t-1",
		"x-retry-count": int32(3), "x-retry-key": "m-1:3", "x-retry-republished-at": stamp.UnixMilli(),
	}, got)
}

// Values as they come out of JSON become AMQP field values.
func TestRepublishHeadersConvertsJSONValues(t *testing.T) {
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{
		"count": 3, "big": 9007199254740993, "ratio": 0.25, "neg": -2,
		"ok": true, "nothing": null, "name": "x",
		"list": [1, "a", 1.5, {"k": 2}], "obj": {"inner": {"n": 10}, "f": false}
	}`), &in))
	got, err := republishHeaders(in, 1, "k:1", stamp)
	require.NoError(t, err)
	assert.Equal(t, int64(3), got["count"])
	assert.Equal(t, int64(9007199254740992), got["big"], "float64 precision, but an integer type")
	assert.Equal(t, 0.25, got["ratio"])
	assert.Equal(t, int64(-2), got["neg"])
	assert.Equal(t, true, got["ok"])
	assert.Contains(t, got, "nothing")
	assert.Nil(t, got["nothing"])
	assert.Equal(t, []any{int64(1), "a", 1.5, amqp.Table{"k": int64(2)}}, got["list"])
	assert.Equal(t, amqp.Table{"inner": amqp.Table{"n": int64(10)}, "f": false}, got["obj"])
}

func TestRepublishHeadersRejectsUnencodable(t *testing.T) {
	for name, v := range map[string]any{
		"struct":     struct{}{},
		"uint64 max": uint64(math.MaxUint64),
		"nested":     map[string]any{"x": []any{complex(1, 2)}},
	} {
		_, err := republishHeaders(map[string]any{"h": v}, 1, "k:1", stamp)
		assert.Error(t, err, name)
	}
	_, err := republishHeaders(nil, -1, "k", stamp)
	assert.Error(t, err)
}

func TestRepublishHeadersNil(t *testing.T) {
	got, err := republishHeaders(nil, 1, "m:1", stamp)
	require.NoError(t, err)
	assert.Equal(t, amqp.Table{"x-retry-count": int32(1), "x-retry-key": "m:1", "x-retry-republished-at": int64(1772366400250)}, got,
		"the republish time in unix milliseconds, an AMQP long")
}
