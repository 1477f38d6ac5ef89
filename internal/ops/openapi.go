package ops

import (
	"bytes"
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of the API. It is written by hand, next to
// the handlers; the tests hold it to the router's routes and the handlers' answers.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI 3.1 description of the operators' API, served at
// GET /api/openapi.json.
func OpenAPIDocument() []byte { return bytes.Clone(openAPIDocument) }

// serveOpenAPI answers the description without authentication: it holds no data, only what
// the public source says, and client generators and API explorers fetch it without a token.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIDocument)
}

// routeMux is the API's ServeMux: it keeps every pattern registered on it, the API's route
// list, which the description must match route for route.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

// Handle registers an API route.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers an API route.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// fallback registers the answer to paths no route takes: not a route of its own.
func (m *routeMux) fallback(pattern string, h http.HandlerFunc) {
	m.ServeMux.Handle(pattern, h)
}
