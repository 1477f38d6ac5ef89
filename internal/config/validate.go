package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
)

// Validate checks every setting and reports all problems, each naming the setting's
// environment variable.
func (c Config) Validate() error {
	var p problems
	c.validateTopology(&p)
	c.validateRetryDefaults(&p)
	c.validateAddresses(&p)
	c.validateBridge(&p)
	c.validateWorker(&p)
	c.validateOperations(&p)
	p = append(p, c.validateSecurity()...)
	return errors.Join(p...)
}

// problems collects what is wrong with a configuration, so that one start reports all of it.
type problems []error

func (p *problems) add(format string, a ...any) { *p = append(*p, fmt.Errorf(format, a...)) }

// validateTopology checks the mode, the broker and the queues the service declares.
func (c Config) validateTopology(p *problems) {
	switch c.Mode {
	case ModeAll, ModeWorker, ModeBridge:
	default:
		p.add("MODE: unknown mode %q (want all, worker or bridge)", c.Mode)
	}
	if _, err := broker.SplitURLs(c.BrokerURLs()); err != nil {
		p.add("%s: %w", c.brokerURLsEnv(), err)
	}
	queueName := func(env, name string) {
		switch {
		case name == "":
			p.add("%s: must not be empty", env)
		case len(name) > 255:
			p.add("%s: %q is longer than 255 bytes", env, name)
		}
	}
	queueName("RETRY_QUEUE", c.RetryQueue)
	queueName("MANUAL_REVIEW_QUEUE", c.ManualReviewQueue)
	if c.RetryQueue != "" && c.RetryQueue == c.ManualReviewQueue {
		p.add("MANUAL_REVIEW_QUEUE: %q is also the RETRY_QUEUE", c.ManualReviewQueue)
	}
	if c.ExpiredArchiveQueue != "" {
		queueName("EXPIRED_ARCHIVE_QUEUE", c.ExpiredArchiveQueue)
		if c.ExpiredArchiveQueue == c.RetryQueue {
			p.add("EXPIRED_ARCHIVE_QUEUE: %q is also the RETRY_QUEUE", c.ExpiredArchiveQueue)
		}
	}
	switch c.QueueType {
	case broker.QueueTypeClassic, broker.QueueTypeQuorum:
	default:
		p.add("QUEUE_TYPE: unknown queue type %q (want classic or quorum)", c.QueueType)
	}
}

// validateRetryDefaults checks the retry policy the catalogue falls back to.
func (c Config) validateRetryDefaults(p *problems) {
	if c.DefaultMaxRetries < 0 {
		p.add("DEFAULT_MAX_RETRIES (%d) must be 0 or more", c.DefaultMaxRetries)
	}
	if c.BaseDelay <= 0 {
		p.add("BASE_DELAY_MS (%s) must be above 0", c.BaseDelay)
	}
	if c.MaxDelay < c.BaseDelay {
		p.add("MAX_DELAY_MS (%s) must not be below BASE_DELAY_MS (%s)", c.MaxDelay, c.BaseDelay)
	}
}

// validateAddresses checks where the service listens and where Temporal is.
func (c Config) validateAddresses(p *problems) {
	if c.HTTPPort < 1 || c.HTTPPort > 65535 {
		p.add("HTTP_PORT (%d) must be between 1 and 65535", c.HTTPPort)
	}
	if c.HTTPAddr != "" {
		if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			p.add("HTTP_ADDR: %q is not host:port", c.HTTPAddr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			p.add("HTTP_ADDR: port %q out of range", port)
		}
	}
	addrs := c.TemporalAddresses()
	if len(addrs) == 0 {
		p.add("TEMPORAL_ADDRESS: %q names no host:port", c.TemporalAddress)
	}
	for _, a := range addrs {
		if h, port, err := net.SplitHostPort(a); err != nil || h == "" {
			p.add("TEMPORAL_ADDRESS: %q is not host:port", a)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			p.add("TEMPORAL_ADDRESS: port %q out of range", port)
		}
	}
	if c.Namespace == "" {
		p.add("TEMPORAL_NAMESPACE: must not be empty")
	}
	if c.TaskQueue == "" {
		p.add("TEMPORAL_TASK_QUEUE: must not be empty")
	}
}

// minIntakeLagInterval keeps the lag readings of many bridges from loading the frontend.
const minIntakeLagInterval = 100 * time.Millisecond

