// Package config is the one place for the service's configuration. Settings come from
// defaults, then the environment, then command-line flags (flags win), read in one pass over
// one list of typed settings (settings.go). Each flag mirrors its environment variable
// (RABBITMQ_URL: -rabbitmq-url); the one exception is a *_MS variable, which takes whole
// milliseconds while its flag takes a duration and drops the suffix (BASE_DELAY_MS=2000:
// -base-delay 2s). The environment is read only through the lookup function the caller
// passes (the mains pass os.LookupEnv), so tests need no process environment.
//
// Usage: retry-scheduler [all|worker|bridge] [flags]
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/admission"
	"github.com/retry-scheduler/retry-scheduler/internal/breaker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/buildinfo"
	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/labels"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/worker"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Modes: what a process runs.
const (
	ModeAll    = "all"
	ModeWorker = "worker"
	ModeBridge = "bridge"
)

// Values of on/off settings (BREAKERS, DEPTH_POLLER).
const (
	On  = "on"
	Off = "off"
	// BreakersOn and BreakersOff are the values of Breakers.
	BreakersOn  = On
	BreakersOff = Off
)

// Values of APIAuth.
const (
	APIAuthTokens = "tokens"
	APIAuthOff    = "off"
)

// MaxMessageBytesLimit is the largest MAX_MESSAGE_BYTES accepted: a message travels in
// a Temporal payload base64-encoded (4/3 of its size) next to its metadata, and
// Temporal refuses payloads over 2 MB.
const MaxMessageBytesLimit = 1 << 20

