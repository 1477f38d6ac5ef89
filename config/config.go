// Package config is the one place for the service's configuration. Settings come from
// defaults, then the environment, then command-line flags (flags win). The environment
// is read only through the lookup function the caller passes (the mains pass
// os.LookupEnv), so tests need no process environment.
//
// Usage: retry-scheduler [all|worker|bridge] [flags]
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Modes.
const (
	ModeAll    = "all"
	ModeWorker = "worker"
	ModeBridge = "bridge"
)

// Values of APIAuth.
const (
	APIAuthTokens = "tokens"
	APIAuthOff    = "off"
)

// Queue types.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

// MaxMessageBytesLimit is the largest MAX_MESSAGE_BYTES accepted: a message travels in
// a Temporal payload base64-encoded (4/3 of its size) next to its metadata, and
// Temporal refuses payloads over 2 MB.
const MaxMessageBytesLimit = 1 << 20

// Config is the whole configuration.
type Config struct {
	// Mode is what the process runs: "all" (worker + bridge + ops HTTP), "worker", or
	// "bridge" (bridge + ops HTTP). Positional argument or flag -mode; env MODE.
	// Defaults to "all".
	Mode string
	// RabbitMQURL is the broker (amqp:// or amqps://). Env RABBITMQ_URL, flag
	// -rabbitmq-url. Defaults to amqp://guest:guest@127.0.0.1:5672/.
	RabbitMQURL string
	// RetryQueue is the ingress queue of failed messages. Env RETRY_QUEUE, flag
	// -retry-queue. Defaults to "retry.scheduled".
	RetryQueue string
	// ManualReviewQueue is the default dead-letter queue. Env MANUAL_REVIEW_QUEUE, flag
	// -manual-review-queue. Defaults to "manual-review.pending".
	ManualReviewQueue string
	// DefaultMaxRetries is the max retries of the default policy. Env
	// DEFAULT_MAX_RETRIES, flag -default-max-retries. Defaults to 3.
	DefaultMaxRetries int
	// BaseDelay is the default policy's first delay. Env BASE_DELAY_MS (whole
	// milliseconds), flag -base-delay (a duration, e.g. 2s). Defaults to 2s.
	BaseDelay time.Duration
	// MaxDelay caps the default policy's delay. Env MAX_DELAY_MS (whole milliseconds),
	// flag -max-delay (a duration). Defaults to 60s.
	MaxDelay time.Duration
	// HTTPPort is the ops HTTP port (REST API, web page, /metrics). Env HTTP_PORT, flag
	// -http-port. Defaults to 8086.
	HTTPPort int
	// HTTPAddr is the ops HTTP listen address. Env HTTP_ADDR, flag -http-addr.
	// Defaults to ":" + HTTPPort (all interfaces).
	HTTPAddr string
	// TemporalAddress is the Temporal frontend's host:port. Env TEMPORAL_ADDRESS, flag
	// -temporal-address. Defaults to 127.0.0.1:7233.
	TemporalAddress string
	// Namespace is the Temporal namespace. Env TEMPORAL_NAMESPACE, flag -namespace.
	// Defaults to "default".
	Namespace string
	// TaskQueue is the Temporal task queue. Env TEMPORAL_TASK_QUEUE, flag -task-queue.
	// Defaults to "retry-scheduler".
	TaskQueue string
	// PolicyFile is a policy/route file added to the built-in catalogue. Env
	// POLICY_FILE, flag -policy-file. Defaults to "" (built-in catalogue only).
	PolicyFile string
	// MaxMessageBytes is the largest payload carried; larger ones are dead-lettered at
	// ingress. At most MaxMessageBytesLimit. Env MAX_MESSAGE_BYTES, flag
	// -max-message-bytes. Defaults to 524288.
	MaxMessageBytes int
	// Prefetch is the bridge's AMQP prefetch count (1-65535). Env BRIDGE_PREFETCH, flag
	// -prefetch. Defaults to 64.
	Prefetch int
	// WorkflowPollers is how many workflow-task pollers the worker runs. Env WORKFLOW_POLLERS,
	// flag -workflow-pollers. Defaults to worker.DefaultWorkflowPollers (16).
	WorkflowPollers int
	// BridgeWorkers is how many deliveries the bridge handles at once. Env
	// BRIDGE_WORKERS, flag -bridge-workers. Defaults to 16.
	BridgeWorkers int
	// PublishTimeout bounds one publish and its confirm. Env PUBLISH_TIMEOUT, flag
	// -publish-timeout (durations, e.g. 10s). Defaults to 10s.
	PublishTimeout time.Duration
	// StartDelayMax is the longest first retry delay a new message's workflow waits as its
	// start delay (one workflow task fewer per retry) rather than as a timer: signals do not
	// end a start delay, so operators cannot act on the message before it. Env
	// START_DELAY_MAX, flag -start-delay-max. Defaults to 10s; 0 never delays a start.
	StartDelayMax time.Duration
	// WorkerStopTimeout is how long a stopping worker lets activities finish; it must
	// exceed PublishTimeout. Env WORKER_STOP_TIMEOUT, flag -worker-stop-timeout.
	// Defaults to 30s.
	WorkerStopTimeout time.Duration
	// Retention is how long a dead message stays parked for an operator. Env
	// DEAD_LETTER_RETENTION, flag -retention (a duration; "30d" days accepted).
	// Defaults to 720h (30 days).
	Retention time.Duration
	// ServiceName names the scheduler itself: metadata.service of the envelopes it writes for
	// its own reasons (poison, oversize input), the AMQP app_id of every envelope, the AMQP
	// connection names ("<name>-<mode>") and the startup log line. (An envelope of a failed
	// message names the service that failed, from the report.) Env SERVICE_NAME, flag
	// -service-name. Defaults to "retry-scheduler".
	ServiceName string
	// ServiceVersion is this build's version, in metadata.service_version of those envelopes
	// and the startup log line. Env SERVICE_VERSION, flag -service-version. Defaults to "dev".
	ServiceVersion string
	// LogLevel is debug, info, warn or error. Env LOG_LEVEL, flag -log-level.
	// Defaults to "info".
	LogLevel string
	// MetricsInterval is how often the depth gauges (retry_queue_depth, retry_due,
	// dead_letter_depth, dead_letter_oldest_age_seconds) are refreshed from Temporal
	// visibility counts, where the bridge runs. Env METRICS_INTERVAL, flag -metrics-interval.
	// Defaults to 15s.
	MetricsInterval time.Duration
	// QueueType is the type of the queues this service declares: classic or quorum.
	// Env QUEUE_TYPE, flag -queue-type. Defaults to "classic".
	QueueType string

	// Operators' API (ops/README.md).

	// APITokens are the API's bearer tokens, "name:role[:tenant]=token,..." with role viewer,
	// operator or admin (secret: never shown). Env API_TOKENS, flag -api-tokens. Defaults to
	// "" (none).
	APITokens string
	// APITokensFile holds more tokens, one "name:role[:tenant]=token" per line ("#" comments).
	// Env API_TOKENS_FILE, flag -api-tokens-file. Defaults to "" (none).
	APITokensFile string
	// APIAuth is "tokens" (bearer tokens required; with none configured the API answers 401)
	// or "off" (development only: every caller is an admin). Env API_AUTH, flag -api-auth.
	// Defaults to "tokens".
	APIAuth string
	// ReplayRate is how many signals per second a dead-letter replay or purge sends. Env
	// REPLAY_RATE, flag -replay-rate. Defaults to 20.
	ReplayRate int
	// TemporalUIURL is the Temporal Web UI's address (http://127.0.0.1:8233, say): the ops API
	// and page link each item to its workflow's history there. Env TEMPORAL_UI_URL, flag
	// -temporal-ui-url. Defaults to "" (no links).
	TemporalUIURL string

	// Security settings (security.go, SECURITY.md). Secrets (TemporalAPIKey, PayloadKeys,
	// CodecToken) never appear in String, Usage or error messages.

	// RabbitMQCAFile is the PEM CA bundle that verifies the broker's certificate (amqps).
	// Env RABBITMQ_CA_FILE, flag -rabbitmq-ca-file. Defaults to "" (the system roots).
	RabbitMQCAFile string
	// RabbitMQCertFile and RabbitMQKeyFile are the client certificate and key for amqps
	// (mutual TLS). Env RABBITMQ_CERT_FILE / RABBITMQ_KEY_FILE. Defaults to "" (none).
	RabbitMQCertFile, RabbitMQKeyFile string
	// TemporalTLS is auto, true or false; auto means TLS when a CA file, client certificate,
	// server name or API key is set. Env TEMPORAL_TLS, flag -temporal-tls. Defaults to "auto".
	TemporalTLS string
	// TemporalCAFile is the PEM CA bundle that verifies Temporal's certificate. Env
	// TEMPORAL_CA_FILE. Defaults to "" (the system roots).
	TemporalCAFile string
	// TemporalCertFile and TemporalKeyFile are the client certificate and key for mTLS.
	// Env TEMPORAL_CERT_FILE / TEMPORAL_KEY_FILE. Defaults to "" (none).
	TemporalCertFile, TemporalKeyFile string
	// TemporalServerName is the name Temporal's certificate is verified against. Env
	// TEMPORAL_SERVER_NAME. Defaults to "" (the TEMPORAL_ADDRESS host).
	TemporalServerName string
	// TemporalAPIKey is sent to Temporal as a bearer API key (secret). Env TEMPORAL_API_KEY.
	// Defaults to "" (none).
	TemporalAPIKey string
	// PayloadKeys are the AES-256 keys of the payload codec, "id=base64key,..." (secret).
	// Env PAYLOAD_KEYS. Defaults to "" (payloads are not encrypted).
	PayloadKeys string
	// PayloadKeyID names the key new payloads are sealed with. Env PAYLOAD_KEY_ID. Defaults
	// to the only key of PayloadKeys.
	PayloadKeyID string
	// CodecToken is the bearer token of the codec endpoint /codec/ (secret); the endpoint is
	// served only when it and PayloadKeys are set. Env CODEC_TOKEN. Defaults to "" (no endpoint).
	CodecToken string
	// CodecCORSOrigins are the Web UI origins allowed to call the codec endpoint from a
	// browser, comma-separated. Env CODEC_CORS_ORIGINS. Defaults to the local dev server's UI.
	CodecCORSOrigins string
}

