// Package openapicheck checks HTTP answers against an OpenAPI 3.1 document: the answer's
// status must be described for its route, and its JSON body must match the status's schema.
// The ops tests and the end-to-end tests run every answer of the ops API through it.
//
// It implements the part of JSON Schema the ops description uses: $ref (local), type (one or
// a list, "integer" a whole number), enum, const, properties, required, additionalProperties,
// items, minItems, maxItems, oneOf, anyOf, allOf and format date-time. It is stricter than
// JSON Schema in one way: an object schema that lists properties and says nothing of
// additionalProperties allows no other property, so that a field a handler sends and the
// description lacks fails a test instead of going undocumented.
package openapicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Checker checks answers against one document.
type Checker struct {
	doc    map[string]any
	routes []route
}

// route is one described path and method.
type route struct {
	Method string
	// Path is the described path, e.g. /api/messages/{id}/retry.
	Path string
	segs []string
	op   map[string]any
}

// New reads an OpenAPI 3.1 document; every $ref in it must resolve.
func New(doc []byte) (*Checker, error) {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi: not JSON: %w", err)
	}
	if v, _ := d["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("openapi: version %q, want 3.1.x", d["openapi"])
	}
	c := &Checker{doc: d}
	if err := c.checkRefs(d, "#"); err != nil {
		return nil, err
	}
	paths, ok := d["paths"].(map[string]any)
	if !ok {
		return nil, errors.New("openapi: no paths")
	}
	for p, item := range paths {
		ops, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("openapi: path %s is not an object", p)
		}
		for m, op := range ops {
			o, ok := op.(map[string]any)
			if !ok || !isMethod(m) {
				continue
			}
			c.routes = append(c.routes, route{Method: strings.ToUpper(m), Path: p, segs: strings.Split(strings.Trim(p, "/"), "/"), op: o})
		}
	}
	slices.SortFunc(c.routes, func(a, b route) int { return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method) })
	return c, nil
}

func isMethod(m string) bool {
	switch m {
	case "get", "put", "post", "delete", "options", "head", "patch", "trace":
		return true
	}
	return false
}

// Operations lists the described operations as "METHOD /path".
func (c *Checker) Operations() []string {
	out := make([]string, len(c.routes))
	for i, r := range c.routes {
		out[i] = r.Method + " " + r.Path
	}
	return out
}

// Operation is the described operation, as decoded JSON, of "METHOD /path" (as Operations
// names it); nil when there is none.
func (c *Checker) Operation(name string) map[string]any {
	for _, r := range c.routes {
		if r.Method+" "+r.Path == name {
			return r.op
		}
	}
	return nil
}

// checkRefs walks v and resolves every $ref in it.
func (c *Checker) checkRefs(v any, at string) error {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			if _, err := c.resolve(ref); err != nil {
				return fmt.Errorf("openapi: %s: %w", at, err)
			}
		}
		for k, e := range x {
			if err := c.checkRefs(e, at+"/"+k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := c.checkRefs(e, at+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// resolve follows a local JSON pointer (#/components/schemas/Item).
func (c *Checker) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q is not local", ref)
	}
	var cur any = c.doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
	}
	return cur, nil
}

// deref follows v's $ref, if it has one, to an object.
func (c *Checker) deref(v any) map[string]any {
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		r, _ := c.resolve(ref)
		m, _ = r.(map[string]any)
	}
	return nil
}

// Match finds the described route of a request: rawPath is the escaped path (a query is
// ignored). A path parameter takes one segment or, as the ops API's {id...} wildcards do,
// several; the route with the most literal segments wins.
func (c *Checker) Match(method, rawPath string) (string, bool) {
	r := c.match(method, rawPath)
	if r == nil {
		return "", false
	}
	return r.Method + " " + r.Path, true
}

