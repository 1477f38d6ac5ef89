package config

import (
	"slices"
	"strings"
)

// libraryEnv are variables read by the Go runtime rather than by the settings list.
var libraryEnv = []string{"GOMEMLIMIT", "GOMAXPROCS", "GOGC", "GODEBUG", "TZ"}

// libraryEnvPrefixes are families of variables read by name pattern: OpenTelemetry's standard
// variables (internal/tracing/).
var libraryEnvPrefixes = []string{"OTEL_"}

// The older names of renamed settings (envAliases) are read too.
func aliasNames() []string {
	var names []string
	for _, a := range envAliases {
		names = append(names, a...)
	}
	return names
}

// EnvNames lists every variable the process reads by exact name, sorted: its settings' and the
// libraries'. Deployment manifests are checked against it (KnownEnv), so a misspelt variable
// fails a test instead of being silently ignored.
func EnvNames() []string {
	var c Config
	var names []string
	for _, s := range c.settings() {
		names = append(names, s.env)
	}
	names = append(names, libraryEnv...)
	names = append(names, aliasNames()...)
	slices.Sort(names)
	return slices.Compact(names)
}

// KnownEnv reports whether the process reads the variable name: one of EnvNames, or one of a
// family read by prefix (OTEL_*).
func KnownEnv(name string) bool {
	if _, found := slices.BinarySearch(EnvNames(), name); found {
		return true
	}
	for _, p := range libraryEnvPrefixes {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return true
		}
	}
	return false
}
