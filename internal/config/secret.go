package config

import (
	"fmt"
	"log/slog"
)

// Redacted is what a set secret shows in place of its value (net/url's marker for a password).
const Redacted = "xxxxx"

// Secret is a setting that must never be shown: a token, an API key, key material. It prints,
// formats (every verb), marshals and logs as Redacted when set and as "" when empty, so that a
// Config or a field of it can go into a log line or an error; Reveal is the one way to the
// value, for the code that uses it.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String is Redacted when s is set, "" when it is empty.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// Format renders String for every verb, %#v and %q included.
func (s Secret) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), s.String())
}

// LogValue keeps the secret out of structured logs.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps the secret out of JSON and other encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
