package config

import (
	"flag"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/labels"
)

// A setting is one configuration value: its environment variable, what it means, and its
// typed value bound to one Config's field. Its flag is derived from the variable (flag).
type setting struct {
	env   string
	usage string
	// value parses a flag's text (Set) and renders the field for String and Usage, secrets
	// redacted (String). A value whose variable takes other units than its flag is an envValue.
	value flag.Value
}

// envValue is a value whose environment variable is written in other units than its flag.
type envValue interface {
	SetEnv(string) error
}

// modeEnv is the mode's variable; the mode may also come as an argument.
const modeEnv = "MODE"

// shortFlags are names the flags had before each mirrored its variable, still accepted
// because scripts, the tests' harnesses and the benchmark pass them.
var shortFlags = map[string][]string{
	"TEMPORAL_NAMESPACE":    {"namespace"},
	"TEMPORAL_TASK_QUEUE":   {"task-queue"},
	"BRIDGE_PREFETCH":       {"prefetch"},
	"DEAD_LETTER_RETENTION": {"retention"},
	// The flags of the Temporal TLS settings' older names (envAliases).
	"TEMPORAL_TLS_SERVER_CA_CERT_PATH": {"temporal-ca-file"},
	"TEMPORAL_TLS_CLIENT_CERT_PATH":    {"temporal-cert-file"},
	"TEMPORAL_TLS_CLIENT_KEY_PATH":     {"temporal-key-file"},
	"TEMPORAL_TLS_SERVER_NAME":         {"temporal-server-name"},
	"BRIDGE_DEFER_MAX":                 {"bridge-hold-max"},
}

// flag is the setting's flag: its variable in lower kebab case, without the _MS of a
// variable in whole milliseconds (the flag takes a duration, which carries its unit).
func (s setting) flag() string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSuffix(s.env, "_MS"), "_", "-"))
}

// shortFlags are the setting's other accepted flag names.
func (s setting) shortFlags() []string { return shortFlags[s.env] }