func (c *Checker) match(method, rawPath string) *route {
	if i := strings.IndexByte(rawPath, '?'); i >= 0 {
		rawPath = rawPath[:i]
	}
	segs := strings.Split(strings.Trim(rawPath, "/"), "/")
	var best *route
	bestLit := -1
	for i := range c.routes {
		r := &c.routes[i]
		if r.Method != method || !matchSegs(r.segs, segs) {
			continue
		}
		lit := 0
		for _, s := range r.segs {
			if !isParam(s) {
				lit++
			}
		}
		if lit > bestLit {
			best, bestLit = r, lit
		}
	}
	return best
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// matchSegs matches path segments to a template's: a parameter takes one or more non-empty
// segments.
func matchSegs(tmpl, segs []string) bool {
	if len(tmpl) == 0 {
		return len(segs) == 0
	}
	if len(segs) == 0 {
		return false
	}
	if !isParam(tmpl[0]) {
		return tmpl[0] == segs[0] && matchSegs(tmpl[1:], segs[1:])
	}
	for n := 1; n <= len(segs); n++ {
		if segs[n-1] == "" {
			return false
		}
		if matchSegs(tmpl[1:], segs[n:]) {
			return true
		}
	}
	return false
}

// CheckResponse checks one answer: its route must be described (else the answer must be
// the 404 error of a path no route takes), its status described for the route, a JSON answer
// declared application/json (when header is not nil), required headers present, and the
// body valid against the status's schema.
func (c *Checker) CheckResponse(method, rawPath string, status int, header http.Header, body []byte) error {
	r := c.match(method, rawPath)
	if r == nil {
		if status != http.StatusNotFound {
			return fmt.Errorf("%s %s is not described, and answered %d (not 404)", method, rawPath, status)
		}
		return c.checkBody("404 of an undescribed route", c.errorSchema(), body)
	}
	name := r.Method + " " + r.Path
	resp := c.response(r.op, status)
	if resp == nil {
		return fmt.Errorf("%s (%s %s): status %d is not described (answer %s)", name, method, rawPath, status, clip(body))
	}
	if header != nil {
		for h, v := range mapOf(resp["headers"]) {
			if hm := c.deref(v); hm != nil && hm["required"] == true && header.Get(h) == "" {
				return fmt.Errorf("%s: %d: header %s is required", name, status, h)
			}
		}
	}
	media := c.deref(mapOf(resp["content"])["application/json"])
	if media == nil {
		if len(bytes.TrimSpace(body)) > 0 && mapOf(resp["content"]) == nil {
			return fmt.Errorf("%s: %d: described without a body, answered %s", name, status, clip(body))
		}
		return nil
	}
	if header != nil {
		if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err != nil || mt != "application/json" {
			return fmt.Errorf("%s: %d: Content-Type %q, want application/json", name, status, header.Get("Content-Type"))
		}
	}
	return c.checkBody(fmt.Sprintf("%s: %d", name, status), media["schema"], body)
}

func (c *Checker) errorSchema() any {
	return map[string]any{"$ref": "#/components/schemas/Error"}
}

// response is the described response of status: its code, its range (4XX), or default.
func (c *Checker) response(op map[string]any, status int) map[string]any {
	rs := mapOf(op["responses"])
	for _, k := range []string{strconv.Itoa(status), strconv.Itoa(status/100) + "XX", "default"} {
		if r, ok := rs[k]; ok {
			return c.deref(r)
		}
	}
	return nil
}

func (c *Checker) checkBody(what string, schema any, body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%s: the body is not JSON: %w (%s)", what, err, clip(body))
	}
	if err := c.Validate(schema, v); err != nil {
		return fmt.Errorf("%s: %w\nbody: %s", what, err, clip(body))
	}
	return nil
}

