package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The policy file's shape. It is kept apart from Policy so that the file can spell
// things for people (backoff "type", duration strings, omitted defaults) while Policy
// stays what the workflow carries in its history.
type fileCatalog struct {
	DefaultPolicy string                `yaml:"default_policy"`
	Policies      map[string]filePolicy `yaml:"policies"`
	Routes        []fileRoute           `yaml:"routes"`
	Rules         []fileRule            `yaml:"rules"`
	Destinations  Destinations          `yaml:"destinations"`
}

type filePolicy struct {
	Backoff    *fileBackoff `yaml:"backoff"`
	Jitter     *fileJitter  `yaml:"jitter"`
	MaxRetries *int         `yaml:"max_retries"`
	// UnknownMaxRetries caps retries of unknown errors; absent or 0: no cap.
	UnknownMaxRetries int `yaml:"unknown_max_retries"`
	// MaxRetriesCeiling caps a message's own max_retries; absent or 0: the default.
	MaxRetriesCeiling int       `yaml:"max_retries_ceiling"`
	MaxWindow         duration  `yaml:"max_window"`
	QuietWindow       *duration `yaml:"quiet_window"`
	DeadLetterQueue   string    `yaml:"dead_letter_queue"`
	Manual            bool      `yaml:"manual"`
	// Breaker is absent for the defaults (Breaker.WithDefaults).
	Breaker *fileBreaker `yaml:"breaker"`
}

// fileBreaker is a policy's breaker block; an omitted key takes its default.
type fileBreaker struct {
	Disabled       bool     `yaml:"disabled"`
	Window         duration `yaml:"window"`
	MinRepublishes int      `yaml:"min_republishes"`
	FailureRatio   float64  `yaml:"failure_ratio"`
	Cooldown       duration `yaml:"cooldown"`
	CooldownMax    duration `yaml:"cooldown_max"`
	Probes         int      `yaml:"probes"`
	ProbeWindow    duration `yaml:"probe_window"`
	ReleaseRate    int      `yaml:"release_rate"`
	IdleEnd        duration `yaml:"idle_end"`
}

// breaker is the block as a Breaker: unset keys stay zero, so that the policy carries what
// the file says and the defaults apply where it is used.
func (fb fileBreaker) breaker() Breaker {
	return Breaker{
		Disabled:       fb.Disabled,
		Window:         time.Duration(fb.Window),
		MinRepublishes: fb.MinRepublishes,
		FailureRatio:   fb.FailureRatio,
		Cooldown:       time.Duration(fb.Cooldown),
		CooldownMax:    time.Duration(fb.CooldownMax),
		Probes:         fb.Probes,
		ProbeWindow:    time.Duration(fb.ProbeWindow),
		ReleaseRate:    fb.ReleaseRate,
		IdleEnd:        time.Duration(fb.IdleEnd),
	}
}

type fileBackoff struct {
	Type       string     `yaml:"type"`
	Initial    *duration  `yaml:"initial"`
	Multiplier *float64   `yaml:"multiplier"`
	Max        *duration  `yaml:"max"`
	Delays     []duration `yaml:"delays"`
}

type fileJitter struct {
	Mode     string    `yaml:"mode"`
	Max      *duration `yaml:"max"`
	Fraction *float64  `yaml:"fraction"`
}

type fileRoute struct {
	Queue           string `yaml:"queue"`
	Service         string `yaml:"service"`
	EventType       string `yaml:"event_type"`
	Policy          string `yaml:"policy"`
	DeadLetterQueue string `yaml:"dead_letter_queue"`
}

// fileRule is a classification rule as the file spells it: lists may be written as one
// item, statuses as numbers, classes ("4xx") or ranges ("500-504"), any category spelling.
type fileRule struct {
	Name         string     `yaml:"name"`
	Service      string     `yaml:"service"`
	EventType    string     `yaml:"event_type"`
	Queue        string     `yaml:"queue"`
	HTTPStatus   stringList `yaml:"http_status"`
	ErrorCode    stringList `yaml:"error_code"`
	ErrorType    stringList `yaml:"error_type"`
	Reason       stringList `yaml:"reason"`
	ReasonRegexp *string    `yaml:"reason_regexp"`
	Category     string     `yaml:"category"`
}

