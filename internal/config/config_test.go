package config

import (
	"bytes"
	"flag"
	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/breaker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/worker"
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allSettings are the settings, bound to a configuration the test does not use.
func allSettings() []setting { return (&Config{}).settings() }

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	c, err := Load(nil, nil)
	require.NoError(t, err)
	want := Config{
		Mode:               "all",
		RabbitMQURL:        "amqp://guest:guest@127.0.0.1:5672/",
		RetryQueue:         "retry.scheduled",
		ManualReviewQueue:  "manual-review.pending",
		DefaultMaxRetries:  3,
		BaseDelay:          2 * time.Second,
		MaxDelay:           60 * time.Second,
		HTTPPort:           8086,
		HTTPAddr:           ":8086",
		TemporalAddress:    "127.0.0.1:7233",
		Namespace:          "default",
		TaskQueue:          "retry-scheduler",
		PolicyFile:         "",
		MaxMessageBytes:    524288,
		Prefetch:           512,
		BridgeMemoryBudget: 128 << 20,
		DeadLetterMaxBytes: 16<<20 - 256<<10,
		MetricsMaxQueues:   1000,
		BridgeWorkers:      16,
		WorkflowPollers:    16,
		StickyTimeout:      30 * time.Second,
		StartDelayMax:      0,
		BridgeDeferMax:     0,
		IntakeLagBound:     5 * time.Second,
		IntakeMinRate:      1,
		IntakeLagInterval:  2 * time.Second,
		PublishTimeout:     10 * time.Second,
		WorkerStopTimeout:  30 * time.Second,
		Retention:          720 * time.Hour,
		ServiceName:        "retry-scheduler",
		ServiceVersion:     "dev",
		LogLevel:           "info",
		LogFormat:          "auto",
		MetricsInterval:    15 * time.Second,
		QueueType:          "classic",
		Breakers:           "on",
		DepthPoller:        "on",
		BreakerRefresh:     500 * time.Millisecond,
		BreakerFlush:       time.Second,
		APIAuth:            "tokens",
		ReplayRate:         20,
		APIMaxScans:        4,
		TemporalTLS:        "auto",
		CodecCORSOrigins:   DefaultCodecOrigins,
	}
	assert.Equal(t, want, c)
	require.NoError(t, Default().Validate())

	// Empty environment values count as unset.
	c, err = Load(nil, env("RETRY_QUEUE", "", "BASE_DELAY_MS", "  "))
	require.NoError(t, err)
	assert.Equal(t, want, c)
}

