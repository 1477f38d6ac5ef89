package ops

import (
	"embed"
	"io/fs"
	"net/http"
)

// web holds the operators' page: plain HTML, CSS and JavaScript, no build step.
//
//go:embed web
var web embed.FS

// registerPage serves the page at / and its assets under /ui/.
func registerPage(mux *http.ServeMux) {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	mux.Handle("GET /{$}", pageHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	})))
	mux.Handle("GET /ui/", pageHeaders(http.StripPrefix("/ui/", files)))
}

// pageHeaders keeps the page to its own scripts and styles, out of frames, and fresh.
func pageHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}