// rule compiles the file's rule, its regular expression once, here; the CategoryRule carries the
// name even when it returns an error, for the error's label.
func (fr fileRule) rule() (CategoryRule, error) {
	r := CategoryRule{
		Name: fr.Name, Service: fr.Service, EventType: fr.EventType, Queue: fr.Queue,
		ErrorCode: fr.ErrorCode, ErrorType: fr.ErrorType, Reason: fr.Reason,
	}
	var errs []error
	switch c, ok := ParseCategory(fr.Category); {
	case fr.Category == "":
		errs = append(errs, fmt.Errorf("category is required (one of %s)", categoryList()))
	case !ok:
		errs = append(errs, fmt.Errorf("category %q is not one of %s", fr.Category, categoryList()))
	default:
		r.Category = c
	}
	for _, s := range fr.HTTPStatus {
		sr, err := ParseStatusRange(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.HTTPStatus = append(r.HTTPStatus, sr)
	}
	if fr.ReasonRegexp != nil {
		re, err := regexp.Compile(*fr.ReasonRegexp)
		if *fr.ReasonRegexp == "" {
			errs = append(errs, errors.New("reason_regexp is empty, which would match every failure"))
		} else if err != nil {
			errs = append(errs, fmt.Errorf("reason_regexp: %w", err))
		} else {
			r.ReasonRegexp = re
		}
	}
	if len(errs) == 0 {
		if err := r.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return r, errors.Join(errs...)
}

// stringList reads a YAML sequence of scalars, or one scalar as a list of one.
type stringList []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = stringList{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(stringList, 0, len(n.Content))
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a value or a list of values", item.Line)}}
			}
			out = append(out, item.Value)
		}
		*l = out
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a value or a list of values", n.Line)}}
}

// defaultMultiplier applies when an exponential backoff omits its multiplier.
const defaultMultiplier = 2

// duration reads a Go duration string ("500ms", "1h"). Bare numbers are refused: a
// unit-less 30 could mean seconds or milliseconds, and guessing wrong is costly.
type duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a duration such as \"500ms\" or \"1h\"", n.Line)}}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid duration %q (use Go durations such as \"500ms\" or \"1h\")", n.Line, n.Value)}}
	}
	*d = duration(v)
	return nil
}

// Parse reads a policy file into a catalog: the built-in policies, then the file's,
// which replace built-ins of the same name. The file is strict (unknown keys are
// errors) because a misspelt key silently ignored would change retry behaviour. An empty
// file gives the built-in catalog. The result is validated.
func Parse(data []byte) (*Catalog, error) {
	var f fileCatalog
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse policy file: %w", yamlError(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse policy file: more than one YAML document")
	}

	c := NewCatalog()
	if f.DefaultPolicy != "" {
		c.Default = f.DefaultPolicy
	}
	var errs []error
	names := make([]string, 0, len(f.Policies))
	for name := range f.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, err := f.Policies[name].policy(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.Set(p)
	}
	for _, r := range f.Routes {
		c.Routes = append(c.Routes, Route(r))
	}
	for i, fr := range f.Rules {
		r, err := fr.rule()
		if err != nil {
			errs = append(errs, fmt.Errorf("classification %s: %w", r.label(i), err))
			continue
		}
		c.CategoryRules = append(c.CategoryRules, r)
	}
	c.Destinations = f.Destinations
	if len(errs) == 0 {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("parse policy file: %w", err)
	}
	return c, nil
}

// LoadFile reads and parses the policy file at path. Errors do not repeat the path
// beyond what os adds: callers already name the file they asked for.
func LoadFile(path string) (*Catalog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy file: %w", err)
	}
	return Parse(data)
}

