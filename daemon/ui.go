package daemon

import (
	"embed"
	"errors"
	"net/http"
	"strconv"

	"github.com/wasmhost/wasmhost/reconcile"
)

// uiFiles is the operator page (GET /ui/): a shell of HTML, script and
// style that carries no data. The script asks for the admin token (or
// reads it from the URL's fragment, which is never sent) and reads
// /v1/state and the tools endpoint with it as a bearer token.
//
//go:embed ui/index.html ui/app.js ui/app.css
var uiFiles embed.FS

// uiCSP is the page's Content-Security-Policy: its own script and style
// only, requests to the daemon only, no inline code, no frames, no forms
// sent anywhere, and Trusted Types required, so that no string reaches an
// HTML sink (the page builds every node with textContent: tool names and
// client names come from upstreams and clients).
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

// uiAssets maps each path of the page to its file and content type.
var uiAssets = map[string][2]string{
	"/ui/":        {"ui/index.html", "text/html; charset=utf-8"},
	"/ui/app.js":  {"ui/app.js", "text/javascript; charset=utf-8"},
	"/ui/app.css": {"ui/app.css", "text/css; charset=utf-8"},
}

// uiRoutes adds the operator page and its data endpoint to mux.
func (d *Daemon) uiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	for path, a := range uiAssets {
		body, err := uiFiles.ReadFile(a[0])
		if err != nil {
			panic("daemon: embedded " + a[0] + ": " + err.Error())
		}
		pattern := "GET " + path
		if path == "/ui/" {
			pattern += "{$}" // the page, not every path under it
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", a[1])
			h.Set("Content-Security-Policy", uiCSP)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("Cache-Control", "no-cache")
			_, _ = w.Write(body)
		})
	}
	mux.Handle("GET /v1/sessions/{session}/servers/{server}/tools", d.adminOnly(http.HandlerFunc(d.serveBindingTools)))
}

// serveBindingTools answers GET /v1/sessions/{session}/servers/{server}/tools:
// the tools that session's view of server shows, with their flags.
func (d *Daemon) serveBindingTools(w http.ResponseWriter, r *http.Request) {
	sessionName, server := r.PathValue("session"), r.PathValue("server")
	tools, err := d.rec.Tools(sessionName, server)
	switch {
	case errors.Is(err, reconcile.ErrUnknownSession):
		d.writeJSON(w, http.StatusNotFound, errorBody{Error: "no session " + strconv.Quote(sessionName)})
	case errors.Is(err, reconcile.ErrNotBound):
		d.writeJSON(w, http.StatusNotFound, errorBody{Error: "session " + strconv.Quote(sessionName) + " has no server " + strconv.Quote(server)})
	case err != nil:
		d.writeJSON(w, http.StatusInternalServerError, errorBody{Error: err.Error()})
	default:
		d.writeJSON(w, http.StatusOK, map[string]any{"session": sessionName, "server": server, "tools": tools})
	}
}