// Every setting: env overrides the default; a flag overrides the env.
func TestEnvAndFlags(t *testing.T) {
	tests := []struct {
		env, envVal   string
		flag, flagVal string
		get           func(Config) any
		fromEnv       any
		fromFlag      any
	}{
		{"MODE", "worker", "mode", "bridge", func(c Config) any { return c.Mode }, "worker", "bridge"},
		{"RABBITMQ_URL", "amqps://u:p@mq:5671/vh", "rabbitmq-url", "amqp://other/", func(c Config) any { return c.RabbitMQURL }, "amqps://u:p@mq:5671/vh", "amqp://other/"},
		{"RABBITMQ_URLS", "amqp://u:p@a:5672/,amqp://u:p@b:5672/", "rabbitmq-urls", "amqp://c/", func(c Config) any { return [2]string{c.RabbitMQURLs, c.BrokerURLs()} }, [2]string{"amqp://u:p@a:5672/,amqp://u:p@b:5672/", "amqp://u:p@a:5672/,amqp://u:p@b:5672/"}, [2]string{"amqp://c/", "amqp://c/"}},
		{"RETRY_QUEUE", "r.env", "retry-queue", "r.flag", func(c Config) any { return c.RetryQueue }, "r.env", "r.flag"},
		{"MANUAL_REVIEW_QUEUE", "m.env", "manual-review-queue", "m.flag", func(c Config) any { return c.ManualReviewQueue }, "m.env", "m.flag"},
		{"DEFAULT_MAX_RETRIES", "5", "default-max-retries", "0", func(c Config) any { return c.DefaultMaxRetries }, 5, 0},
		{"BASE_DELAY_MS", "1500", "base-delay", "250ms", func(c Config) any { return c.BaseDelay }, 1500 * time.Millisecond, 250 * time.Millisecond},
		{"MAX_DELAY_MS", "120000", "max-delay", "5m", func(c Config) any { return c.MaxDelay }, 2 * time.Minute, 5 * time.Minute},
		{"HTTP_PORT", "9000", "http-port", "9001", func(c Config) any { return [2]any{c.HTTPPort, c.HTTPAddr} }, [2]any{9000, ":9000"}, [2]any{9001, ":9001"}},
		{"HTTP_ADDR", "127.0.0.1:9100", "http-addr", "0.0.0.0:9200", func(c Config) any { return c.HTTPAddr }, "127.0.0.1:9100", "0.0.0.0:9200"},
		{"TEMPORAL_ADDRESS", "temporal:7233", "temporal-address", "127.0.0.1:17233", func(c Config) any { return c.TemporalAddress }, "temporal:7233", "127.0.0.1:17233"},
		{"TEMPORAL_NAMESPACE", "ns-env", "namespace", "ns-flag", func(c Config) any { return c.Namespace }, "ns-env", "ns-flag"},
		{"TEMPORAL_TASK_QUEUE", "tq-env", "task-queue", "tq-flag", func(c Config) any { return c.TaskQueue }, "tq-env", "tq-flag"},
		{"POLICY_FILE", "/etc/p.yaml", "policy-file", "./p.yaml", func(c Config) any { return c.PolicyFile }, "/etc/p.yaml", "./p.yaml"},
		{"MAX_MESSAGE_BYTES", "1024", "max-message-bytes", "2048", func(c Config) any { return c.MaxMessageBytes }, 1024, 2048},
		{"BRIDGE_PREFETCH", "10", "prefetch", "20", func(c Config) any { return c.Prefetch }, 10, 20},
		{"BRIDGE_MEMORY_BUDGET", "1048576", "bridge-memory-budget", "2097152", func(c Config) any { return c.BridgeMemoryBudget }, 1 << 20, 2 << 20},
		{"DEAD_LETTER_MAX_BYTES", "1048576", "dead-letter-max-bytes", "2097152", func(c Config) any { return c.DeadLetterMaxBytes }, 1 << 20, 2 << 20},
		{"METRICS_MAX_QUEUES", "10", "metrics-max-queues", "20", func(c Config) any { return c.MetricsMaxQueues }, 10, 20},
		{"BRIDGE_WORKERS", "4", "bridge-workers", "8", func(c Config) any { return c.BridgeWorkers }, 4, 8},
		{"BRIDGE_DEFER_MAX", "1s", "bridge-defer-max", "0s", func(c Config) any { return c.BridgeDeferMax }, time.Second, time.Duration(0)},
		{"INTAKE_LAG_BOUND", "10s", "intake-lag-bound", "0s", func(c Config) any { return c.IntakeLagBound }, 10 * time.Second, time.Duration(0)},
		{"INTAKE_MIN_RATE", "0.5", "intake-min-rate", "4", func(c Config) any { return c.IntakeMinRate }, 0.5, 4.0},
		{"INTAKE_LAG_INTERVAL", "5s", "intake-lag-interval", "500ms", func(c Config) any { return c.IntakeLagInterval }, 5 * time.Second, 500 * time.Millisecond},
		{"START_DELAY_MAX", "5s", "start-delay-max", "0s", func(c Config) any { return c.StartDelayMax }, 5 * time.Second, time.Duration(0)},
		{"WORKFLOW_POLLERS", "6", "workflow-pollers", "8", func(c Config) any { return c.WorkflowPollers }, 6, 8},
		{"WORKFLOW_STICKY_TIMEOUT", "20s", "workflow-sticky-timeout", "1m", func(c Config) any { return c.StickyTimeout }, 20 * time.Second, time.Minute},
		{"PUBLISH_TIMEOUT", "5s", "publish-timeout", "2s", func(c Config) any { return c.PublishTimeout }, 5 * time.Second, 2 * time.Second},
		{"WORKER_STOP_TIMEOUT", "1m", "worker-stop-timeout", "45s", func(c Config) any { return c.WorkerStopTimeout }, time.Minute, 45 * time.Second},
		{"DEAD_LETTER_RETENTION", "7d", "retention", "48h", func(c Config) any { return c.Retention }, 7 * 24 * time.Hour, 48 * time.Hour},
		{"SERVICE_NAME", "svc-env", "service-name", "svc-flag", func(c Config) any { return c.ServiceName }, "svc-env", "svc-flag"},
		{"EXPIRED_ARCHIVE_QUEUE", "dead.archive", "expired-archive-queue", "dead.kept", func(c Config) any { return c.ExpiredArchiveQueue }, "dead.archive", "dead.kept"},
		{"SERVICE_VERSION", "1.2.3", "service-version", "1.2.4", func(c Config) any { return c.ServiceVersion }, "1.2.3", "1.2.4"},
		{"TEMPORAL_UI_URL", "http://ui:8233/", "temporal-ui-url", "https://ui.example", func(c Config) any { return c.TemporalUIURL }, "http://ui:8233", "https://ui.example"},
		{"LOG_LEVEL", "DEBUG", "log-level", "warn", func(c Config) any { return c.LogLevel }, "debug", "warn"},
		{"LOG_FORMAT", "Text", "log-format", "json", func(c Config) any { return c.LogFormat }, "text", "json"},
		{"METRICS_INTERVAL", "30s", "metrics-interval", "1m", func(c Config) any { return c.MetricsInterval }, 30 * time.Second, time.Minute},
		{"DEPTH_POLLER", "Off", "depth-poller", "on", func(c Config) any { return c.DepthPoller }, "off", "on"},
		{"QUEUE_TYPE", "quorum", "queue-type", "classic", func(c Config) any { return c.QueueType }, "quorum", "classic"},
		{"BREAKERS", "OFF", "breakers", "on", func(c Config) any { return [2]any{c.Breakers, c.BreakersEnabled()} }, [2]any{"off", false}, [2]any{"on", true}},
		{"BREAKER_REFRESH", "2s", "breaker-refresh", "250ms", func(c Config) any { return c.BreakerRefresh }, 2 * time.Second, 250 * time.Millisecond},
		{"BREAKER_FLUSH", "5s", "breaker-flush", "100ms", func(c Config) any { return c.BreakerFlush }, 5 * time.Second, 100 * time.Millisecond},
		{"API_TOKENS", "a:viewer=0123456789abcdef", "api-tokens", "b:admin=fedcba9876543210", func(c Config) any { return c.APITokens.Reveal() }, "a:viewer=0123456789abcdef", "b:admin=fedcba9876543210"},
		{"API_TOKENS_FILE", "/etc/tokens", "api-tokens-file", "./tokens", func(c Config) any { return c.APITokensFile }, "/etc/tokens", "./tokens"},
		{"API_AUTH", "TOKENS", "api-auth", "tokens", func(c Config) any { return c.APIAuth }, "tokens", "tokens"},
		{"REPLAY_RATE", "5", "replay-rate", "50", func(c Config) any { return c.ReplayRate }, 5, 50},
		{"API_MAX_SCANS", "2", "api-max-scans", "8", func(c Config) any { return c.APIMaxScans }, 2, 8},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.env] = true
		t.Run(tt.env, func(t *testing.T) {
			c, err := Load(nil, env(tt.env, tt.envVal))
			require.NoError(t, err)
			assert.Equal(t, tt.fromEnv, tt.get(c), "env")

			c, err = Load([]string{"-" + tt.flag, tt.flagVal}, env(tt.env, tt.envVal))
			require.NoError(t, err)
			assert.Equal(t, tt.fromFlag, tt.get(c), "flag over env")

			c, err = Load([]string{"--" + tt.flag + "=" + tt.flagVal}, nil)
			require.NoError(t, err)
			assert.Equal(t, tt.fromFlag, tt.get(c), "flag alone")
		})
	}
	for _, st := range allSettings() {
		// The security settings need files and each other: TestSecurityEnvAndFlags has them.
		assert.True(t, covered[st.env] || securityTested[st.env] || profileTested[st.env], "setting %s has no test", st.env)
	}
}