// Config is the whole configuration.
type Config struct {
	// Mode is what the process runs: ModeAll (worker + bridge + ops HTTP), ModeWorker, or
	// ModeBridge (bridge + ops HTTP). Positional argument or flag -mode; env MODE.
	// Defaults to ModeAll.
	Mode string
	// RabbitMQURL is the broker (amqp:// or amqps://). Env RABBITMQ_URL, flag
	// -rabbitmq-url. Defaults to broker.DefaultURL.
	RabbitMQURL string
	// RabbitMQURLs lists the brokers, comma-separated: the nodes of one cluster, tried in a
	// random order on each connect (RabbitMQURL takes such a list too). Env RABBITMQ_URLS,
	// flag -rabbitmq-urls. When set, it is used in place of RabbitMQURL. Defaults to unset.
	RabbitMQURLs string
	// RetryQueue is the ingress queue of failed messages. Env RETRY_QUEUE, flag
	// -retry-queue. Defaults to bridge.DefaultQueue.
	RetryQueue string
	// ManualReviewQueue is the default dead-letter queue. Env MANUAL_REVIEW_QUEUE, flag
	// -manual-review-queue. Defaults to bridge.DefaultDeadLetterQueue.
	ManualReviewQueue string
	// DefaultMaxRetries is the max retries of the default policy. Env
	// DEFAULT_MAX_RETRIES, flag -default-max-retries. Defaults to the built-in policy's (3).
	DefaultMaxRetries int
	// BaseDelay is the default policy's first delay. Env BASE_DELAY_MS (whole
	// milliseconds), flag -base-delay (a duration, e.g. 2s). Defaults to the built-in
	// policy's (2s).
	BaseDelay time.Duration
	// MaxDelay caps the default policy's delay. Env MAX_DELAY_MS (whole milliseconds),
	// flag -max-delay (a duration). Defaults to the built-in policy's (60s).
	MaxDelay time.Duration
	// HTTPPort is the ops HTTP port (REST API, web page, /metrics). Env HTTP_PORT, flag
	// -http-port. Defaults to DefaultHTTPPort.
	HTTPPort int
	// HTTPAddr is the ops HTTP listen address. Env HTTP_ADDR, flag -http-addr.
	// Defaults to ":" + HTTPPort (all interfaces).
	HTTPAddr string
	// TemporalAddress is the Temporal frontend's host:port, or a comma-separated list of
	// them (every frontend of a cluster with no load balancer in front: calls are balanced
	// over those that answer). Env TEMPORAL_ADDRESS, flag -temporal-address. Defaults to
	// DefaultTemporalAddress.
	TemporalAddress string
	// Namespace is the Temporal namespace. Env TEMPORAL_NAMESPACE, flag
	// -temporal-namespace (or -namespace). Defaults to "default".
	Namespace string
	// TaskQueue is the Temporal task queue. Env TEMPORAL_TASK_QUEUE, flag
	// -temporal-task-queue (or -task-queue). Defaults to workflows.DefaultTaskQueue.
	TaskQueue string
	// PolicyFile is a policy/route file added to the built-in catalogue. Env
	// POLICY_FILE, flag -policy-file. Defaults to "" (built-in catalogue only).
	PolicyFile string
	// MaxMessageBytes is the largest payload carried; larger ones are dead-lettered at
	// ingress. At most MaxMessageBytesLimit. Env MAX_MESSAGE_BYTES, flag
	// -max-message-bytes. Defaults to bridge.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Prefetch is the bridge's AMQP prefetch count (1-65535). Env BRIDGE_PREFETCH, flag
	// -bridge-prefetch (or -prefetch). Defaults to bridge.DefaultPrefetch.
	Prefetch int
	// BridgeMemoryBudget bounds the bytes of the deliveries the bridge holds: the prefetch
	// used is min(Prefetch, BridgeMemoryBudget / MaxMessageBytes), since RabbitMQ counts
	// prefetch in messages only. Env BRIDGE_MEMORY_BUDGET, flag -bridge-memory-budget.
	// Defaults to DefaultBridgeMemoryBudget (half the bridge pod's memory limit).
	BridgeMemoryBudget int
	// DeadLetterMaxBytes is the largest dead-letter envelope published: a larger one leaves
	// its payload to a message of its own on the same queue (deadletter.Split). Keep it under
	// the broker's max_message_size. Env DEAD_LETTER_MAX_BYTES, flag -dead-letter-max-bytes.
	// Defaults to deadletter.DefaultMaxBytes (under RabbitMQ 4's 16 MiB).
	DeadLetterMaxBytes int
	// MetricsMaxQueues is the ceiling of distinct queue label values the process exports;
	// later queues are labelled labels.Overflow. Env METRICS_MAX_QUEUES, flag
	// -metrics-max-queues. Defaults to labels.DefaultMaxQueues.
	MetricsMaxQueues int
	// WorkflowPollers is how many workflow-task pollers the worker runs. Env WORKFLOW_POLLERS,
	// flag -workflow-pollers. Defaults to worker.DefaultWorkflowPollers.
	WorkflowPollers int
	// StickyTimeout is how long a workflow task waits for the worker that has its workflow
	// cached before any worker may take it. Env WORKFLOW_STICKY_TIMEOUT, flag
	// -workflow-sticky-timeout. Defaults to worker.DefaultStickyTimeout.
	StickyTimeout time.Duration
	// BridgeWorkers is how many deliveries the bridge handles at once. Env
	// BRIDGE_WORKERS, flag -bridge-workers. Defaults to bridge.DefaultWorkers.
	BridgeWorkers int
	// PublishTimeout bounds one publish and its confirm. Env PUBLISH_TIMEOUT, flag
	// -publish-timeout (durations, e.g. 10s). Defaults to broker.DefaultPublishTimeout.
	PublishTimeout time.Duration
	// StartDelayMax is the longest first retry delay a new message's workflow waits as its
	// start delay (one workflow task fewer per retry) rather than as a timer: Updates are
	// refused before the first task, and the run is not listed as scheduled until then. Env
	// START_DELAY_MAX, flag -start-delay-max. Defaults to DefaultStartDelayMax; 0 never
	// delays a start.
	StartDelayMax time.Duration
	// BridgeDeferMax is the longest first retry delay the bridge defers a new report for, keeping
	// its delivery unacked, before it starts the message's workflow, which then republishes
	// in its first workflow task: the bare engine's cost per retry. Longer first delays go
	// to StartDelayMax. Operators see the message in Temporal only once the delay is over,
	// and it costs unacked deliveries: up to (report rate × BridgeDeferMax), within Prefetch
	// and BridgeMemoryBudget. Env BRIDGE_DEFER_MAX, flag -bridge-defer-max. Defaults to
	// DefaultBridgeDeferMax; 0 never defers. Older name BRIDGE_HOLD_MAX, still read.
	BridgeDeferMax time.Duration
	// IntakeLagBound is the engine lag past which the bridge limits its intake (admission
	// control, internal/admission): the larger of the age of the oldest task waiting in the
	// task queue and the p90 of the bridge's report latency. The backlog then waits in
	// RabbitMQ rather than in Temporal. Env INTAKE_LAG_BOUND, flag -intake-lag-bound.
	// Defaults to admission.DefaultBound; 0 never limits (the lag is still measured).
	IntakeLagBound time.Duration
	// IntakeMinRate is the floor of the intake limit, in deliveries a second. Env
	// INTAKE_MIN_RATE, flag -intake-min-rate. Defaults to admission.DefaultMinRate.
	IntakeMinRate float64
	// IntakeLagInterval is how often the bridge reads the engine lag (two DescribeTaskQueue
	// calls) and adjusts its limit. Env INTAKE_LAG_INTERVAL, flag -intake-lag-interval.
	// Defaults to admission.DefaultInterval.
	IntakeLagInterval time.Duration
	// WorkerStopTimeout is how long a stopping worker lets activities finish; it must
	// exceed PublishTimeout. Env WORKER_STOP_TIMEOUT, flag -worker-stop-timeout.
	// Defaults to worker.DefaultStopTimeout.
	WorkerStopTimeout time.Duration
	// Retention is how long a dead message stays parked for an operator. Env
	// DEAD_LETTER_RETENTION, flag -dead-letter-retention or -retention (a duration; "30d"
	// days accepted). Defaults to workflows.DefaultRetention (30 days).
	Retention time.Duration
	// ExpiredArchiveQueue, when set, receives the envelope of each dead message whose
	// retention ends, declared at start like a dead-letter queue. Env EXPIRED_ARCHIVE_QUEUE,
	// flag -expired-archive-queue. Defaults to none: expired messages are not archived.
	ExpiredArchiveQueue string
	// ServiceName names the scheduler itself: metadata.service of the envelopes it writes for
	// its own reasons (poison, oversize input), the AMQP app_id of every envelope, the AMQP
	// connection names ("<name>-<mode>") and the startup log line. (An envelope of a failed
	// message names the service that failed, from the report.) Env SERVICE_NAME, flag
	// -service-name. Defaults to DefaultServiceName.
	ServiceName string
	// ServiceVersion is this build's version, in metadata.service_version of those envelopes
	// and the startup log line. Env SERVICE_VERSION, flag -service-version. Defaults to
	// DefaultServiceVersion (the build's: retry-scheduler -version).
	ServiceVersion string
	// LogLevel is debug, info, warn or error. Env LOG_LEVEL, flag -log-level.
	// Defaults to "info".
	LogLevel string
	// LogFormat is auto, text or json: auto writes text to a terminal and JSON otherwise
	// (a pipe, a file, a container's log). Env LOG_FORMAT, flag -log-format. Defaults to auto.
	LogFormat string
	// MetricsInterval is how often the depth gauges (retry_queue_depth, retry_due,
	// dead_letter_depth, dead_letter_oldest_age_seconds) are refreshed from Temporal
	// visibility counts, where the bridge runs. Env METRICS_INTERVAL, flag -metrics-interval.
	// Defaults to DefaultMetricsInterval.
	MetricsInterval time.Duration
	// DepthPoller says whether this process refreshes the depth gauges (On or Off, where the
	// bridge runs). Each poller's queries load Temporal visibility, so a deployment runs one:
	// its ops process, with DEPTH_POLLER=off on the scaled bridges. Env DEPTH_POLLER, flag
	// -depth-poller. Defaults to on.
	DepthPoller string
	// QueueType is the type of the queues this service declares: broker.QueueTypeClassic or
	// broker.QueueTypeQuorum. Env QUEUE_TYPE, flag -queue-type. Defaults to classic.
	QueueType string
	// Breakers turns the per-destination circuit breakers on or off (BreakersOn,
	// BreakersOff): off, no retry is held and none is counted, whatever the policies say.
	// Env BREAKERS, flag -breakers. Defaults to on.
	Breakers string
	// BreakerRefresh is how often a worker lists the breakers that hold and describes those of
	// the destinations its retries asked about: how late, at most, it learns that one opened. Env BREAKER_REFRESH, flag -breaker-refresh. Defaults to
	// breaker.DefaultRefresh.
	BreakerRefresh time.Duration
	// BreakerFlush is how often a process reports its republishes and failures to their
	// destinations' breakers, one signal per destination with something to report. Env
	// BREAKER_FLUSH, flag -breaker-flush. Defaults to breaker.DefaultFlush.
	BreakerFlush time.Duration

	// Operators' API (internal/ops/README.md).

	// APITokens are the API's bearer tokens, "name:role[:tenant]=token,..." with role viewer,
	// operator or admin (secret: never shown). Env API_TOKENS, flag -api-tokens. Defaults to
	// "" (none).
	APITokens Secret
	// APITokensFile holds more tokens, one "name:role[:tenant]=token" per line ("#" comments).
	// Env API_TOKENS_FILE, flag -api-tokens-file. Defaults to "" (none).
	APITokensFile string
	// APIAuth is "tokens" (bearer tokens required; with none configured the API answers 401)
	// or "off" (development only: every caller is an admin). Env API_AUTH, flag -api-auth.
	// Defaults to "tokens".
	APIAuth string
	// APIMaxScans is how many ops list scans of Temporal visibility run at a time; one asked
	// for beyond them is answered 503 with Retry-After. Env API_MAX_SCANS, flag
	// -api-max-scans. Defaults to DefaultAPIMaxScans.
	APIMaxScans int
	// ReplayRate is how many signals per second a dead-letter replay or purge sends. Env
	// REPLAY_RATE, flag -replay-rate. Defaults to DefaultReplayRate.
	ReplayRate int
	// TemporalUIURL is the Temporal Web UI's address (http://127.0.0.1:8233, say): the ops API
	// and page link each item to its workflow's history there. Env TEMPORAL_UI_URL, flag
	// -temporal-ui-url. Defaults to "" (no links).
	TemporalUIURL string

	// Security settings (security.go, docs/security.md). Secrets (APITokens, TemporalAPIKey,
	// PayloadKeys, CodecToken) are of type Secret: they never appear in String, Usage, logs or
	// error messages.

	// RabbitMQCAFile is the PEM CA bundle that verifies the broker's certificate (amqps).
	// Env RABBITMQ_CA_FILE, flag -rabbitmq-ca-file. Defaults to "" (the system roots).
	RabbitMQCAFile string
	// RabbitMQCertFile and RabbitMQKeyFile are the client certificate and key for amqps
	// (mutual TLS). Env RABBITMQ_CERT_FILE / RABBITMQ_KEY_FILE, flags -rabbitmq-cert-file /
	// -rabbitmq-key-file. Defaults to "" (none).
	RabbitMQCertFile, RabbitMQKeyFile string
	// The Temporal connection's settings take Temporal's standard client names
	// (temporalenv.go): the environment, or a profile of a TOML file (TEMPORAL_CONFIG_FILE,
	// TEMPORAL_PROFILE) beneath it. Older names stay accepted as aliases.

	// TemporalTLS is auto, true or false; auto means TLS when a CA, client certificate,
	// server name or API key is set. Env TEMPORAL_TLS, flag -temporal-tls. Defaults to "auto".
	TemporalTLS string
	// TemporalCAFile (or TemporalCAData, PEM) is the CA bundle that verifies Temporal's
	// certificate. Env TEMPORAL_TLS_SERVER_CA_CERT_PATH (alias TEMPORAL_CA_FILE) /
	// TEMPORAL_TLS_SERVER_CA_CERT_DATA. Defaults to "" (the system roots).
	TemporalCAFile, TemporalCAData string
	// TemporalCertFile and TemporalKeyFile (or their PEM data) are the client certificate and
	// key for mTLS. Env TEMPORAL_TLS_CLIENT_CERT_PATH / TEMPORAL_TLS_CLIENT_KEY_PATH (aliases
	// TEMPORAL_CERT_FILE / TEMPORAL_KEY_FILE), TEMPORAL_TLS_CLIENT_CERT_DATA /
	// TEMPORAL_TLS_CLIENT_KEY_DATA. Defaults to "" (none).
	TemporalCertFile, TemporalKeyFile, TemporalCertData string
	TemporalKeyData                                     Secret
	// TemporalServerName is the name Temporal's certificate is verified against. Env
	// TEMPORAL_TLS_SERVER_NAME (alias TEMPORAL_SERVER_NAME). Defaults to "" (the
	// TEMPORAL_ADDRESS host).
	TemporalServerName string
	// TemporalInsecureSkipVerify skips verifying Temporal's certificate (development only).
	// Env TEMPORAL_TLS_DISABLE_HOST_VERIFICATION. Defaults to false.
	TemporalInsecureSkipVerify bool
	// TemporalAuthority is the gRPC :authority sent to Temporal. Env
	// TEMPORAL_CLIENT_AUTHORITY. Defaults to "" (the address).
	TemporalAuthority string
	// TemporalGRPCMeta are gRPC headers sent on every call to Temporal, from the profile's
	// grpc_meta (values may be credentials: never shown).
	TemporalGRPCMeta map[string]Secret
	// TemporalConfigFile and TemporalProfile name the TOML profile read beneath the
	// environment. Env TEMPORAL_CONFIG_FILE (default: the user's temporalio/temporal.toml,
	// when it exists) and TEMPORAL_PROFILE (default "default").
	TemporalConfigFile, TemporalProfile string
	// TemporalAPIKey is sent to Temporal as a bearer API key. Env TEMPORAL_API_KEY, flag
	// -temporal-api-key. Defaults to "" (none).
	TemporalAPIKey Secret
	// PayloadKeys are the AES-256 keys of the payload codec, "id=base64key,...". Env
	// PAYLOAD_KEYS, flag -payload-keys. Defaults to "" (payloads are not encrypted).
	PayloadKeys Secret
	// PayloadKeyID names the key new payloads are sealed with. Env PAYLOAD_KEY_ID, flag
	// -payload-key-id. Defaults to the only key of PayloadKeys.
	PayloadKeyID string
	// CodecToken is the bearer token of the codec endpoint /codec/; the endpoint is served
	// only when it and PayloadKeys are set. Env CODEC_TOKEN, flag -codec-token. Defaults to ""
	// (no endpoint).
	CodecToken Secret
	// CodecCORSOrigins are the Web UI origins allowed to call the codec endpoint from a
	// browser, comma-separated. Env CODEC_CORS_ORIGINS, flag -codec-cors-origins. Defaults to
	// DefaultCodecOrigins.
	CodecCORSOrigins string
}