// policy turns a file entry into a Policy, applying the file's defaults and refusing
// keys that do not belong to the chosen backoff or jitter kind (likely mistakes).
func (fp filePolicy) policy(name string) (Policy, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("policy %q: "+format, append([]any{name}, args...)...))
	}
	p := Policy{
		Name:              name,
		MaxWindow:         time.Duration(fp.MaxWindow),
		UnknownMaxRetries: fp.UnknownMaxRetries,
		MaxRetriesCeiling: fp.MaxRetriesCeiling,
		QuietWindow:       DefaultQuietWindow,
		DeadLetterQueue:   fp.DeadLetterQueue,
		Manual:            fp.Manual,
		Jitter:            Jitter{Mode: NoJitter},
	}
	if fp.QuietWindow != nil {
		p.QuietWindow = time.Duration(*fp.QuietWindow)
	}
	if fp.MaxRetries == nil {
		bad("max_retries is required")
	} else {
		p.MaxRetries = *fp.MaxRetries
	}

	switch b := fp.Backoff; {
	case b == nil:
		bad("backoff is required")
	case strings.EqualFold(b.Type, string(Exponential)):
		p.Backoff = Backoff{Kind: Exponential, Multiplier: defaultMultiplier}
		if b.Initial != nil {
			p.Backoff.Initial = time.Duration(*b.Initial)
		}
		if b.Multiplier != nil {
			p.Backoff.Multiplier = *b.Multiplier
		}
		if b.Max != nil {
			p.Backoff.Max = time.Duration(*b.Max)
		}
		if b.Delays != nil {
			bad("backoff.delays only applies to type schedule")
		}
	case strings.EqualFold(b.Type, string(Schedule)):
		p.Backoff = Backoff{Kind: Schedule}
		for _, d := range b.Delays {
			p.Backoff.Delays = append(p.Backoff.Delays, time.Duration(d))
		}
		if b.Initial != nil || b.Multiplier != nil || b.Max != nil {
			bad("backoff.initial, multiplier and max only apply to type exponential")
		}
	case b.Type == "":
		bad("backoff.type is required (exponential or schedule)")
	default:
		bad("backoff.type %q must be exponential or schedule", b.Type)
	}

	if j := fp.Jitter; j != nil {
		if j.Mode != "" {
			p.Jitter.Mode = JitterMode(strings.ToLower(j.Mode))
		}
		if j.Max != nil {
			if p.Jitter.Mode != Additive {
				bad("jitter.max only applies to mode additive")
			}
			p.Jitter.Max = time.Duration(*j.Max)
		}
		if j.Fraction != nil {
			if p.Jitter.Mode != Proportional {
				bad("jitter.fraction only applies to mode proportional")
			}
			p.Jitter.Fraction = *j.Fraction
		}
	}
	if fb := fp.Breaker; fb != nil {
		p.Breaker = fb.breaker()
		if p.Breaker.Disabled && p.Breaker != (Breaker{Disabled: true}) {
			bad("breaker settings have no effect with breaker.disabled")
		}
	}
	return p, errors.Join(errs...)
}

// yamlTypeNames are the file's words for the decoder's Go type names.
var yamlTypeNames = map[string]string{
	"fileCatalog":  "the policy file",
	"filePolicy":   "a policy",
	"fileBackoff":  "backoff",
	"fileJitter":   "jitter",
	"fileRoute":    "a route",
	"fileRule":     "a rule",
	"fileBreaker":  "breaker",
	"duration":     "a duration",
	"Destinations": "destinations",
	"ExchangeRule": "an exchange rule",
	"ProducerRule": "a producer rule",
}

var (
	yamlUnknownField = regexp.MustCompile(`field (\S+) not found in type policy\.(\w+)`)
	yamlTypeName     = regexp.MustCompile(`policy\.(\w+)`)
)

// yamlError makes the decoder's messages readable for people editing the file (no Go
// type names); each message keeps its line number.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msg := strings.Join(te.Errors, "; ")
	msg = yamlUnknownField.ReplaceAllString(msg, `unknown key "$1" in policy.$2`)
	msg = yamlTypeName.ReplaceAllStringFunc(msg, func(s string) string {
		if name, ok := yamlTypeNames[strings.TrimPrefix(s, "policy.")]; ok {
			return name
		}
		return s
	})
	return errors.New(msg)
}