// A flag wins even over an env value that would be refused.
func TestFlagHidesBadEnv(t *testing.T) {
	c, err := Load([]string{"-base-delay", "1s"}, env("BASE_DELAY_MS", "abc"))
	require.NoError(t, err)
	assert.Equal(t, time.Second, c.BaseDelay)
}

func TestMode(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  string
		want string
	}{
		{nil, "", "all"},
		{[]string{"worker"}, "", "worker"},
		{[]string{"bridge"}, "worker", "bridge"},
		{[]string{"Worker", "-http-port", "1"}, "", "worker"},
		{[]string{"-http-port", "1", "bridge"}, "", "bridge"},
		{[]string{"-http-port", "1", "bridge", "-prefetch", "2"}, "", "bridge"},
		{[]string{"-mode", "worker", "worker"}, "", "worker"},
		{[]string{"--", "worker"}, "", "worker"},
	} {
		e := env()
		if tt.env != "" {
			e = env("MODE", tt.env)
		}
		c, err := Load(tt.args, e)
		require.NoError(t, err, tt.args)
		assert.Equal(t, tt.want, c.Mode, tt.args)
	}
	c, err := Load([]string{"-http-port", "1", "bridge", "-prefetch", "2"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, c.HTTPPort)
	assert.Equal(t, 2, c.Prefetch)
}

