package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithDefaults(t *testing.T) {
	got := Config{URL: "amqp://localhost/"}.WithDefaults()
	assert.Equal(t, Config{
		URL:            "amqp://localhost/",
		ConnectionName: "retry-scheduler",
		DialTimeout:    10 * time.Second,
		Heartbeat:      10 * time.Second,
		PublishTimeout: 10 * time.Second,
		Channels:       16,
		QueueType:      "classic",
	}, got)

	set := Config{ConnectionName: "x", DialTimeout: time.Second, Heartbeat: 2 * time.Second,
		PublishTimeout: 3 * time.Second, Channels: 4, QueueType: "quorum"}
	assert.Equal(t, set, set.WithDefaults(), "set fields are kept")
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqps://svc:s3cr%2Ft@rabbit.example:5671/prod?heartbeat=5", "amqps://svc:xxxxx@rabbit.example:5671/prod?heartbeat=5"},
		{"amqp://guest@localhost/", "amqp://guest@localhost/"},
		{"amqp://localhost/", "amqp://localhost/"},
		// Unparsable (unescaped '%'): hidden whole, password and all.
		{"amqp://svc:pa%zz@host:5672/", UnparseableURL},
		{"not a url with pa%zz", UnparseableURL},
	} {
		t.Run(tc.in, func(t *testing.T) {
			assert.Equal(t, tc.want, RedactURL(tc.in))
		})
	}
}

// Errors from Dial name the broker but never the password, even when the URL does not parse
// (url.Parse quotes the whole URL in its error).
func TestDialErrorsHidePassword(t *testing.T) {
	for raw, shown := range map[string]string{
		"amqp://svc:topsecret%zz@127.0.0.1:1/": "not a URL",
		"amqp://svc:topsecret@127.0.0.1:1/":    "127.0.0.1:1", // nothing listens on port 1
	} {
		_, err := Dial(Config{URL: raw, DialTimeout: 2 * time.Second})
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "topsecret")
		assert.Contains(t, err.Error(), shown)
	}
}

func TestDeclareQueuesRejectsUnknownType(t *testing.T) {
	err := DeclareQueues(Config{URL: "amqp://guest:guest@127.0.0.1:1/", QueueType: "stream"}, nil, "q")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), `"stream"`), err.Error())
}