// Defaults with no other home: the ones of other packages' settings are those packages'
// exported constants, referenced by Default.
const (
	DefaultHTTPPort        = 8086
	DefaultTemporalAddress = "127.0.0.1:7233"
	// DefaultStartDelayMax and DefaultBridgeDeferMax are 0: every wait, the first included,
	// is a timer of a run started at once (eagerly, with a worker in the process), which
	// takes operator signals and Updates throughout; that is the bare engine's shape
	// (docs/performance.md has the figures of the levers).
	DefaultStartDelayMax   = 0
	DefaultBridgeDeferMax  = 0
	DefaultServiceName     = "retry-scheduler"
	DefaultLogLevel        = "info"
	DefaultMetricsInterval = 15 * time.Second
	DefaultReplayRate      = 20
	// DefaultBridgeMemoryBudget is half the bridge pod's memory limit (256 Mi), the rest left
	// to decoded copies, the runtime and the collector: 256 deliveries of the default
	// MAX_MESSAGE_BYTES.
	DefaultBridgeMemoryBudget = 128 << 20
	DefaultAPIMaxScans        = 4
)

// DefaultServiceVersion is this build's version (buildinfo.Info.Version: the stamped one, else
// what the go command recorded, else "dev"), so that dead letters and the startup log name
// the running build unless SERVICE_VERSION says otherwise.
var DefaultServiceVersion = buildinfo.Get().Version