func TestRefusals(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"base delay not a number", nil, []string{"BASE_DELAY_MS", "abc"}, `BASE_DELAY_MS: "abc" is not a whole number of milliseconds`},
		{"base delay flag not a duration", []string{"-base-delay", "2"}, nil, `-base-delay: "2" is not a duration`},
		{"max delay not a number", nil, []string{"MAX_DELAY_MS", "1.5"}, `MAX_DELAY_MS: "1.5" is not a whole number of milliseconds`},
		{"int not a number", nil, []string{"DEFAULT_MAX_RETRIES", "three"}, `DEFAULT_MAX_RETRIES: "three" is not a whole number`},
		{"int flag not a number", []string{"-http-port", "x"}, nil, `-http-port: "x" is not a whole number`},
		{"duration not a duration", nil, []string{"PUBLISH_TIMEOUT", "10"}, `PUBLISH_TIMEOUT: "10" is not a duration`},
		{"days not a number", nil, []string{"DEAD_LETTER_RETENTION", "xd"}, `DEAD_LETTER_RETENTION: "xd" is not a duration`},
		{"stop timeout equal", nil, []string{"WORKER_STOP_TIMEOUT", "10s"}, `WORKER_STOP_TIMEOUT (10s) must be above PUBLISH_TIMEOUT (10s)`},
		{"ui url not http", nil, []string{"TEMPORAL_UI_URL", "javascript:alert(1)"}, `TEMPORAL_UI_URL: "javascript:alert(1)" is not an http(s) URL`},
		{"stop timeout below", []string{"-publish-timeout", "40s"}, nil, `WORKER_STOP_TIMEOUT (30s) must be above PUBLISH_TIMEOUT (40s)`},
		{"publish timeout zero", nil, []string{"PUBLISH_TIMEOUT", "0s"}, `PUBLISH_TIMEOUT (0s) must be above 0`},
		{"sticky timeout under a second", nil, []string{"WORKFLOW_STICKY_TIMEOUT", "500ms"}, `WORKFLOW_STICKY_TIMEOUT (500ms) must be 1s or more`},
		{"unknown mode", []string{"everything"}, nil, `MODE: unknown mode "everything"`},
		{"unknown mode env", nil, []string{"MODE", "ops"}, `MODE: unknown mode "ops"`},
		{"mode twice", []string{"-mode", "worker", "bridge"}, nil, `mode given twice`},
		{"extra args", []string{"worker", "bridge"}, nil, `unexpected arguments`},
		{"dash arg", []string{"-"}, nil, `MODE: unknown mode "-"`},
		{"unknown flag", []string{"-nope"}, nil, `flag provided but not defined: -nope`},
		{"http port zero", nil, []string{"HTTP_PORT", "0"}, `HTTP_PORT (0) must be between 1 and 65535`},
		{"memory budget below one message", nil, []string{"BRIDGE_MEMORY_BUDGET", "1000"}, `BRIDGE_MEMORY_BUDGET (1000) must be at least MAX_MESSAGE_BYTES (524288)`},
		{"dead-letter limit too small", nil, []string{"DEAD_LETTER_MAX_BYTES", "1000"}, `DEAD_LETTER_MAX_BYTES (1000) must be at least 262144`},
		{"metrics queues zero", nil, []string{"METRICS_MAX_QUEUES", "0"}, `METRICS_MAX_QUEUES (0) must be 1 or more`},
		{"http port high", []string{"-http-port", "70000"}, nil, `HTTP_PORT (70000) must be between 1 and 65535`},
		{"http addr", nil, []string{"HTTP_ADDR", "localhost"}, `HTTP_ADDR: "localhost" is not host:port`},
		{"http addr port", nil, []string{"HTTP_ADDR", ":99999"}, `HTTP_ADDR: port "99999" out of range`},
		{"temporal address", nil, []string{"TEMPORAL_ADDRESS", "temporal"}, `TEMPORAL_ADDRESS: "temporal" is not host:port`},
		{"temporal port", nil, []string{"TEMPORAL_ADDRESS", "temporal:0"}, `TEMPORAL_ADDRESS: port "0" out of range`},
		{"temporal list entry", nil, []string{"TEMPORAL_ADDRESS", "t1:7233,t2"}, `TEMPORAL_ADDRESS: "t2" is not host:port`},
		{"temporal list empty", nil, []string{"TEMPORAL_ADDRESS", ","}, `TEMPORAL_ADDRESS: "," names no host:port`},
		{"max retries negative", nil, []string{"DEFAULT_MAX_RETRIES", "-1"}, `DEFAULT_MAX_RETRIES (-1) must be 0 or more`},
		{"base delay zero", nil, []string{"BASE_DELAY_MS", "0"}, `BASE_DELAY_MS (0s) must be above 0`},
		{"base delay negative", []string{"-base-delay", "-1s"}, nil, `BASE_DELAY_MS (-1s) must be above 0`},
		{"max below base", nil, []string{"BASE_DELAY_MS", "5000", "MAX_DELAY_MS", "4000"}, `MAX_DELAY_MS (4s) must not be below BASE_DELAY_MS (5s)`},
		{"empty retry queue", []string{"-retry-queue", ""}, nil, `RETRY_QUEUE: must not be empty`},
		{"empty review queue", []string{"-manual-review-queue", " "}, nil, `MANUAL_REVIEW_QUEUE: must not be empty`},
		{"long queue", nil, []string{"RETRY_QUEUE", strings.Repeat("q", 256)}, `RETRY_QUEUE: "qqq`},
		{"same queues", nil, []string{"RETRY_QUEUE", "q", "MANUAL_REVIEW_QUEUE", "q"}, `MANUAL_REVIEW_QUEUE: "q" is also the RETRY_QUEUE`},
		{"url scheme", nil, []string{"RABBITMQ_URL", "http://mq:5672/"}, `RABBITMQ_URL: scheme "http" is not amqp or amqps`},
		{"url no host", nil, []string{"RABBITMQ_URL", "amqp:///vhost"}, `RABBITMQ_URL: no host`},
		{"url unparseable", nil, []string{"RABBITMQ_URL", "amqp://u:secret@mq:port/"}, `RABBITMQ_URL: not a URL`},
		{"url list empty element", nil, []string{"RABBITMQ_URL", "amqp://u:secret@a/,"}, `RABBITMQ_URL: URL 2 of 2: empty URL`},
		{"urls scheme", nil, []string{"RABBITMQ_URLS", "amqp://u:secret@a/, http://u:secret@b:80/"}, `RABBITMQ_URLS: URL 2 of 2: scheme "http" is not amqp or amqps (b:80)`},
		{"urls no host", nil, []string{"RABBITMQ_URLS", "amqp:///vh,amqp://u:secret@b/"}, `RABBITMQ_URLS: URL 1 of 2: no host`},
		{"empty namespace", []string{"-namespace", ""}, nil, `TEMPORAL_NAMESPACE: must not be empty`},
		{"empty task queue", []string{"-task-queue", ""}, nil, `TEMPORAL_TASK_QUEUE: must not be empty`},
		{"message bytes zero", nil, []string{"MAX_MESSAGE_BYTES", "0"}, `MAX_MESSAGE_BYTES (0) must be between 1 and 1048576`},
		{"message bytes high", nil, []string{"MAX_MESSAGE_BYTES", "2097152"}, `MAX_MESSAGE_BYTES (2097152) must be between 1 and 1048576`},
		{"prefetch zero", nil, []string{"BRIDGE_PREFETCH", "0"}, `BRIDGE_PREFETCH (0) must be between 1 and 65535`},
		{"prefetch high", nil, []string{"BRIDGE_PREFETCH", "65536"}, `BRIDGE_PREFETCH (65536) must be between 1 and 65535`},
		{"bridge workers", nil, []string{"BRIDGE_WORKERS", "0"}, `BRIDGE_WORKERS (0) must be 1 or more`},
		{"intake lag bound negative", []string{"-intake-lag-bound", "-1s"}, nil, `INTAKE_LAG_BOUND (-1s) must not be negative (0 never limits)`},
		{"intake min rate zero", nil, []string{"INTAKE_MIN_RATE", "0"}, `INTAKE_MIN_RATE (0) must be above 0`},
		{"intake min rate not a number", nil, []string{"INTAKE_MIN_RATE", "fast"}, `INTAKE_MIN_RATE: "fast" is not a number`},
		{"intake min rate infinite", nil, []string{"INTAKE_MIN_RATE", "Inf"}, `INTAKE_MIN_RATE: "Inf" is not a number`},
		{"intake lag interval short", nil, []string{"INTAKE_LAG_INTERVAL", "10ms"}, `INTAKE_LAG_INTERVAL (10ms) must be 100ms or more`},
		{"retention zero", nil, []string{"DEAD_LETTER_RETENTION", "0d"}, `DEAD_LETTER_RETENTION (0s) must be above 0`},
		{"empty service", []string{"-service-name", ""}, nil, `SERVICE_NAME: must not be empty`},
		{"archive is the ingress", nil, []string{"EXPIRED_ARCHIVE_QUEUE", "retry.scheduled"}, `EXPIRED_ARCHIVE_QUEUE: "retry.scheduled" is also the RETRY_QUEUE`},
		{"log level", nil, []string{"LOG_LEVEL", "verbose"}, `LOG_LEVEL: unknown level "verbose"`},
		{"log format", nil, []string{"LOG_FORMAT", "logfmt"}, `LOG_FORMAT: unknown format "logfmt" (want auto, text or json)`},
		{"queue type", nil, []string{"QUEUE_TYPE", "stream"}, `QUEUE_TYPE: unknown queue type "stream"`},
		{"breakers", nil, []string{"BREAKERS", "maybe"}, `BREAKERS: unknown value "maybe" (want on or off)`},
		{"breaker refresh zero", nil, []string{"BREAKER_REFRESH", "0s"}, `BREAKER_REFRESH (0s) must be above 0`},
		{"breaker flush negative", []string{"-breaker-flush", "-1s"}, nil, `BREAKER_FLUSH (-1s) must be above 0`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, env(tt.env...))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestAllProblemsReported(t *testing.T) {
	_, err := Load(nil, env("HTTP_PORT", "0", "QUEUE_TYPE", "x", "BASE_DELAY_MS", "y"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "BASE_DELAY_MS")
	_, err = Load(nil, env("HTTP_PORT", "0", "QUEUE_TYPE", "x"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP_PORT")
	assert.Contains(t, err.Error(), "QUEUE_TYPE")
}

func TestHelp(t *testing.T) {
	for _, a := range []string{"-h", "-help", "--help"} {
		_, err := Load([]string{a}, nil)
		assert.ErrorIs(t, err, flag.ErrHelp, a)
	}
	var b bytes.Buffer
	Usage(&b)
	for _, st := range allSettings() {
		assert.Contains(t, b.String(), "-"+st.flag()+"  (env "+st.env+")")
	}
	assert.Contains(t, b.String(), `"amqp://guest:xxxxx@127.0.0.1:5672/"`)
	assert.NotContains(t, b.String(), "guest:guest")
}

func TestString(t *testing.T) {
	c, err := Load([]string{"-rabbitmq-url", "amqps://app:s3cr3t@mq.example:5671/prod"}, nil)
	require.NoError(t, err)
	s := c.String()
	assert.NotContains(t, s, "s3cr3t")
	assert.Contains(t, s, `RABBITMQ_URL="amqps://app:xxxxx@mq.example:5671/prod"`)
	assert.Contains(t, s, `BASE_DELAY_MS="2s"`)
	assert.Contains(t, s, `MODE="all"`)
	assert.Equal(t, "amqps://app:s3cr3t@mq.example:5671/prod", c.RabbitMQURL, "String leaves the config alone")

	c.RabbitMQURL = "amqp://u:secret@mq:port/"
	assert.NotContains(t, c.String(), "secret")
	c.RabbitMQURLs = "amqp://u:secret@a/, amqps://u:secret@b:5671/"
	assert.NotContains(t, c.String(), "secret")
	assert.Contains(t, c.String(), `RABBITMQ_URLS="amqp://u:xxxxx@a/,amqps://u:xxxxx@b:5671/"`)
	assert.Equal(t, "(unparseable URL)", broker.RedactURL(c.RabbitMQURL))
	assert.Equal(t, "amqp://mq/", broker.RedactURL("amqp://mq/"))
}

// API tokens never show in String or Usage; API_AUTH and REPLAY_RATE are checked.
func TestAPISettings(t *testing.T) {
	c, err := Load([]string{"-api-tokens", "alice:admin=s3cr3t-token-0123456789"}, nil)
	require.NoError(t, err)
	assert.NotContains(t, c.String(), "s3cr3t")
	assert.Contains(t, c.String(), `API_TOKENS="xxxxx"`)
	assert.Equal(t, APIAuthTokens, c.APIAuth)
	assert.Equal(t, 20, c.ReplayRate)

	_, err = Load([]string{"-api-auth", "maybe", "-replay-rate", "0"}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "API_AUTH")
	assert.Contains(t, err.Error(), "REPLAY_RATE")
}

// API_AUTH=off makes every caller an admin: only on a loopback listen address.
func TestAPIAuthOffOnlyOnLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8086", "localhost:9000", "[::1]:8086", "127.0.0.2:1"} {
		c, err := Load([]string{"-api-auth", "OFF"}, env("HTTP_ADDR", addr))
		require.NoError(t, err, addr)
		assert.Equal(t, APIAuthOff, c.APIAuth)
	}
	for _, args := range [][]string{
		{"-api-auth", "off"}, // every interface on HTTP_PORT
		{"-api-auth", "off", "-http-addr", ":8086"},
		{"-api-auth", "off", "-http-addr", "0.0.0.0:8086"},
		{"-api-auth", "off", "-http-addr", "[::]:8086"},
		{"-api-auth", "off", "-http-addr", "10.0.0.5:8086"},
		{"-api-auth", "off", "-http-addr", "example.com:8086"},
	} {
		_, err := Load(args, nil)
		require.Error(t, err, "%v", args)
		assert.Contains(t, err.Error(), "API_AUTH=off")
		assert.Contains(t, err.Error(), "HTTP_ADDR")
	}
	c, err := Load([]string{"-http-addr", "0.0.0.0:8086"}, nil)
	require.NoError(t, err, "tokens on any address")
	assert.Equal(t, APIAuthTokens, c.APIAuth)

	_, err = Load([]string{"-api-max-scans", "0"}, nil)
	require.ErrorContains(t, err, "API_MAX_SCANS")
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, " 1d ": 24 * time.Hour, "0d": 0,
		"90s": 90 * time.Second, "1h30m": 90 * time.Minute, "250ms": 250 * time.Millisecond,
	} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "10", "xd", "1.5d", "d", "1w", "213504d", "-213504d"} {
		_, err := ParseDuration(in)
		assert.Error(t, err, in)
	}
}