// Default returns the configuration with every default.
func Default() Config {
	return Config{
		Mode:              ModeAll,
		RabbitMQURL:       "amqp://guest:guest@127.0.0.1:5672/",
		RetryQueue:        "retry.scheduled",
		ManualReviewQueue: "manual-review.pending",
		DefaultMaxRetries: 3,
		BaseDelay:         2 * time.Second,
		MaxDelay:          60 * time.Second,
		HTTPPort:          8086,
		TemporalAddress:   "127.0.0.1:7233",
		Namespace:         "default",
		TaskQueue:         "retry-scheduler",
		MaxMessageBytes:   524288,
		Prefetch:          64,
		BridgeWorkers:     16,
		WorkflowPollers:   16,
		PublishTimeout:    10 * time.Second,
		WorkerStopTimeout: 30 * time.Second,
		StartDelayMax:     10 * time.Second,
		Retention:         720 * time.Hour,
		ServiceName:       "retry-scheduler",
		ServiceVersion:    "dev",
		LogLevel:          "info",
		MetricsInterval:   15 * time.Second,
		QueueType:         QueueClassic,
		APIAuth:           APIAuthTokens,
		ReplayRate:        20,
		TemporalTLS:       TLSAuto,
		CodecCORSOrigins:  DefaultCodecOrigins,
	}
}

