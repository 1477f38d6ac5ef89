// Package admission is the bridge's admission control: it measures how far the Temporal
// engine lags, and when the lag passes a bound it limits the rate at which the bridge takes
// deliveries, so that a backlog waits in RabbitMQ, where it costs nothing, rather than in
// Temporal, where timers then fire late, workflow tasks time out and goodput collapses.
//
// The lag is the larger of two figures, each measured every Interval:
//
//   - the age of the oldest task waiting in the service's task queue, workflow or activity
//     (DescribeTaskQueue with ReportStats: TaskQueueStats.ApproximateBacklogAge);
//   - the 90th percentile of the latency of the bridge's own report calls (signal-with-start
//     or start) that succeeded in that interval, or the age of the oldest call still running
//     when longer.
//
// The limit is AIMD on the intake rate with a token bucket: unlimited while the lag is at
// most Bound; past it, 0.8 × the last interval's intake (at least MinRate), × 0.8 each
// interval the lag stays above Bound, + 10 % each interval it is below Bound/2, released when
// demand stayed under the limit with the lag below Bound/2 for three intervals. Nothing is
// dropped, nacked or dead-lettered: a delivery not admitted stays in the broker. Every bridge
// reads the same task queue, so several bridges slow down together.
package admission

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retry-scheduler/retry-scheduler/internal/promreg"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Defaults of Config.
const (
	DefaultInterval = 2 * time.Second
	DefaultBound    = 5 * time.Second
	DefaultMinRate  = 1.0
)

// Config configures a Controller.
type Config struct {
	// Service answers DescribeTaskQueue (client.Client.WorkflowService()). Nil reads no
	// backlog: the lag is then the report latency alone.
	Service Describer
	// Namespace and TaskQueue name the task queue whose backlog is read: the service's.
	Namespace, TaskQueue string
	// Interval is the period of the measurement and of the limit's updates. Defaults to
	// DefaultInterval.
	Interval time.Duration
	// Timeout bounds one reading of the task queue's stats. Defaults to Interval, at least
	// 1 s: a short Interval must not leave a loaded frontend too little time to answer.
	Timeout time.Duration
	// Bound is the lag past which the intake is limited; 0 never limits (the lag is still
	// measured and exported). Not defaulted: config.Default sets DefaultBound.
	Bound time.Duration
	// MinRate is the limit's floor, in deliveries a second. Defaults to DefaultMinRate.
	MinRate float64
	// Logger logs engagements, releases and failed readings. Nil logs nowhere.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = max(c.Interval, time.Second)
	}
	c.Bound = max(c.Bound, 0)
	if c.MinRate <= 0 {
		c.MinRate = DefaultMinRate
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Controller measures the engine's lag and limits the intake by it. Its Ready, Take and Give
// are the bridge's Config.Intake, shared by every session of the bridge; Run updates it.
type Controller struct {
	cfg Config
	lag *lagSource
	lim *limiter
	m   metrics

	mu   sync.Mutex
	last Reading
	// statsFailing is set while the stats reads fail, so that a failing streak logs once.
	statsFailing bool
}

// New returns a Controller, its metrics registered; Run it.
func New(cfg Config) *Controller {
	cfg = cfg.withDefaults()
	return &Controller{
		cfg: cfg,
		lag: newLagSource(cfg.Service, cfg.Namespace, cfg.TaskQueue, cfg.Timeout, cfg.Now),
		lim: newLimiter(cfg.Now, cfg.Bound, cfg.MinRate, cfg.Interval),
		m:   newMetrics(cfg.Registerer),
	}
}

// Run measures and updates the limit every Interval until ctx is done; it returns nil then.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Step(ctx)
		}
	}
}

// Step ends one period: it takes a reading, updates the limit from its lag, and sets the
// metrics. Run calls it every Interval. A reading cut short by the end of ctx is returned but
// not used: the process is stopping, and its stats are not the engine's.
func (c *Controller) Step(ctx context.Context) Reading {
	r := c.lag.measure(ctx)
	if ctx.Err() != nil {
		return r
	}
	d := c.lim.update(r.Lag)
	c.mu.Lock()
	c.last = r
	failing, wasFailing := r.StatsErr != nil, c.statsFailing
	c.statsFailing = failing
	c.mu.Unlock()

	log := c.cfg.Logger
	switch {
	case failing:
		c.m.errors.Inc()
		if !wasFailing {
			log.Warn("engine lag: task-queue stats unreadable; the lag is the report latency alone until they are", "error", r.StatsErr)
		}
	case !failing && wasFailing:
		log.Info("engine lag: task-queue stats readable again", "backlog_age_ms", r.BacklogAge.Milliseconds())
	}
	c.m.lag.Set(r.Lag.Seconds())
	c.m.rate.Set(d.rate)
	switch d.step {
	case stepEngaged:
		c.m.engagements.Inc()
		c.m.limited.Set(1)
		log.Warn("intake limited: Temporal lags past the bound; deliveries wait in RabbitMQ",
			"lag_ms", r.Lag.Milliseconds(), "bound_ms", c.cfg.Bound.Milliseconds(), "rate_per_s", round(d.rate),
			"intake_per_s", round(d.intake), "backlog_age_ms", r.BacklogAge.Milliseconds(), "backlog_count", r.BacklogCount,
			"report_latency_ms", r.ReportLatency.Milliseconds())
	case stepReleased:
		c.m.limited.Set(0)
		log.Info("intake unlimited again: Temporal keeps up", "engaged_for", d.engagedFor.Round(time.Second).String(),
			"lag_ms", r.Lag.Milliseconds(), "intake_per_s", round(d.intake))
	case stepDecreased, stepIncreased:
		log.Debug("intake limit adjusted", "lag_ms", r.Lag.Milliseconds(), "rate_per_s", round(d.rate), "intake_per_s", round(d.intake))
	}
	return r
}