// Each flag is its environment variable in lower kebab case (a *_MS variable's flag drops the
// suffix: it takes a duration); the shorter names flags had before still work.
func TestFlagsMirrorEnv(t *testing.T) {
	for _, st := range allSettings() {
		want := strings.ToLower(strings.ReplaceAll(strings.TrimSuffix(st.env, "_MS"), "_", "-"))
		assert.Equal(t, want, st.flag(), st.env)
	}
	for _, tt := range []struct {
		flag, short, val string
		get              func(Config) any
		want             any
	}{
		{"temporal-namespace", "namespace", "ns", func(c Config) any { return c.Namespace }, "ns"},
		{"temporal-task-queue", "task-queue", "tq", func(c Config) any { return c.TaskQueue }, "tq"},
		{"bridge-prefetch", "prefetch", "7", func(c Config) any { return c.Prefetch }, 7},
		{"dead-letter-retention", "retention", "2d", func(c Config) any { return c.Retention }, 48 * time.Hour},
	} {
		for _, name := range []string{tt.flag, tt.short} {
			c, err := Load([]string{"-" + name, tt.val}, nil)
			require.NoError(t, err, name)
			assert.Equal(t, tt.want, tt.get(c), name)
		}
	}
	// A bad value names the flag as it was given.
	_, err := Load([]string{"-prefetch", "x"}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `-prefetch: "x" is not a whole number`)

	var b bytes.Buffer
	Usage(&b)
	assert.Contains(t, b.String(), "-temporal-namespace  (env TEMPORAL_NAMESPACE) or -namespace\n")
	assert.Contains(t, b.String(), "-base-delay  (env BASE_DELAY_MS)\n")
}

