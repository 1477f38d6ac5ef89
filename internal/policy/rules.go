package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Origin is where a failure comes from: what routes and classification rules match on
// besides the error itself.
type Origin struct {
	// Queue is the queue the message failed on.
	Queue string
	// Service is the reporting service's name.
	Service string
	// EventType is the producer's name for what the message is (order.created, say).
	EventType string
}

// CategoryRule puts the failures it matches in Category. Every field given must match (an empty
// field or list matches anything); within a list, any item may match. The catalog's rules
// are tried in order before the built-in tree (Classify), and the first match wins.
type CategoryRule struct {
	// Name labels the rule in notes and errors; optional.
	Name string `json:"name,omitempty"`
	// Service, EventType and Queue are path.Match globs on the failure's Origin.
	Service   string `json:"service,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Queue     string `json:"queue,omitempty"`
	// HTTPStatus are status ranges (a single status is a range of one).
	HTTPStatus []StatusRange `json:"http_status,omitempty"`
	// ErrorCode are error codes, compared case-insensitively ("ECONNRESET", "23505").
	ErrorCode []string `json:"error_code,omitempty"`
	// ErrorType are path.Match globs on the reporter's exception class ("*ValidationError").
	ErrorType []string `json:"error_type,omitempty"`
	// Reason are substrings of the error's text, compared case-insensitively.
	Reason []string `json:"reason,omitempty"`
	// ReasonRegexp is a regular expression (RE2 syntax) the error's text must match.
	ReasonRegexp *regexp.Regexp `json:"reason_regexp,omitempty"`
	// Category is what a matching failure is.
	Category Category `json:"category"`
}

// StatusRange is an inclusive range of HTTP statuses.
type StatusRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// ParseStatusRange reads a status as the policy file spells it: "503", a class "4xx", or a
// range "500-504".
func ParseStatusRange(s string) (StatusRange, error) {
	s = strings.TrimSpace(s)
	if len(s) == 3 && strings.EqualFold(s[1:], "xx") && s[0] >= '1' && s[0] <= '5' {
		lo := int(s[0]-'0') * 100
		return StatusRange{lo, lo + 99}, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	min, err1 := strconv.Atoi(strings.TrimSpace(lo))
	max, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil {
		return StatusRange{}, fmt.Errorf("http status %q: want a status (503), a class (5xx) or a range (500-504)", s)
	}
	r := StatusRange{Min: min, Max: max}
	return r, r.validate()
}

func (r StatusRange) validate() error {
	if r.Min < 100 || r.Max > 599 || r.Min > r.Max {
		return fmt.Errorf("http status range %d-%d: want statuses from 100 to 599, lowest first", r.Min, r.Max)
	}
	return nil
}

func (r StatusRange) contains(status int) bool { return status >= r.Min && status <= r.Max }

// label names the rule for notes and errors: its position (1-based) and its name if any.
func (r CategoryRule) label(i int) string {
	if r.Name != "" {
		return fmt.Sprintf("rule %d (%q)", i+1, r.Name)
	}
	return fmt.Sprintf("rule %d", i+1)
}

// validate refuses a rule that could never be meant: one matching everything, an unknown
// category, a malformed glob or status range.
func (r CategoryRule) validate() error {
	var errs []error
	if c, ok := ParseCategory(string(r.Category)); !ok || c != r.Category {
		errs = append(errs, fmt.Errorf("category %q is not one of %s", r.Category, categoryList()))
	}
	if r.Service == "" && r.EventType == "" && r.Queue == "" && len(r.HTTPStatus) == 0 &&
		len(r.ErrorCode) == 0 && len(r.ErrorType) == 0 && len(r.Reason) == 0 && r.ReasonRegexp == nil {
		errs = append(errs, errors.New("matches every failure: give at least one of service, event_type, queue, http_status, error_code, error_type, reason, reason_regexp"))
	}
	globs := []struct{ key, pattern string }{{"service", r.Service}, {"event_type", r.EventType}, {"queue", r.Queue}}
	for _, t := range r.ErrorType {
		globs = append(globs, struct{ key, pattern string }{"error_type", t})
	}
	for _, g := range globs {
		if _, err := path.Match(g.pattern, ""); err != nil {
			errs = append(errs, fmt.Errorf("%s %q is not a valid glob: %w", g.key, g.pattern, err))
		}
	}
	for _, s := range r.HTTPStatus {
		if err := s.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, list := range []struct {
		key   string
		items []string
	}{{"error_code", r.ErrorCode}, {"reason", r.Reason}} {
		for _, s := range list.items {
			if strings.TrimSpace(s) == "" {
				errs = append(errs, fmt.Errorf("%s has an empty item, which would match every failure", list.key))
			}
		}
	}
	return errors.Join(errs...)
}

// matches reports whether the rule matches failure f, with the reporter's exception class
// errorType, from origin o.
func (r CategoryRule) matches(o Origin, f Failure, errorType string) bool {
	if !globMatch(r.Service, o.Service) || !globMatch(r.EventType, o.EventType) || !globMatch(r.Queue, o.Queue) {
		return false
	}
	if len(r.HTTPStatus) > 0 && !anyOf(r.HTTPStatus, func(s StatusRange) bool { return s.contains(f.HTTPStatus) }) {
		return false
	}
	code := strings.TrimSpace(f.ErrorCode)
	if len(r.ErrorCode) > 0 && !anyOf(r.ErrorCode, func(c string) bool { return strings.EqualFold(strings.TrimSpace(c), code) }) {
		return false
	}
	if len(r.ErrorType) > 0 && !anyOf(r.ErrorType, func(g string) bool { return globMatch(g, errorType) }) {
		return false
	}
	reason := strings.ToLower(f.Reason)
	if len(r.Reason) > 0 && !anyOf(r.Reason, func(s string) bool { return strings.Contains(reason, strings.ToLower(s)) }) {
		return false
	}
	return r.ReasonRegexp == nil || r.ReasonRegexp.MatchString(f.Reason)
}

// globMatch matches value against an optional path.Match pattern: empty matches anything.
func globMatch(pattern, value string) bool {
	if pattern == "" {
		return true
	}
	ok, _ := path.Match(pattern, value)
	return ok
}

func anyOf[T any](items []T, f func(T) bool) bool {
	for _, it := range items {
		if f(it) {
			return true
		}
	}
	return false
}

// categoryList names the categories a rule may give, for errors.
func categoryList() string {
	return strings.Join([]string{
		string(Transient), string(RateLimited), string(Permanent), string(Validation),
		string(Client), string(Configuration), string(Unknown),
	}, ", ")
}

// RuleCategory is the category the catalog's rules give failure f, with the reporter's
// exception class errorType, from origin o, and the label of the rule that gave it. It
// reports false when the reporter named a category itself (that wins, as in Classify) or no
// rule matches: the built-in tree then decides.
func (c *Catalog) RuleCategory(o Origin, f Failure, errorType string) (cat Category, rule string, ok bool) {
	if _, named := ParseCategory(f.Category); named {
		return "", "", false
	}
	for i, r := range c.CategoryRules {
		if r.matches(o, f, errorType) {
			return r.Category, r.label(i), true
		}
	}
	return "", "", false
}

// Classify is the category of failure f from origin o: the reporter's own, else the first
// matching rule's, else the built-in tree's (Classify).
func (c *Catalog) Classify(o Origin, f Failure, errorType string) Category {
	if cat, _, ok := c.RuleCategory(o, f, errorType); ok {
		return cat
	}
	return Classify(f)
}