// setting is one configuration value: its env var, its flag, and how to set it from a
// string coming from either.
type setting struct {
	env, flag, usage string
	// set parses v into c; src names where v came from, for error messages.
	set func(c *Config, v, src string) error
	// show renders the default for Usage.
	show func(c Config) string
}

func str(f func(*Config) *string) (func(*Config, string, string) error, func(Config) string) {
	return func(c *Config, v, _ string) error { *f(c) = strings.TrimSpace(v); return nil },
		func(c Config) string { return *f(&c) }
}

func integer(f func(*Config) *int) (func(*Config, string, string) error, func(Config) string) {
	return func(c *Config, v, src string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("%s: %q is not a whole number", src, v)
			}
			*f(c) = n
			return nil
		},
		func(c Config) string { return strconv.Itoa(*f(&c)) }
}

// millis parses whole milliseconds (env) and duration strings (flag).
func millis(f func(*Config) *time.Duration) func(*Config, string, string) error {
	return func(c *Config, v, src string) error {
		if strings.HasPrefix(src, "-") {
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not a duration (e.g. 2s, 500ms)", src, v)
			}
			*f(c) = d
			return nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number of milliseconds", src, v)
		}
		*f(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

func duration(f func(*Config) *time.Duration) (func(*Config, string, string) error, func(Config) string) {
	return func(c *Config, v, src string) error {
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not a duration (e.g. 10s, 1m30s, 30d)", src, v)
			}
			*f(c) = d
			return nil
		},
		func(c Config) string { return (*f(&c)).String() }
}

// parseDuration is time.ParseDuration plus whole days ("30d").
func parseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

func lower(f func(*Config) *string) (func(*Config, string, string) error, func(Config) string) {
	return func(c *Config, v, _ string) error { *f(c) = strings.ToLower(strings.TrimSpace(v)); return nil },
		func(c Config) string { return *f(&c) }
}

func mk(env, flag, usage string, set func(*Config, string, string) error, show func(Config) string) setting {
	return setting{env: env, flag: flag, usage: usage, set: set, show: show}
}

func mkMillis(env, flag, usage string, f func(*Config) *time.Duration) setting {
	return setting{env: env, flag: flag, usage: usage, set: millis(f),
		show: func(c Config) string { return (*f(&c)).String() }}
}

var settings = func() []setting {
	s := []setting{}
	add := func(env, flag, usage string, set func(*Config, string, string) error, show func(Config) string) {
		s = append(s, mk(env, flag, usage, set, show))
	}
	set, show := lower(func(c *Config) *string { return &c.Mode })
	add("MODE", "mode", "what to run: all, worker or bridge (also the first argument)", set, show)
	set, show = str(func(c *Config) *string { return &c.RabbitMQURL })
	add("RABBITMQ_URL", "rabbitmq-url", "RabbitMQ URL (amqp:// or amqps://)", set, show)
	set, show = str(func(c *Config) *string { return &c.RetryQueue })
	add("RETRY_QUEUE", "retry-queue", "ingress queue of failed messages", set, show)
	set, show = str(func(c *Config) *string { return &c.ManualReviewQueue })
	add("MANUAL_REVIEW_QUEUE", "manual-review-queue", "default dead-letter queue", set, show)
	iset, ishow := integer(func(c *Config) *int { return &c.DefaultMaxRetries })
	add("DEFAULT_MAX_RETRIES", "default-max-retries", "max retries of the default policy", iset, ishow)
	s = append(s, mkMillis("BASE_DELAY_MS", "base-delay", "first retry delay (env: milliseconds; flag: a duration)", func(c *Config) *time.Duration { return &c.BaseDelay }))
	s = append(s, mkMillis("MAX_DELAY_MS", "max-delay", "retry delay cap (env: milliseconds; flag: a duration)", func(c *Config) *time.Duration { return &c.MaxDelay }))
	iset, ishow = integer(func(c *Config) *int { return &c.HTTPPort })
	add("HTTP_PORT", "http-port", "ops HTTP port (API, web page, /metrics)", iset, ishow)
	set, show = str(func(c *Config) *string { return &c.HTTPAddr })
	add("HTTP_ADDR", "http-addr", `ops HTTP listen address (default ":"+HTTP_PORT)`, set, show)
	set, show = str(func(c *Config) *string { return &c.TemporalAddress })
	add("TEMPORAL_ADDRESS", "temporal-address", "Temporal frontend host:port", set, show)
	set, show = str(func(c *Config) *string { return &c.Namespace })
	add("TEMPORAL_NAMESPACE", "namespace", "Temporal namespace", set, show)
	set, show = str(func(c *Config) *string { return &c.TaskQueue })
	add("TEMPORAL_TASK_QUEUE", "task-queue", "Temporal task queue", set, show)
	set, show = str(func(c *Config) *string { return &c.PolicyFile })
	add("POLICY_FILE", "policy-file", "policy/route file (default: built-in catalogue only)", set, show)
	iset, ishow = integer(func(c *Config) *int { return &c.MaxMessageBytes })
	add("MAX_MESSAGE_BYTES", "max-message-bytes", "largest payload carried; larger ones are dead-lettered", iset, ishow)
	iset, ishow = integer(func(c *Config) *int { return &c.Prefetch })
	add("BRIDGE_PREFETCH", "prefetch", "bridge AMQP prefetch count", iset, ishow)
	iset, ishow = integer(func(c *Config) *int { return &c.WorkflowPollers })
	add("WORKFLOW_POLLERS", "workflow-pollers", "workflow-task pollers of the worker", iset, ishow)
	iset, ishow = integer(func(c *Config) *int { return &c.BridgeWorkers })
	add("BRIDGE_WORKERS", "bridge-workers", "deliveries the bridge handles at once", iset, ishow)
	dset, dshow := duration(func(c *Config) *time.Duration { return &c.PublishTimeout })
	add("PUBLISH_TIMEOUT", "publish-timeout", "deadline of one publish and its confirm", dset, dshow)
	dset, dshow = duration(func(c *Config) *time.Duration { return &c.StartDelayMax })
	add("START_DELAY_MAX", "start-delay-max", "longest first retry delay waited as the workflow's start delay (0: never)", dset, dshow)
	dset, dshow = duration(func(c *Config) *time.Duration { return &c.WorkerStopTimeout })
	add("WORKER_STOP_TIMEOUT", "worker-stop-timeout", "grace for activities when a worker stops (> PUBLISH_TIMEOUT)", dset, dshow)
	dset, dshow = duration(func(c *Config) *time.Duration { return &c.Retention })
	add("DEAD_LETTER_RETENTION", "retention", "how long a dead message waits for an operator", dset, dshow)
	set, show = str(func(c *Config) *string { return &c.ServiceName })
	add("SERVICE_NAME", "service-name", "the scheduler's name in its own dead letters (poison, oversize), envelopes' app_id, AMQP connection names and the startup log", set, show)
	set, show = str(func(c *Config) *string { return &c.ServiceVersion })
	add("SERVICE_VERSION", "service-version", "the scheduler's version in its own dead letters and the startup log", set, show)
	set, show = lower(func(c *Config) *string { return &c.LogLevel })
	add("LOG_LEVEL", "log-level", "debug, info, warn or error", set, show)
	dset, dshow = duration(func(c *Config) *time.Duration { return &c.MetricsInterval })
	add("METRICS_INTERVAL", "metrics-interval", "how often depth gauges are refreshed from Temporal visibility", dset, dshow)
	set, show = lower(func(c *Config) *string { return &c.QueueType })
	add("QUEUE_TYPE", "queue-type", "type of declared queues: classic or quorum", set, show)
	set, _ = str(func(c *Config) *string { return &c.APITokens })
	add("API_TOKENS", "api-tokens", "ops API bearer tokens: name:role[:tenant]=token,... (secret: prefer the environment)", set,
		func(c Config) string {
			if c.APITokens == "" {
				return ""
			}
			return "xxxxx"
		})
	set, show = str(func(c *Config) *string { return &c.APITokensFile })
	add("API_TOKENS_FILE", "api-tokens-file", "file of ops API tokens, one name:role[:tenant]=token per line", set, show)
	set, show = lower(func(c *Config) *string { return &c.APIAuth })
	add("API_AUTH", "api-auth", "ops API authentication: tokens, or off (development only)", set, show)
	iset, ishow = integer(func(c *Config) *int { return &c.ReplayRate })
	add("REPLAY_RATE", "replay-rate", "signals per second of a dead-letter replay or purge", iset, ishow)
	add("TEMPORAL_UI_URL", "temporal-ui-url", "Temporal Web UI address the ops page links workflows to (empty: no links)",
		func(c *Config, v, src string) error {
			v = strings.TrimRight(strings.TrimSpace(v), "/")
			if u, err := url.Parse(v); v != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				return fmt.Errorf("%s: %q is not an http(s) URL", src, v)
			}
			c.TemporalUIURL = v
			return nil
		}, func(c Config) string { return c.TemporalUIURL })
	s = append(s, securitySettings()...)
	return s
}()

