package service

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// opsAuth builds the operators' API authentication: the tokens of API_TOKENS and
// API_TOKENS_FILE, or none at all with API_AUTH=off (development). Secrets are never logged.
func opsAuth(cfg config.Config, logger *slog.Logger) (*ops.Auth, error) {
	if cfg.APIAuth == config.APIAuthOff {
		logger.Warn("ops API authentication is off (API_AUTH=off): every caller is an admin; for local development only")
		return ops.Disabled(), nil
	}
	tokens, err := ops.ParseTokens("API_TOKENS", cfg.APITokens.Reveal())
	if err != nil {
		return nil, err
	}
	if cfg.APITokensFile != "" {
		b, err := os.ReadFile(cfg.APITokensFile)
		if err != nil {
			return nil, fmt.Errorf("API_TOKENS_FILE: %w", err)
		}
		more, err := ops.ParseTokens("API_TOKENS_FILE "+cfg.APITokensFile, string(b))
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, more...)
	}
	auth, err := ops.NewAuth(tokens)
	if err != nil {
		return nil, fmt.Errorf("API_TOKENS: %w", err)
	}
	if len(tokens) == 0 {
		logger.Warn("no ops API tokens configured: the API answers 401 (set API_TOKENS or API_TOKENS_FILE, or API_AUTH=off for development)")
	} else {
		names := make([]string, len(tokens))
		for i, t := range tokens {
			names[i] = t.Name + ":" + t.Role.String()
		}
		logger.Info("ops API tokens loaded", "tokens", names)
	}
	return auth, nil
}

// mountOpsAPI adds the operators' API and web page to mux. catalog is the process's policy
// catalogue: a pause starts a destination's breaker with the settings of the policy its
// messages are routed to, as the bridge routes them.
func mountOpsAPI(mux *http.ServeMux, cfg config.Config, catalog *policy.Catalog, tc ops.Temporal, dc converter.DataConverter, auth *ops.Auth, lagging func() bool, logger *slog.Logger) error {
	api, err := ops.NewAPI(ops.APIConfig{
		Client:         tc,
		DataConverter:  dc,
		Auth:           auth,
		Namespace:      cfg.Namespace,
		TaskQueue:      cfg.TaskQueue,
		ReplayRate:     float64(cfg.ReplayRate),
		MaxScans:       cfg.APIMaxScans,
		WebUIURL:       cfg.TemporalUIURL,
		BridgeDeferMax: cfg.BridgeDeferMax,
		Lagging:        lagging,
		Logger:         logger,
		// An edited retry's destination passes the guard a producer's report passes.
		Guard:           catalog.Guard(cfg.RetryQueue, cfg.ManualReviewQueue, ownQueues(cfg)...),
		MaxMessageBytes: cfg.MaxMessageBytes,
		BreakerSettings: func(queue string) policy.Breaker {
			p, _, _ := catalog.Resolve(queue, "")
			return p.Breaker
		},
	})
	if err != nil {
		return err
	}
	api.Register(mux)
	return nil
}

// ownQueues are the scheduler's queues besides the ingress and the manual-review queue: the
// expired envelopes' archive, when set.
func ownQueues(cfg config.Config) []string {
	if cfg.ExpiredArchiveQueue != "" {
		return []string{cfg.ExpiredArchiveQueue}
	}
	return nil
}