// Default returns the configuration with every default.
func Default() Config {
	// DEFAULT_MAX_RETRIES, BASE_DELAY_MS and MAX_DELAY_MS reshape the built-in "default"
	// policy, so their defaults are that policy's.
	def := policy.Builtins()[policy.DefaultName]
	return Config{
		Mode:               ModeAll,
		RabbitMQURL:        broker.DefaultURL,
		RetryQueue:         bridge.DefaultQueue,
		ManualReviewQueue:  bridge.DefaultDeadLetterQueue,
		DefaultMaxRetries:  def.MaxRetries,
		BaseDelay:          def.Backoff.Initial,
		MaxDelay:           def.Backoff.Max,
		HTTPPort:           DefaultHTTPPort,
		TemporalAddress:    DefaultTemporalAddress,
		Namespace:          client.DefaultNamespace,
		TaskQueue:          workflows.DefaultTaskQueue,
		MaxMessageBytes:    bridge.DefaultMaxMessageBytes,
		Prefetch:           bridge.DefaultPrefetch,
		BridgeMemoryBudget: DefaultBridgeMemoryBudget,
		DeadLetterMaxBytes: deadletter.DefaultMaxBytes,
		MetricsMaxQueues:   labels.DefaultMaxQueues,
		BridgeWorkers:      bridge.DefaultWorkers,
		WorkflowPollers:    worker.DefaultWorkflowPollers,
		StickyTimeout:      worker.DefaultStickyTimeout,
		PublishTimeout:     broker.DefaultPublishTimeout,
		WorkerStopTimeout:  worker.DefaultStopTimeout,
		StartDelayMax:      DefaultStartDelayMax,
		BridgeDeferMax:     DefaultBridgeDeferMax,
		IntakeLagBound:     admission.DefaultBound,
		IntakeMinRate:      admission.DefaultMinRate,
		IntakeLagInterval:  admission.DefaultInterval,
		Retention:          workflows.DefaultRetention,
		ServiceName:        DefaultServiceName,
		ServiceVersion:     DefaultServiceVersion,
		LogLevel:           DefaultLogLevel,
		LogFormat:          LogFormatAuto,
		MetricsInterval:    DefaultMetricsInterval,
		DepthPoller:        On,
		QueueType:          broker.QueueTypeClassic,
		Breakers:           BreakersOn,
		BreakerRefresh:     breaker.DefaultRefresh,
		BreakerFlush:       breaker.DefaultFlush,
		APIAuth:            APIAuthTokens,
		ReplayRate:         DefaultReplayRate,
		APIMaxScans:        DefaultAPIMaxScans,
		TemporalTLS:        TLSAuto,
		CodecCORSOrigins:   DefaultCodecOrigins,
	}
}