// Defaults come from the packages that own them.
func TestDefaultsReferenceTheirHomes(t *testing.T) {
	d := Default()
	def := policy.Builtins()[policy.DefaultName]
	assert.Equal(t, def.MaxRetries, d.DefaultMaxRetries)
	assert.Equal(t, def.Backoff.Initial, d.BaseDelay)
	assert.Equal(t, def.Backoff.Max, d.MaxDelay)
	assert.Equal(t, bridge.DefaultQueue, d.RetryQueue)
	assert.Equal(t, bridge.DefaultPrefetch, d.Prefetch)
	assert.Equal(t, workflows.DefaultTaskQueue, d.TaskQueue)
	assert.Equal(t, workflows.DefaultRetention, d.Retention)
	assert.Equal(t, worker.DefaultWorkflowPollers, d.WorkflowPollers)
	assert.Equal(t, broker.QueueTypeClassic, d.QueueType)
	assert.Equal(t, breaker.DefaultRefresh, d.BreakerRefresh)
	assert.Equal(t, breaker.DefaultFlush, d.BreakerFlush)
}

func TestNewLogger(t *testing.T) {
	c, err := Load(nil, env("LOG_LEVEL", "warn"))
	require.NoError(t, err)
	var b bytes.Buffer
	l := c.NewLogger(&b)
	l.Info("hidden")
	l.Warn("shown", "token", Secret("s3cr3t"))
	assert.NotContains(t, b.String(), "hidden")
	assert.Contains(t, b.String(), `"msg":"shown"`)
	assert.Contains(t, b.String(), `"token":"xxxxx"`)
}