// load sets the value from its flag if given, else from its environment variable if set and
// not blank. Errors name the flag or variable the bad text came from.
func (s setting) load(flags map[string]given, lookupEnv func(string) (string, bool)) error {
	if g, ok := flags[s.env]; ok {
		if err := s.value.Set(g.value); err != nil {
			return fmt.Errorf("-%s: %w", g.name, err)
		}
		return nil
	}
	v, name, err := lookupWithAliases(s.env, lookupEnv)
	if err != nil || v == "" {
		return err
	}
	set := s.value.Set
	if ev, ok := s.value.(envValue); ok {
		set = ev.SetEnv
	}
	if err := set(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// settings lists every setting, bound to c's fields, in the order String and Usage show them.
func (c *Config) settings() []setting {
	s := []setting{
		{modeEnv, "what to run: all, worker or bridge (also the first argument)", (*word)(&c.Mode)},
		{"RABBITMQ_URL", "RabbitMQ URL (amqp:// or amqps://), or a comma-separated list of them (see RABBITMQ_URLS)", (*amqpURL)(&c.RabbitMQURL)},
		{"RABBITMQ_URLS", "RabbitMQ URLs, comma-separated: the nodes of a cluster, tried in a random order on each connect; when set, used in place of RABBITMQ_URL", (*amqpURL)(&c.RabbitMQURLs)},
		{"RETRY_QUEUE", "ingress queue of failed messages", (*text)(&c.RetryQueue)},
		{"MANUAL_REVIEW_QUEUE", "default dead-letter queue", (*text)(&c.ManualReviewQueue)},
		{"DEFAULT_MAX_RETRIES", "max retries of the default policy", (*integer)(&c.DefaultMaxRetries)},
		{"BASE_DELAY_MS", "first retry delay of the default policy (env: milliseconds; flag: a duration)", (*millis)(&c.BaseDelay)},
		{"MAX_DELAY_MS", "retry delay cap of the default policy (env: milliseconds; flag: a duration)", (*millis)(&c.MaxDelay)},
		{"HTTP_PORT", "ops HTTP port (API, web page, /metrics)", (*integer)(&c.HTTPPort)},
		{"HTTP_ADDR", "ops HTTP listen address, host:port (unset: every interface on HTTP_PORT)", (*text)(&c.HTTPAddr)},
		{"TEMPORAL_ADDRESS", "Temporal frontend host:port, or a comma-separated list of a cluster's frontends (calls balanced over those that answer)", (*text)(&c.TemporalAddress)},
		{"TEMPORAL_NAMESPACE", "Temporal namespace", (*text)(&c.Namespace)},
		{"TEMPORAL_TASK_QUEUE", "Temporal task queue", (*text)(&c.TaskQueue)},
		{"POLICY_FILE", "policy/route file (default: built-in catalogue only)", (*text)(&c.PolicyFile)},
		{"MAX_MESSAGE_BYTES", "largest payload carried; larger ones are dead-lettered", (*integer)(&c.MaxMessageBytes)},
		{"BRIDGE_PREFETCH", "bridge AMQP prefetch count (at most BRIDGE_MEMORY_BUDGET / MAX_MESSAGE_BYTES is used)", (*integer)(&c.Prefetch)},
		{"BRIDGE_MEMORY_BUDGET", "bytes of deliveries the bridge may hold; the prefetch used is min(BRIDGE_PREFETCH, this / MAX_MESSAGE_BYTES)", (*integer)(&c.BridgeMemoryBudget)},
		{"DEAD_LETTER_MAX_BYTES", "largest dead-letter envelope published; beyond it the payload goes as a message of its own (keep it under the broker's max_message_size)", (*integer)(&c.DeadLetterMaxBytes)},
		{"METRICS_MAX_QUEUES", "ceiling of distinct queue label values per process; later queues are labelled " + labels.Overflow, (*integer)(&c.MetricsMaxQueues)},
		{"WORKFLOW_POLLERS", "workflow-task pollers of the worker", (*integer)(&c.WorkflowPollers)},
		{"WORKFLOW_STICKY_TIMEOUT", "how long a workflow task waits for the worker that has its workflow cached before any worker may take it", (*duration)(&c.StickyTimeout)},
		{"BRIDGE_WORKERS", "deliveries the bridge handles at once", (*integer)(&c.BridgeWorkers)},
		{"PUBLISH_TIMEOUT", "deadline of one publish and its confirm", (*duration)(&c.PublishTimeout)},
		{"BRIDGE_DEFER_MAX", "longest first retry delay the bridge defers a new report for, keeping its delivery unacked, before the run starts and republishes at once (0: never)", (*duration)(&c.BridgeDeferMax)},
		{"INTAKE_LAG_BOUND", "engine lag (oldest task waiting in the task queue, or the p90 of the bridge's report latency) past which the bridge limits its intake, leaving the backlog in RabbitMQ (0: never limits)", (*duration)(&c.IntakeLagBound)},
		{"INTAKE_MIN_RATE", "floor of the bridge's intake limit, in deliveries a second", (*number)(&c.IntakeMinRate)},
		{"INTAKE_LAG_INTERVAL", "how often the bridge reads the engine lag and adjusts its intake limit", (*duration)(&c.IntakeLagInterval)},
		{"START_DELAY_MAX", "longest first retry delay waited as the workflow's start delay (0: never)", (*duration)(&c.StartDelayMax)},
		{"WORKER_STOP_TIMEOUT", "grace for activities when a worker stops (> PUBLISH_TIMEOUT)", (*duration)(&c.WorkerStopTimeout)},
		{"DEAD_LETTER_RETENTION", "how long a dead message waits for an operator", (*duration)(&c.Retention)},
		{"EXPIRED_ARCHIVE_QUEUE", "queue that receives the envelope of a dead message when its retention ends, without expiration (unset: not archived)", (*text)(&c.ExpiredArchiveQueue)},
		{"SERVICE_NAME", "the scheduler's name in its own dead letters (poison, oversize), envelopes' app_id, AMQP connection names and the startup log", (*text)(&c.ServiceName)},
		{"SERVICE_VERSION", "the scheduler's version in its own dead letters and the startup log", (*text)(&c.ServiceVersion)},
		{"LOG_LEVEL", "debug, info, warn or error", (*word)(&c.LogLevel)},
		{"LOG_FORMAT", "auto (text to a terminal, JSON otherwise), text or json", (*word)(&c.LogFormat)},
		{"METRICS_INTERVAL", "how often depth gauges are refreshed from Temporal visibility", (*duration)(&c.MetricsInterval)},
		{"DEPTH_POLLER", "refresh the depth gauges from Temporal visibility here: on or off (run one per deployment)", (*word)(&c.DepthPoller)},
		{"QUEUE_TYPE", "type of declared queues: classic or quorum", (*word)(&c.QueueType)},
		{"BREAKERS", "circuit breakers per destination: on or off (off: no retry is held or counted)", (*word)(&c.Breakers)},
		{"BREAKER_REFRESH", "how often a worker lists the breakers that hold its retries", (*duration)(&c.BreakerRefresh)},
		{"BREAKER_FLUSH", "how often a process reports republishes and failures to their breakers", (*duration)(&c.BreakerFlush)},
		{"API_TOKENS", "ops API bearer tokens: name:role[:tenant]=token,... (secret: prefer the environment)", &c.APITokens},
		{"API_TOKENS_FILE", "file of ops API tokens, one name:role[:tenant]=token per line", (*text)(&c.APITokensFile)},
		{"API_AUTH", "ops API authentication: tokens, or off (development only, HTTP_ADDR on loopback)", (*word)(&c.APIAuth)},
		{"REPLAY_RATE", "signals per second of a dead-letter replay or purge", (*integer)(&c.ReplayRate)},
		{"API_MAX_SCANS", "ops list scans of Temporal visibility at a time; more are answered 503 with Retry-After", (*integer)(&c.APIMaxScans)},
		{"TEMPORAL_UI_URL", "Temporal Web UI address the ops page links workflows to (empty: no links)", (*webURL)(&c.TemporalUIURL)},
	}
	return append(s, c.securitySettings()...)
}

// The value types: each is a flag.Value over a Config field's type, bound by a pointer
// conversion ((*text)(&c.RetryQueue)). Set errors quote the text but not the setting, which
// load adds.

// text is a string setting; surrounding space is dropped.
type text string

func (t *text) Set(v string) error { *t = text(strings.TrimSpace(v)); return nil }
func (t *text) String() string     { return string(*t) }

// word is a keyword setting, case-insensitive: kept in lower case for Validate to check.
type word string

func (w *word) Set(v string) error { *w = word(strings.ToLower(strings.TrimSpace(v))); return nil }
func (w *word) String() string     { return string(*w) }

// integer is a whole-number setting.
type integer int

func (n *integer) Set(v string) error {
	i, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not a whole number", v)
	}
	*n = integer(i)
	return nil
}

func (n *integer) String() string { return strconv.Itoa(int(*n)) }

// number is a decimal setting.
type number float64

func (n *number) Set(v string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%q is not a number", v)
	}
	*n = number(f)
	return nil
}