// Load builds the configuration from defaults, the environment (through lookupEnv; an
// empty value counts as unset) and args (flags, and the mode as an argument before or
// among them), then validates it. With -h or -help it returns flag.ErrHelp (print Usage).
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	fs := flag.NewFlagSet("retry-scheduler", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	flagged := map[string]string{} // flag name -> value given
	for _, st := range settings {
		name := st.flag
		fs.Func(name, st.usage, func(v string) error {
			flagged[name] = v
			return nil
		})
	}

	// The mode may come first or among the flags: parse, take one argument, go on.
	var rest []string
	for {
		if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-") {
			rest, args = append(rest, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return Config{}, flag.ErrHelp
			}
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
	}
	switch {
	case len(rest) > 1:
		return Config{}, fmt.Errorf("config: unexpected arguments %q (usage: retry-scheduler [all|worker|bridge] [flags])", rest)
	case len(rest) == 1:
		if m, ok := flagged["mode"]; ok && !strings.EqualFold(m, rest[0]) {
			return Config{}, fmt.Errorf("config: mode given twice: argument %q and -mode %q", rest[0], m)
		}
		flagged["mode"] = rest[0]
	}

	c := Default()
	var errs []error
	for _, st := range settings {
		var err error
		if v, ok := flagged[st.flag]; ok {
			err = st.set(&c, v, "-"+st.flag)
		} else if v, ok := lookupEnv(st.env); ok && strings.TrimSpace(v) != "" {
			err = st.set(&c, v, st.env)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = ":" + strconv.Itoa(c.HTTPPort)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks every setting and reports all problems, each naming the setting's
// environment variable.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	switch c.Mode {
	case ModeAll, ModeWorker, ModeBridge:
	default:
		bad("MODE: unknown mode %q (want all, worker or bridge)", c.Mode)
	}
	if u, err := url.Parse(c.RabbitMQURL); err != nil {
		bad("RABBITMQ_URL: not a URL (%v)", redactErr(err, c.RabbitMQURL))
	} else if u.Scheme != "amqp" && u.Scheme != "amqps" {
		bad("RABBITMQ_URL: scheme %q is not amqp or amqps", u.Scheme)
	} else if u.Host == "" {
		bad("RABBITMQ_URL: no host in %q", u.Redacted())
	}
	queueName := func(env, name string) {
		switch {
		case name == "":
			bad("%s: must not be empty", env)
		case len(name) > 255:
			bad("%s: %q is longer than 255 bytes", env, name)
		}
	}
	queueName("RETRY_QUEUE", c.RetryQueue)
	queueName("MANUAL_REVIEW_QUEUE", c.ManualReviewQueue)
	if c.RetryQueue != "" && c.RetryQueue == c.ManualReviewQueue {
		bad("MANUAL_REVIEW_QUEUE: %q is also the RETRY_QUEUE", c.ManualReviewQueue)
	}
	if c.DefaultMaxRetries < 0 {
		bad("DEFAULT_MAX_RETRIES (%d) must be 0 or more", c.DefaultMaxRetries)
	}
	if c.BaseDelay <= 0 {
		bad("BASE_DELAY_MS (%s) must be above 0", c.BaseDelay)
	}
	if c.MaxDelay < c.BaseDelay {
		bad("MAX_DELAY_MS (%s) must not be below BASE_DELAY_MS (%s)", c.MaxDelay, c.BaseDelay)
	}
	if c.HTTPPort < 1 || c.HTTPPort > 65535 {
		bad("HTTP_PORT (%d) must be between 1 and 65535", c.HTTPPort)
	}
	if c.HTTPAddr != "" {
		if _, p, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			bad("HTTP_ADDR: %q is not host:port", c.HTTPAddr)
		} else if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			bad("HTTP_ADDR: port %q out of range", p)
		}
	}
	if h, p, err := net.SplitHostPort(c.TemporalAddress); err != nil || h == "" {
		bad("TEMPORAL_ADDRESS: %q is not host:port", c.TemporalAddress)
	} else if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		bad("TEMPORAL_ADDRESS: port %q out of range", p)
	}
	if c.Namespace == "" {
		bad("TEMPORAL_NAMESPACE: must not be empty")
	}
	if c.TaskQueue == "" {
		bad("TEMPORAL_TASK_QUEUE: must not be empty")
	}
	if c.MaxMessageBytes < 1 || c.MaxMessageBytes > MaxMessageBytesLimit {
		bad("MAX_MESSAGE_BYTES (%d) must be between 1 and %d (Temporal refuses payloads over 2 MB; messages travel base64-encoded)", c.MaxMessageBytes, MaxMessageBytesLimit)
	}
	if c.Prefetch < 1 || c.Prefetch > 65535 {
		bad("BRIDGE_PREFETCH (%d) must be between 1 and 65535", c.Prefetch)
	}
	if c.WorkflowPollers < 2 {
		bad("WORKFLOW_POLLERS (%d) must be 2 or more (the sticky and the normal queue)", c.WorkflowPollers)
	}
	if c.BridgeWorkers < 1 {
		bad("BRIDGE_WORKERS (%d) must be 1 or more", c.BridgeWorkers)
	}
	if c.PublishTimeout <= 0 {
		bad("PUBLISH_TIMEOUT (%s) must be above 0", c.PublishTimeout)
	}
	if c.StartDelayMax < 0 {
		bad("START_DELAY_MAX (%s) must not be negative", c.StartDelayMax)
	}
	if c.WorkerStopTimeout <= c.PublishTimeout {
		bad("WORKER_STOP_TIMEOUT (%s) must be above PUBLISH_TIMEOUT (%s)", c.WorkerStopTimeout, c.PublishTimeout)
	}
	if c.Retention <= 0 {
		bad("DEAD_LETTER_RETENTION (%s) must be above 0", c.Retention)
	}
	if c.ServiceName == "" {
		bad("SERVICE_NAME: must not be empty")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("LOG_LEVEL: unknown level %q (want debug, info, warn or error)", c.LogLevel)
	}
	if c.MetricsInterval <= 0 {
		bad("METRICS_INTERVAL (%s) must be above 0", c.MetricsInterval)
	}
	switch c.QueueType {
	case QueueClassic, QueueQuorum:
	default:
		bad("QUEUE_TYPE: unknown queue type %q (want classic or quorum)", c.QueueType)
	}
	switch c.APIAuth {
	case APIAuthTokens, APIAuthOff:
	default:
		bad("API_AUTH: unknown value %q (want tokens or off)", c.APIAuth)
	}
	if c.ReplayRate < 1 || c.ReplayRate > 10000 {
		bad("REPLAY_RATE (%d) must be between 1 and 10000", c.ReplayRate)
	}
	errs = append(errs, c.validateSecurity()...)
	return errors.Join(errs...)
}