// round keeps two decimals of a rate for the logs.
func round(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// Ready reports whether the bridge may take one more delivery now; when not, wait is how
// long until it may (at most one Interval).
func (c *Controller) Ready() (ok bool, wait time.Duration) { return c.lim.ready() }

// Take spends one admission: the bridge took a delivery, or made a deferred report, after
// Ready said yes.
func (c *Controller) Take() { c.lim.take() }

// Give returns the admission of a delivery that made no report yet (deferred to its first
// retry's due time, when it takes one again).
func (c *Controller) Give() { c.lim.give() }

// Reporter is the bridge's hand-off to Temporal (bridge.Reporter).
type Reporter interface {
	Report(ctx context.Context, r message.FailureReport) error
}

// TimeReports wraps r so that the latency of each of its calls feeds the lag.
func (c *Controller) TimeReports(r Reporter) Reporter { return timedReporter{r: r, lag: c.lag} }

type timedReporter struct {
	r   Reporter
	lag *lagSource
}

func (t timedReporter) Report(ctx context.Context, r message.FailureReport) error {
	done := t.lag.reportStarted()
	err := t.r.Report(ctx, r)
	done(err == nil)
	return err
}

// Status is what operators see of admission control (GET /intake on the ops port).
type Status struct {
	// EngineLagSeconds is the last reading's lag: max(backlog age, report latency).
	EngineLagSeconds   float64 `json:"engine_lag_seconds"`
	BacklogAgeSeconds  float64 `json:"backlog_age_seconds"`
	BacklogCount       int64   `json:"backlog_count"`
	DispatchRate       float64 `json:"tasks_dispatch_rate"`
	ReportLatencyP90   float64 `json:"report_latency_p90_seconds"`
	StatsError         string  `json:"stats_error,omitempty"`
	MeasuredAt         string  `json:"measured_at,omitempty"`
	IntakeLimited      bool    `json:"intake_limited"`
	IntakeRateLimit    float64 `json:"intake_rate_limit"`
	BoundSeconds       float64 `json:"bound_seconds"`
	MinRate            float64 `json:"min_rate"`
	IntervalSeconds    float64 `json:"interval_seconds"`
	TaskQueue          string  `json:"task_queue"`
	LimitingConfigured bool    `json:"limiting_enabled"`
}

// Limited says whether the intake is limited now: Temporal lags past the bound. The ops API
// then sends operators' actions as signals rather than Updates (ops.APIConfig.Lagging).
func (c *Controller) Limited() bool {
	limited, _ := c.lim.state()
	return limited
}

// Status is the last reading and the limit now.
func (c *Controller) Status() Status {
	c.mu.Lock()
	r := c.last
	c.mu.Unlock()
	limited, rate := c.lim.state()
	s := Status{
		EngineLagSeconds:   r.Lag.Seconds(),
		BacklogAgeSeconds:  r.BacklogAge.Seconds(),
		BacklogCount:       r.BacklogCount,
		DispatchRate:       r.DispatchRate,
		ReportLatencyP90:   r.ReportLatency.Seconds(),
		IntakeLimited:      limited,
		IntakeRateLimit:    rate,
		BoundSeconds:       c.cfg.Bound.Seconds(),
		MinRate:            c.cfg.MinRate,
		IntervalSeconds:    c.cfg.Interval.Seconds(),
		TaskQueue:          c.cfg.TaskQueue,
		LimitingConfigured: c.cfg.Bound > 0,
	}
	if r.StatsErr != nil {
		s.StatsError = r.StatsErr.Error()
	}
	if !r.At.IsZero() {
		s.MeasuredAt = r.At.UTC().Format(time.RFC3339Nano)
	}
	return s
}

// ServeHTTP answers Status as JSON.
func (c *Controller) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(c.Status())
}

// metrics are the Controller's collectors, named like the bridge's (bridge_*).
type metrics struct {
	lag, limited, rate  prometheus.Gauge
	engagements, errors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridge_engine_lag_seconds",
			Help: "Temporal's lag as the bridge's admission control reads it: the larger of the task queue's oldest waiting task (workflow or activity) and the p90 of the bridge's report latency, over the last interval.",
		}),
		limited: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridge_intake_limited",
			Help: "1 while admission control limits the bridge's intake (the engine lags past INTAKE_LAG_BOUND), else 0.",
		}),
		rate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridge_intake_rate_limit",
			Help: "Deliveries a second the bridge admits while its intake is limited; 0 when unlimited.",
		}),
		engagements: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridge_intake_engagements_total",
			Help: "Times admission control started limiting the bridge's intake.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridge_engine_lag_errors_total",
			Help: "Readings of the task queue's stats that failed (the lag was the report latency alone).",
		}),
	}
	if reg != nil {
		m.lag = promreg.Register(reg, m.lag)
		m.limited = promreg.Register(reg, m.limited)
		m.rate = promreg.Register(reg, m.rate)
		m.engagements = promreg.Register(reg, m.engagements)
		m.errors = promreg.Register(reg, m.errors)
	}
	return m
}