func (n *number) String() string { return strconv.FormatFloat(float64(*n), 'g', -1, 64) }

// duration is a duration setting in ParseDuration's grammar, from the flag and the environment.
type duration time.Duration

func (d *duration) Set(v string) error { return setDuration((*time.Duration)(d), v, "10s, 1m30s, 30d") }

func (d *duration) String() string { return time.Duration(*d).String() }

// millis is a duration whose environment variable takes whole milliseconds (BASE_DELAY_MS=2000)
// and whose flag takes a duration (-base-delay 2s).
type millis time.Duration

func (m *millis) Set(v string) error { return setDuration((*time.Duration)(m), v, "2s, 500ms") }

func (m *millis) SetEnv(v string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a whole number of milliseconds", v)
	}
	*m = millis(time.Duration(n) * time.Millisecond)
	return nil
}

func (m *millis) String() string { return time.Duration(*m).String() }

// setDuration parses v (ParseDuration) into *d; its error shows examples of what a setting
// takes.
func setDuration(d *time.Duration, v, examples string) error {
	p, err := ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. %s)", v, examples)
	}
	*d = p
	return nil
}

// maxDays is the most whole days a time.Duration can hold.
const maxDays = int(math.MaxInt64 / int64(24*time.Hour))

// ParseDuration is time.ParseDuration plus whole days ("30d"), the one duration grammar of
// settings and of the operators' API (retention, ages).
func ParseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number of days", v)
		}
		// A time.Duration holds about 292 years; more days would wrap round.
		if n > maxDays || n < -maxDays {
			return 0, fmt.Errorf("%q is more days than a duration holds (%d)", v, maxDays)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// amqpURL is a broker URL or a comma-separated list of them: shown with every password
// redacted.
type amqpURL string

func (u *amqpURL) Set(v string) error { *u = amqpURL(strings.TrimSpace(v)); return nil }

func (u *amqpURL) String() string {
	if *u == "" {
		return ""
	}
	parts := strings.Split(string(*u), ",")
	for i, p := range parts {
		parts[i] = broker.RedactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// webURL is an http(s) address, kept without a trailing slash (links append paths to it).
type webURL string

func (u *webURL) Set(v string) error {
	v = strings.TrimRight(strings.TrimSpace(v), "/")
	if p, err := url.Parse(v); v != "" && (err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "") {
		return fmt.Errorf("%q is not an http(s) URL", v)
	}
	*u = webURL(v)
	return nil
}

func (u *webURL) String() string { return string(*u) }

// Set makes a Secret a setting's value: surrounding space is dropped.
func (s *Secret) Set(v string) error { *s = Secret(strings.TrimSpace(v)); return nil }
