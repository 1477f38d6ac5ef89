package config

import "log/slog"

// ForeignVar is an environment variable that other retry services' documentation sets and
// this service does not read, with what to do instead.
type ForeignVar struct {
	// Name is the variable as set.
	Name string
	// Instead names the setting this service reads, or says why none is needed.
	Instead string
}

// foreignEnv is the one list of such variables. Each spelling is listed: the environment is
// case-sensitive, and .NET services take their settings' own names (MaxAttempts).
var foreignEnv = func() []ForeignVar {
	const (
		maxRetries = "DEFAULT_MAX_RETRIES (the default policy's retries), or max_retries per policy in POLICY_FILE"
		noPolling  = "none: nothing polls, each retry is a durable Temporal timer that fires when it is due"
		schedule   = "a policy with backoff type schedule in POLICY_FILE, or BASE_DELAY_MS and MAX_DELAY_MS for the default policy"
		database   = "none: Temporal owns persistence; set TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE (the Temporal server's own database is configured on that server)"
	)
	return []ForeignVar{
		{"MAX_RETRIES", maxRetries},
		{"MAX_ATTEMPTS", maxRetries},
		{"MaxAttempts", maxRetries},
		{"RETRY_POLL_INTERVAL_MS", noPolling},
		{"RETRY_INTERVAL_SECONDS", noPolling},
		{"RetryIntervalSeconds", noPolling},
		{"BACKOFF_SCHEDULE", schedule},
		{"BackoffSchedule", schedule},
		{"DATABASE_URL", database},
	}
}()

// ForeignEnv returns the variables of the foreign list that lookupEnv has set (an empty value
// counts as unset, as in Load), in the list's order.
func ForeignEnv(lookupEnv func(string) (string, bool)) []ForeignVar {
	var set []ForeignVar
	for _, v := range foreignEnv {
		if val, ok := lookupEnv(v.Name); ok && val != "" {
			set = append(set, v)
		}
	}
	return set
}

// WarnForeignEnv logs one warning for each foreign variable lookupEnv has set: a setting
// copied from another tool's documentation would otherwise be ignored in silence.
func WarnForeignEnv(logger *slog.Logger, lookupEnv func(string) (string, bool)) {
	for _, v := range ForeignEnv(lookupEnv) {
		logger.Warn("environment variable not read by this service", "variable", v.Name, "instead", v.Instead)
	}
}
