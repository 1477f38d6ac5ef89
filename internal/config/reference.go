package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ReferencePath is where the configuration reference lives, relative to the repository root.
const ReferencePath = "docs/configuration-reference.md"

// referenceDefaults are defaults that Default cannot show as they are at run time: one that
// depends on the build, one that is derived from another setting.
var referenceDefaults = map[string]string{
	"SERVICE_VERSION": "this build's version, as `retry-scheduler -version` prints it",
	"HTTP_ADDR":       "every interface on `HTTP_PORT` (`:" + strconv.Itoa(DefaultHTTPPort) + "`)",
}

// WriteReference writes the configuration reference, in Markdown, from the settings list: one
// row per setting with its variable, its flags, its default and what it means, then the
// variables read by the libraries. It is deterministic, so the committed file can be compared
// with it.
func WriteReference(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from internal/config/settings.go by ` + "`make docs`" + `; do not edit by hand. -->

Every setting is an environment variable with a flag of the same name in lower kebab case;
a flag wins over the variable, an empty variable counts as unset, and ` + "`retry-scheduler -h`" + `
lists the same table. A ` + "`*_MS`" + ` variable takes whole milliseconds and its flag, without the
suffix, a duration (` + "`BASE_DELAY_MS=2000`, `-base-delay 2s`" + `). Durations take Go's units plus
whole days (` + "`30d`" + `). Invalid settings are refused at start, all at once, each naming the
setting. Secrets are best given in the environment: flags show in ` + "`ps`" + `. How the settings fit
together: [configuration.md](configuration.md).

| env | flag | default | description |
| --- | --- | --- | --- |
`)
	d := Default()
	for _, s := range d.settings() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.env, referenceFlags(s), referenceDefault(s), referenceUsage(s))
	}
	b.WriteString(`
Also read, by the Go runtime and the libraries rather than the settings list: ` + "`" + strings.Join(libraryEnv, "`, `") + "`" + `,
and the OpenTelemetry SDK's variables (` + "`" + strings.Join(libraryEnvPrefixes, "*`, `") + "*`" + `; tracing is off unless they turn it on).
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// referenceFlags is the setting's flag, its older names, and for the mode the argument.
func referenceFlags(s setting) string {
	names := []string{"`-" + s.flag() + "`"}
	for _, short := range s.shortFlags() {
		names = append(names, "`-"+short+"`")
	}
	text := strings.Join(names, " or ")
	if s.env == modeEnv {
		text += " or the first argument"
	}
	return text
}

// referenceDefault renders the default as the variable takes it: milliseconds for a *_MS
// variable (with the flag's duration), "none" when empty.
func referenceDefault(s setting) string {
	if v, ok := referenceDefaults[s.env]; ok {
		return v
	}
	if m, ok := s.value.(*millis); ok {
		return fmt.Sprintf("`%d` (`%s`)", time.Duration(*m).Milliseconds(), m.String())
	}
	v := s.value.String()
	if u, ok := s.value.(*amqpURL); ok {
		v = string(*u) // the built-in default's password is the broker's well-known guest one
	}
	if v == "" {
		return "none"
	}
	return "`" + v + "`"
}

// referenceUsage is the setting's description, with its older variable names, escaped for a
// table cell.
func referenceUsage(s setting) string {
	u := s.usage
	if aliases := envAliases[s.env]; len(aliases) > 0 {
		u += "; older name " + strings.Join(aliases, ", ") + ", still read"
	}
	return strings.ReplaceAll(u, "|", `\|`)
}
