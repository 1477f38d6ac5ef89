package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.temporal.io/sdk/contrib/envconfig"
)

// envAliases are older names of renamed settings (the Temporal TLS settings took Temporal's
// standard client names; the bridge's deferral of short first delays was called a hold),
// still read when the new name is unset (deployments written before keep working).
var envAliases = map[string][]string{
	"TEMPORAL_TLS_SERVER_CA_CERT_PATH": {"TEMPORAL_CA_FILE"},
	"TEMPORAL_TLS_CLIENT_CERT_PATH":    {"TEMPORAL_CERT_FILE"},
	"TEMPORAL_TLS_CLIENT_KEY_PATH":     {"TEMPORAL_KEY_FILE"},
	"TEMPORAL_TLS_SERVER_NAME":         {"TEMPORAL_SERVER_NAME"},
	"BRIDGE_DEFER_MAX":                 {"BRIDGE_HOLD_MAX"},
}

// lookupWithAliases reads a setting's variable, else its older names. The standard name
// wins; an older name that disagrees with it is an error rather than a silent choice.
func lookupWithAliases(env string, lookupEnv func(string) (string, bool)) (string, string, error) {
	v, ok := lookupEnv(env)
	set := ok && strings.TrimSpace(v) != ""
	for _, alias := range envAliases[env] {
		a, ok := lookupEnv(alias)
		if !ok || strings.TrimSpace(a) == "" {
			continue
		}
		if !set {
			return a, alias, nil
		}
		if strings.TrimSpace(a) != strings.TrimSpace(v) {
			return "", env, fmt.Errorf("%s: set, and its older name %s differs; remove one", env, alias)
		}
	}
	if !set {
		return "", env, nil
	}
	return v, env, nil
}

// applyTemporalProfile sets the Temporal connection from a profile of Temporal's client TOML
// file, when one is named (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE, or their flags) or the
// default file exists. The environment and flags are applied after it, so they win. A named
// file or profile that is missing is an error; an absent default file is not.
func (c *Config) applyTemporalProfile() error {
	path := c.TemporalConfigFile
	if path == "" {
		def := envconfig.DefaultConfigFilePath()
		if _, err := os.Stat(def); def == "" || err != nil {
			if c.TemporalProfile != "" {
				return fmt.Errorf("TEMPORAL_PROFILE: %q set, but TEMPORAL_CONFIG_FILE is unset and %s does not exist", c.TemporalProfile, def)
			}
			return nil
		}
		path = def
	} else if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("TEMPORAL_CONFIG_FILE: %w", err)
	}
	p, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath:    path,
		ConfigFileProfile: c.TemporalProfile,
		ConfigFileStrict:  true,
		// The environment is this package's to read (settings), with the same names.
		DisableEnv: true,
		EnvLookup:  noEnv{},
	})
	if err != nil {
		return fmt.Errorf("TEMPORAL_CONFIG_FILE %s: %w", path, err)
	}
	if p.Codec != nil {
		return fmt.Errorf("TEMPORAL_CONFIG_FILE %s: a remote codec is not supported (workers would call it on every replay): use PAYLOAD_KEYS", path)
	}
	setIf := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	setIf(&c.TemporalAddress, p.Address)
	setIf(&c.Namespace, p.Namespace)
	setIf(&c.TemporalAuthority, p.Authority)
	if p.APIKey != "" {
		c.TemporalAPIKey = Secret(p.APIKey)
	}
	if t := p.TLS; t != nil {
		c.TemporalTLS = TLSOn
		if t.Disabled {
			c.TemporalTLS = TLSOff
		}
		setIf(&c.TemporalCAFile, t.ServerCACertPath)
		setIf(&c.TemporalCAData, string(t.ServerCACertData))
		setIf(&c.TemporalCertFile, t.ClientCertPath)
		setIf(&c.TemporalCertData, string(t.ClientCertData))
		setIf(&c.TemporalKeyFile, t.ClientKeyPath)
		if len(t.ClientKeyData) > 0 {
			c.TemporalKeyData = Secret(t.ClientKeyData)
		}
		setIf(&c.TemporalServerName, t.ServerName)
		c.TemporalInsecureSkipVerify = t.DisableHostVerification
	}
	if len(p.GRPCMeta) > 0 {
		c.TemporalGRPCMeta = make(map[string]Secret, len(p.GRPCMeta))
		for k, v := range p.GRPCMeta {
			// gRPC metadata keys travel lower-case with hyphens.
			c.TemporalGRPCMeta[strings.ReplaceAll(k, "_", "-")] = Secret(v)
		}
	}
	return nil
}

// noEnv is an empty environment for envconfig: it must not read the process environment
// behind Load's injected lookup.
type noEnv struct{}

func (noEnv) Environ() []string               { return nil }
func (noEnv) LookupEnv(string) (string, bool) { return "", false }

var _ envconfig.EnvLookup = noEnv{}

// boolean is a true/false setting: 1, t, true, 0, f, false in any case.
type boolean bool

func (b *boolean) Set(v string) error {
	p, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return errors.New(strconv.Quote(v) + " is not true or false")
	}
	*b = boolean(p)
	return nil
}

func (b *boolean) String() string { return strconv.FormatBool(bool(*b)) }