// LOG_FORMAT: text and json as asked; auto writes JSON to anything but a terminal (a pipe
// here) and text to a terminal.
func TestNewLoggerFormat(t *testing.T) {
	line := func(format string, w io.Writer, read func() string) string {
		c, err := Load(nil, env("LOG_FORMAT", format))
		require.NoError(t, err)
		c.NewLogger(w).Info("hello", "k", "v")
		return read()
	}
	var b bytes.Buffer
	assert.Equal(t, "{", line("json", &b, b.String)[:1])
	b.Reset()
	text := line("text", &b, b.String)
	assert.Contains(t, text, "msg=hello k=v")
	b.Reset()
	assert.Equal(t, "{", line("auto", &b, b.String)[:1], "a buffer is not a terminal")

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	out := line("auto", w, func() string { w.Close(); all, _ := io.ReadAll(r); return string(all) })
	assert.True(t, strings.HasPrefix(out, "{"), "a pipe gets JSON: %q", out)
	assert.False(t, isTerminal(w))

	// A terminal is a character device, as the null device is: text.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	assert.True(t, isTerminal(null), "%s is a character device", os.DevNull)
}

// The depth poller runs where a bridge runs, unless DEPTH_POLLER=off: one per deployment.
func TestRunsDepthPoller(t *testing.T) {
	for _, tt := range []struct {
		mode, poller string
		want         bool
	}{
		{ModeAll, On, true}, {ModeBridge, On, true}, {ModeWorker, On, false},
		{ModeAll, Off, false}, {ModeBridge, Off, false}, {ModeWorker, Off, false},
	} {
		c, err := Load([]string{tt.mode}, env("DEPTH_POLLER", tt.poller))
		require.NoError(t, err)
		assert.Equal(t, tt.want, c.RunsDepthPoller(), "%s with DEPTH_POLLER=%s", tt.mode, tt.poller)
	}
	_, err := Load(nil, env("DEPTH_POLLER", "sometimes"))
	require.ErrorContains(t, err, `DEPTH_POLLER: unknown value "sometimes"`)
}