// redactErr renders a URL parse error without the URL (it may hold a password).
func redactErr(err error, raw string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return strings.ReplaceAll(err.Error(), raw, "…")
}

// String renders the configuration for logs, with the RabbitMQ password redacted.
func (c Config) String() string {
	c.RabbitMQURL = RedactURL(c.RabbitMQURL)
	var b strings.Builder
	b.WriteString("config{")
	for i, st := range settings {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%q", st.env, st.show(c))
	}
	b.WriteString("}")
	return b.String()
}

// RedactURL returns the URL with any password replaced by "xxxxx"; a URL that does
// not parse is hidden entirely.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

// Usage writes the command line, the flags and their environment variables.
func Usage(w io.Writer) {
	d := Default()
	d.HTTPAddr = ":" + strconv.Itoa(d.HTTPPort)
	fmt.Fprintln(w, "Usage: retry-scheduler [all|worker|bridge] [flags]")
	fmt.Fprintln(w, "Every flag has an environment variable; flags win over the environment.")
	fmt.Fprintln(w)
	for _, st := range settings {
		def := st.show(d)
		if st.env == "RABBITMQ_URL" {
			def = RedactURL(def)
		}
		fmt.Fprintf(w, "  -%s  (env %s)\n    \t%s (default %q)\n", st.flag, st.env, st.usage, def)
	}
}