func clip(b []byte) string {
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// Validate checks a decoded JSON value (numbers as json.Number or float64) against schema.
func (c *Checker) Validate(schema, v any) error {
	return c.validate(schema, v, "$")
}

func (c *Checker) validate(schema, v any, at string) error {
	s, ok := schema.(map[string]any)
	if !ok {
		if b, isBool := schema.(bool); isBool && !b {
			return fmt.Errorf("%s: no value is allowed here", at)
		}
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		target, err := c.resolve(ref)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		if err := c.validate(target, v, at); err != nil {
			return err
		}
	}
	if t, ok := s["type"]; ok && !hasType(t, v) {
		return fmt.Errorf("%s: %s is not of type %v", at, show(v), t)
	}
	if e, ok := s["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return equal(x, v) }) {
		return fmt.Errorf("%s: %s is not one of %v", at, show(v), e)
	}
	if cv, ok := s["const"]; ok && !equal(cv, v) {
		return fmt.Errorf("%s: %s is not %v", at, show(v), cv)
	}
	if f, _ := s["format"].(string); f == "date-time" {
		if str, ok := v.(string); ok {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return fmt.Errorf("%s: %q is not an RFC 3339 date-time", at, str)
			}
		}
	}
	if err := c.validateObject(s, v, at); err != nil {
		return err
	}
	if err := c.validateArray(s, v, at); err != nil {
		return err
	}
	return c.validateCombinators(s, v, at)
}

func (c *Checker) validateObject(s map[string]any, v any, at string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	props := mapOf(s["properties"])
	for _, r := range anySlice(s["required"]) {
		if _, ok := obj[r.(string)]; !ok {
			return fmt.Errorf("%s: property %q is required", at, r)
		}
	}
	extra, hasExtra := s["additionalProperties"]
	for k, e := range obj {
		if ps, ok := props[k]; ok {
			if err := c.validate(ps, e, at+"."+k); err != nil {
				return err
			}
			continue
		}
		switch {
		case hasExtra:
			if err := c.validate(extra, e, at+"."+k); err != nil {
				return err
			}
		case props != nil:
			return fmt.Errorf("%s: property %q is not described (described: %s)", at, k, strings.Join(sortedKeys(props), ", "))
		}
	}
	return nil
}

func (c *Checker) validateArray(s map[string]any, v any, at string) error {
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	if n, ok := number(s["minItems"]); ok && float64(len(arr)) < n {
		return fmt.Errorf("%s: %d items, at least %v", at, len(arr), n)
	}
	if n, ok := number(s["maxItems"]); ok && float64(len(arr)) > n {
		return fmt.Errorf("%s: %d items, at most %v", at, len(arr), n)
	}
	if items, ok := s["items"]; ok {
		for i, e := range arr {
			if err := c.validate(items, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Checker) validateCombinators(s map[string]any, v any, at string) error {
	for _, sub := range anySlice(s["allOf"]) {
		if err := c.validate(sub, v, at); err != nil {
			return err
		}
	}
	if subs := anySlice(s["anyOf"]); subs != nil {
		var errs []error
		for _, sub := range subs {
			err := c.validate(sub, v, at)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err)
		}
		if errs != nil {
			return fmt.Errorf("%s: matches none of anyOf: %w", at, errors.Join(errs...))
		}
	}
	if subs := anySlice(s["oneOf"]); subs != nil {
		var errs []error
		for _, sub := range subs {
			if err := c.validate(sub, v, at); err != nil {
				errs = append(errs, err)
			}
		}
		switch matched := len(subs) - len(errs); {
		case matched == 0:
			return fmt.Errorf("%s: matches none of oneOf: %w", at, errors.Join(errs...))
		case matched > 1:
			return fmt.Errorf("%s: matches %d of oneOf, want exactly one", at, matched)
		}
	}
	return nil
}

// hasType reports whether v is of type t (a name or a list of names).
func hasType(t, v any) bool {
	if list, ok := t.([]any); ok {
		return slices.ContainsFunc(list, func(x any) bool { return hasType(x, v) })
	}
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number":
		_, ok := number(v)
		return ok
	case "integer":
		n, ok := number(v)
		return ok && n == float64(int64(n))
	}
	return false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	}
	return 0, false
}

func equal(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return clip(b)
}

// PathOf is the escaped path of a request URL or a path with a query.
func PathOf(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return target
	}
	return u.EscapedPath()
}