// The bridge's deferral of short first delays was called a hold: its older variable and flag
// still set it, and an older name that disagrees with the new one is refused.
func TestBridgeDeferMaxReadsItsOlderName(t *testing.T) {
	c, err := Load(nil, env("BRIDGE_HOLD_MAX", "3s"))
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, c.BridgeDeferMax)

	c, err = Load([]string{"-bridge-hold-max", "2s"}, env())
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, c.BridgeDeferMax)

	_, err = Load(nil, env("BRIDGE_DEFER_MAX", "1s", "BRIDGE_HOLD_MAX", "3s"))
	require.ErrorContains(t, err, "BRIDGE_DEFER_MAX: set, and its older name BRIDGE_HOLD_MAX differs")
}

// TEMPORAL_ADDRESS as a list: its entries, trimmed, without empty ones.
func TestTemporalAddresses(t *testing.T) {
	for in, want := range map[string][]string{
		"127.0.0.1:7233":            {"127.0.0.1:7233"},
		"t1:7233, t2:7233,":         {"t1:7233", "t2:7233"},
		" t1:7233 ,, t2:7233 ,t3:1": {"t1:7233", "t2:7233", "t3:1"},
		"":                          nil,
	} {
		assert.Equal(t, want, Config{TemporalAddress: in}.TemporalAddresses(), in)
	}
}