// validateBridge checks the bridge's bounds: message and memory sizes, workers, the first-delay levers.
func (c Config) validateBridge(p *problems) {
	if c.MaxMessageBytes < 1 || c.MaxMessageBytes > MaxMessageBytesLimit {
		p.add("MAX_MESSAGE_BYTES (%d) must be between 1 and %d (Temporal refuses payloads over 2 MB; messages travel base64-encoded)", c.MaxMessageBytes, MaxMessageBytesLimit)
	}
	if c.Prefetch < 1 || c.Prefetch > 65535 {
		p.add("BRIDGE_PREFETCH (%d) must be between 1 and 65535", c.Prefetch)
	}
	if c.BridgeMemoryBudget < c.MaxMessageBytes {
		p.add("BRIDGE_MEMORY_BUDGET (%d) must be at least MAX_MESSAGE_BYTES (%d): one delivery of the largest size", c.BridgeMemoryBudget, c.MaxMessageBytes)
	}
	if c.DeadLetterMaxBytes < deadletter.MinMaxBytes {
		p.add("DEAD_LETTER_MAX_BYTES (%d) must be at least %d: an envelope without its payload fits in that", c.DeadLetterMaxBytes, deadletter.MinMaxBytes)
	}
	if c.MetricsMaxQueues < 1 {
		p.add("METRICS_MAX_QUEUES (%d) must be 1 or more", c.MetricsMaxQueues)
	}
	if c.BridgeWorkers < 1 {
		p.add("BRIDGE_WORKERS (%d) must be 1 or more", c.BridgeWorkers)
	}
	if c.BridgeDeferMax < 0 {
		p.add("BRIDGE_DEFER_MAX (%s) must not be negative", c.BridgeDeferMax)
	}
	if c.StartDelayMax < 0 {
		p.add("START_DELAY_MAX (%s) must not be negative", c.StartDelayMax)
	}
	if c.IntakeLagBound < 0 {
		p.add("INTAKE_LAG_BOUND (%s) must not be negative (0 never limits)", c.IntakeLagBound)
	}
	if c.IntakeMinRate <= 0 {
		p.add("INTAKE_MIN_RATE (%g) must be above 0", c.IntakeMinRate)
	}
	if c.IntakeLagInterval < minIntakeLagInterval {
		p.add("INTAKE_LAG_INTERVAL (%s) must be %s or more: each reading is two calls to Temporal", c.IntakeLagInterval, minIntakeLagInterval)
	}
}

// validateWorker checks the worker's pollers, publishes, stop and retention, and the circuit breakers.
func (c Config) validateWorker(p *problems) {
	if c.WorkflowPollers < 2 {
		p.add("WORKFLOW_POLLERS (%d) must be 2 or more (the sticky and the normal queue)", c.WorkflowPollers)
	}
	if c.StickyTimeout < time.Second {
		p.add("WORKFLOW_STICKY_TIMEOUT (%s) must be 1s or more", c.StickyTimeout)
	}
	if c.PublishTimeout <= 0 {
		p.add("PUBLISH_TIMEOUT (%s) must be above 0", c.PublishTimeout)
	}
	if c.WorkerStopTimeout <= c.PublishTimeout {
		p.add("WORKER_STOP_TIMEOUT (%s) must be above PUBLISH_TIMEOUT (%s)", c.WorkerStopTimeout, c.PublishTimeout)
	}
	if c.Retention <= 0 {
		p.add("DEAD_LETTER_RETENTION (%s) must be above 0", c.Retention)
	}
	if c.ServiceName == "" {
		p.add("SERVICE_NAME: must not be empty")
	}
	switch c.Breakers {
	case BreakersOn, BreakersOff:
	default:
		p.add("BREAKERS: unknown value %q (want on or off)", c.Breakers)
	}
	if c.BreakerRefresh <= 0 {
		p.add("BREAKER_REFRESH (%s) must be above 0", c.BreakerRefresh)
	}
	if c.BreakerFlush <= 0 {
		p.add("BREAKER_FLUSH (%s) must be above 0", c.BreakerFlush)
	}
}

// validateOperations checks logging, metrics and the ops API.
func (c Config) validateOperations(p *problems) {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.add("LOG_LEVEL: unknown level %q (want debug, info, warn or error)", c.LogLevel)
	}
	switch c.LogFormat {
	case LogFormatAuto, LogFormatText, LogFormatJSON:
	default:
		p.add("LOG_FORMAT: unknown format %q (want auto, text or json)", c.LogFormat)
	}
	if c.MetricsInterval <= 0 {
		p.add("METRICS_INTERVAL (%s) must be above 0", c.MetricsInterval)
	}
	switch c.DepthPoller {
	case On, Off:
	default:
		p.add("DEPTH_POLLER: unknown value %q (want on or off)", c.DepthPoller)
	}
	switch c.APIAuth {
	case APIAuthTokens:
	case APIAuthOff:
		if addr := c.httpListenAddr(); !loopbackAddr(addr) {
			p.add("API_AUTH=off makes every caller an admin: allowed only with HTTP_ADDR on a loopback address (127.0.0.1:%d, say), not %q", c.HTTPPort, addr)
		}
	default:
		p.add("API_AUTH: unknown value %q (want tokens or off)", c.APIAuth)
	}
	if c.APIMaxScans < 1 || c.APIMaxScans > 64 {
		p.add("API_MAX_SCANS (%d) must be between 1 and 64", c.APIMaxScans)
	}
	if c.ReplayRate < 1 || c.ReplayRate > 10000 {
		p.add("REPLAY_RATE (%d) must be between 1 and 10000", c.ReplayRate)
	}
}

// httpListenAddr is the address the ops HTTP server listens on: HTTP_ADDR, else every
// interface on HTTP_PORT.
func (c Config) httpListenAddr() string {
	if c.HTTPAddr != "" {
		return c.HTTPAddr
	}
	return ":" + strconv.Itoa(c.HTTPPort)
}

// loopbackAddr says whether host:port addr listens on loopback only: localhost or a loopback
// IP. An empty host is every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