// Load builds the configuration in one pass over the settings: defaults, then the
// environment (through lookupEnv; an empty value counts as unset), then args (flags, and the
// mode as an argument before or among them); then it validates it. It reports every problem
// at once. With -h or -help it returns flag.ErrHelp (print Usage).
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	c := Default()
	list := c.settings()
	flags, err := parseArgs(args, list)
	if err != nil {
		return Config{}, err
	}
	var errs []error
	// Temporal's client profile lies beneath the environment and flags: the two settings that
	// name it are read first, the profile applied, then every setting on top.
	for _, s := range list {
		if s.env == "TEMPORAL_CONFIG_FILE" || s.env == "TEMPORAL_PROFILE" {
			if err := s.load(flags, lookupEnv); err != nil {
				return Config{}, err
			}
		}
	}
	if err := c.applyTemporalProfile(); err != nil {
		return Config{}, err
	}
	for _, s := range list {
		if err := s.load(flags, lookupEnv); err != nil {
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

// given is a flag's text and the name it was given under, for error messages.
type given struct{ name, value string }

// parseArgs reads args into the flags given, by their setting's environment variable. The
// mode may come first or among the flags: parse, take one argument, go on. A value is only
// recorded here; load parses it, so that every bad value is reported, each naming its flag.
func parseArgs(args []string, list []setting) (map[string]given, error) {
	fs := flag.NewFlagSet("retry-scheduler", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	flags := map[string]given{}
	record := func(env, name string) func(string) error {
		return func(v string) error { flags[env] = given{name, v}; return nil }
	}
	for _, s := range list {
		fs.Func(s.flag(), s.usage, record(s.env, s.flag()))
		for _, short := range s.shortFlags() {
			fs.Func(short, s.usage, record(s.env, short))
		}
	}
	var rest []string
	for {
		if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-") {
			rest, args = append(rest, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp
			}
			return nil, fmt.Errorf("config: %w", err)
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
	}
	switch {
	case len(rest) > 1:
		return nil, fmt.Errorf("config: unexpected arguments %q (usage: retry-scheduler [all|worker|bridge] [flags])", rest)
	case len(rest) == 1:
		if m, ok := flags[modeEnv]; ok && !strings.EqualFold(m.value, rest[0]) {
			return nil, fmt.Errorf("config: mode given twice: argument %q and -%s %q", rest[0], m.name, m.value)
		}
		flags[modeEnv] = given{"mode", rest[0]}
	}
	return flags, nil
}

// String renders the configuration for logs: every setting by its environment variable,
// secrets and the RabbitMQ password redacted.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("config{")
	for i, s := range c.settings() {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%q", s.env, s.value.String())
	}
	b.WriteString("}")
	return b.String()
}

// Usage writes the command line, the flags, their environment variables and their defaults
// (secrets redacted).
func Usage(w io.Writer) {
	d := Default()
	d.HTTPAddr = ":" + strconv.Itoa(d.HTTPPort)
	fmt.Fprintln(w, "Usage: retry-scheduler [all|worker|bridge] [flags]")
	fmt.Fprintln(w, "Every flag has an environment variable of the same name; flags win over the environment.")
	fmt.Fprintln(w, "A *_MS variable takes whole milliseconds; its flag, without _MS, takes a duration (2s).")
	fmt.Fprintln(w)
	for _, s := range d.settings() {
		fmt.Fprintf(w, "  -%s  (env %s)", s.flag(), s.env)
		for _, short := range s.shortFlags() {
			fmt.Fprintf(w, " or -%s", short)
		}
		fmt.Fprintf(w, "\n    \t%s (default %q)\n", s.usage, s.value.String())
	}
}

// RunsDepthPoller reports whether this process refreshes the depth gauges: where a bridge
// runs, unless DEPTH_POLLER=off.
func (c Config) RunsDepthPoller() bool {
	return (c.Mode == ModeAll || c.Mode == ModeBridge) && c.DepthPoller == On
}

// BreakersEnabled reports whether the per-destination circuit breakers are on.
func (c Config) BreakersEnabled() bool { return c.Breakers == BreakersOn }

// The log formats of LOG_FORMAT.
const (
	LogFormatAuto = "auto"
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// NewLogger is the service's logger at LogLevel: text lines for a person when LogFormat is text,
// or auto and w is a terminal; JSON lines otherwise. The mains build it once and inject it
// everywhere.
func (c Config) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		level = slog.LevelInfo // Validate refuses any other level; a hand-built Config may hold one
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == LogFormatText || (c.LogFormat != LogFormatJSON && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// isTerminal reports whether w is a character device (a terminal), not a pipe or a file.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// TemporalAddresses is TemporalAddress split at its commas, each trimmed; empty entries are
// dropped.
func (c Config) TemporalAddresses() []string {
	var out []string
	for a := range strings.SplitSeq(c.TemporalAddress, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// BrokerURLs is the comma-separated list of broker URLs the service connects to:
// RABBITMQ_URLS when set, else RABBITMQ_URL.
func (c Config) BrokerURLs() string {
	if c.RabbitMQURLs != "" {
		return c.RabbitMQURLs
	}
	return c.RabbitMQURL
}

// brokerURLsEnv is the variable BrokerURLs comes from, for error messages.
func (c Config) brokerURLsEnv() string {
	if c.RabbitMQURLs != "" {
		return "RABBITMQ_URLS"
	}
	return "RABBITMQ_URL"
}
