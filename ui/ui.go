// Package ui serves the review pages: what memwatch did to the agents'
// memory, and what the agents did to it, to see, search and undo in a
// browser. The daemon serves them under /ui/ on its control API when the
// policy enables them (ui: {enabled: true}); memwatch ui serves the same
// pages on a loopback port of its own, whether or not the daemon runs.
//
// What the pages promise:
//   - They show only what their caller reaches, by the control API's rules
//     (access.CallerOf: a socket peer's own roots, a token's scope), and
//     read nothing else: roots are opened as their store opens them (as
//     the owner, confined), archives only inside their root.
//   - They change nothing but through Undo: a POST that carries the page's
//     CSRF token and comes from the page's own origin, refused where the
//     store's allow_undo is off; the daemon runs it in the root's job slot
//     (with no daemon, it runs under the state lock as memwatch undo does).
//   - Agent-written text is untrusted input: every byte goes through
//     html/template's escaping, control characters (terminal escapes) are
//     shown as visible symbols, and the Content-Security-Policy lets the
//     page run its own embedded script and style only, so even an escaping
//     mistake runs nothing. Nothing is fetched from another host.
//   - Live without polling: one goroutine watches the state directory's
//     journal and versions databases (fsnotify) and tells every open page
//     (server-sent events) when they change; the page then fetches its own
//     content again. Without JavaScript every page still reads whole.
//   - Bounded: lists are paged, a diff or a file shows at most a page of
//     lines at a time, and a search has a limit.
package ui

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
	"github.com/memwatch/memwatch/versions"
)

// ErrNoDaemon is what Config.API returns when no daemon answers.
var ErrNoDaemon = errors.New("the memwatch daemon is not running")

// Config is what the pages read and whom they ask.
type Config struct {
	// StateDir is the daemon's state directory: its journal, versions,
	// spool and recall index; the pages watch it for changes.
	StateDir string
	// Policy is the policy in force (the daemon's changes on reload).
	Policy func() *policy.Policy
	// DB is the journal; Versions and Spool may be nil (none kept yet).
	DB       *state.DB
	Versions *versions.Store
	Spool    *spool.Spool
	// API sends a request to the running daemon's control API as the
	// page's caller and decodes its JSON answer into out: the daemon's own
	// handler in process (its /ui/), or its socket (memwatch ui). It
	// returns ErrNoDaemon when none answers; nil means none ever does.
	API func(ctx context.Context, method, path string, body, out any) error
	// UndoOffline undoes a journal record when no daemon runs (memwatch
	// ui: under the state lock, as memwatch undo does); nil refuses.
	UndoOffline func(ctx context.Context, id int64, force bool) (undo.Result, error)
	// Prefix is where the pages are mounted: "/ui/" on the daemon, "/"
	// for memwatch ui. It starts and ends with a slash.
	Prefix string
	// Key, when set, is what a browser presents once (?key=K in the
	// address memwatch ui prints) to get its session cookie: memwatch ui's
	// listener has no other authentication. Empty on the daemon, whose
	// listeners authenticate every request.
	Key string
	// Now is the clock (tests set it); nil means time.Now.
	Now func() time.Time
}

// Server serves the pages. New builds it, Run watches the state directory
// for the live updates until its context ends, Handler serves requests.
type Server struct {
	cfg    Config
	log    *slog.Logger
	tmpl   *template.Template
	secret []byte // signs CSRF tokens; new each run
	hub    *hub
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// sessionCookie is memwatch ui's session cookie (Config.Key).
const sessionCookie = "memwatch_ui"

// New builds the pages' server.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.DB == nil || cfg.Policy == nil {
		return nil, errors.New("ui: a journal and a policy are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/"
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("ui: prefix %q must start and end with /", cfg.Prefix)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: log, secret: make([]byte, 32), hub: newHub(cfg.StateDir, log)}
	if _, err := rand.Read(s.secret); err != nil {
		return nil, fmt.Errorf("ui: make a CSRF key: %w", err)
	}
	t, err := template.New("").Funcs(s.funcs()).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parse templates: %w", err)
	}
	s.tmpl = t
	return s, nil
}

// Run tells open pages about changes to the journal and the versions
// until ctx ends; it returns once its goroutines have.
func (s *Server) Run(ctx context.Context) error { return s.hub.run(ctx) }

// Handler serves the pages under the prefix.
func (s *Server) Handler() http.Handler {
	p := s.cfg.Prefix
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET "+p+"static/", http.StripPrefix(p+"static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+p+"{$}", s.page(s.overview))
	mux.HandleFunc("GET "+p+"store", s.page(s.storePage))
	mux.HandleFunc("GET "+p+"root", s.page(s.timeline))
	mux.HandleFunc("GET "+p+"record/{id}", s.page(s.record))
	mux.HandleFunc("POST "+p+"record/{id}/undo", s.guard(s.undo))
	mux.HandleFunc("POST "+p+"record/{id}/redo", s.guard(s.redo))
	mux.HandleFunc("GET "+p+"versions", s.page(s.versionsPage))
	mux.HandleFunc("POST "+p+"versions/restore", s.guard(s.restoreVersion))
	mux.HandleFunc("GET "+p+"search", s.page(s.search))
	mux.HandleFunc("GET "+p+"show", s.page(s.show))
	mux.HandleFunc("GET "+p+"archive", s.page(s.archive))
	mux.HandleFunc("GET "+p+"events", s.guard(s.events))
	mux.HandleFunc("GET "+p+"login", s.loginForm)
	mux.HandleFunc("POST "+p+"login", s.login)
	return s.secure(mux)
}

// secure sets the headers every answer carries and, for memwatch ui,
// checks the session (Config.Key).
func (s *Server) secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin") // same-origin forms send their Origin (with no-referrer, Chromium sends "null")
		hd.Set("Cache-Control", "no-store")
		// The pages' own style and script hold no memory: served to a
		// browser without a session, so the page that refuses is styled.
		static := r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, s.cfg.Prefix+"static/")
		if s.cfg.Key != "" && !static {
			if k := r.URL.Query().Get("key"); k != "" {
				if subtle.ConstantTimeCompare([]byte(k), []byte(s.cfg.Key)) != 1 {
					s.fail(w, r, http.StatusUnauthorized, errors.New("wrong key: open the address memwatch ui printed"))
					return
				}
				http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.sessionValue(), Path: s.cfg.Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode})
				q := r.URL.Query()
				q.Del("key")
				u := *r.URL
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.String(), http.StatusSeeOther)
				return
			}
			ck, err := r.Cookie(sessionCookie)
			if err != nil || !hmac.Equal([]byte(ck.Value), []byte(s.sessionValue())) {
				s.fail(w, r, http.StatusUnauthorized, errors.New("no session: open the address memwatch ui printed (it holds the key)"))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// sessionValue is memwatch ui's session cookie: derived from the key, so
// the key itself never sits in a cookie.
func (s *Server) sessionValue() string {
	m := hmac.New(sha256.New, []byte(s.cfg.Key))
	m.Write([]byte("session"))
	return hex.EncodeToString(m.Sum(nil))
}

// csrf is the token a page's forms carry: bound to the caller, signed
// with this run's secret.
func (s *Server) csrf(c *access.Caller) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("csrf\x00" + c.Name))
	return hex.EncodeToString(m.Sum(nil))
}

// allowed reports whether the caller may see pages at all.
func allowed(c *access.Caller) bool { return c.Has(policy.RightRead) }

// guard checks the caller before a handler that is not a page.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !allowed(access.CallerOf(r.Context())) {
			s.fail(w, r, http.StatusForbidden, errors.New("this caller may not read memwatch's state (it holds no read right)"))
			return
		}
		h(w, r)
	}
}

// view is what a page handler gives back: the template and its data.
type view struct {
	Template string
	Title    string
	Data     any
}

// page wraps a page handler: the caller check, the layout around the
// template, and the fragment the live update fetches.
func (s *Server) page(h func(r *http.Request) (view, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := access.CallerOf(r.Context())
		if !allowed(c) {
			if s.cfg.Key == "" {
				// The daemon's pages: a browser that proved nothing signs in.
				http.Redirect(w, r, s.cfg.Prefix+"login", http.StatusSeeOther)
				return
			}
			s.fail(w, r, http.StatusForbidden, errors.New("this caller may not read memwatch's state (it holds no read right)"))
			return
		}
		v, err := h(r)
		if err != nil {
			code := http.StatusInternalServerError
			var he httpError
			if errors.As(err, &he) {
				code = he.code
			}
			s.fail(w, r, code, err)
			return
		}
		s.render(w, r, http.StatusOK, v)
	}
}

// httpError is an error with the status it answers.
type httpError struct {
	code int
	err  error
}

func (e httpError) Error() string { return e.err.Error() }
func (e httpError) Unwrap() error { return e.err }

func notFound(format string, args ...any) error {
	return httpError{http.StatusNotFound, fmt.Errorf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return httpError{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

// layoutData is what the layout template reads around a page.
type layoutData struct {
	Prefix   string
	Title    string
	Template string
	Data     any
	CSRF     string
	Caller   string
	Fragment bool
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, v view) {
	c := access.CallerOf(r.Context())
	d := layoutData{Prefix: s.cfg.Prefix, Title: v.Title, Template: v.Template, Data: v.Data, CSRF: s.csrf(c), Caller: c.Name,
		Fragment: r.Header.Get("X-Memwatch-Fragment") == "1"}
	var b strings.Builder
	name := "layout"
	if d.Fragment {
		name = "content"
	}
	if err := s.tmpl.ExecuteTemplate(&b, name, d); err != nil {
		s.log.Error("rendering a page failed", "page", v.Template, "err", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// fail answers an error as a page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	s.render(w, r, code, view{Template: "error", Title: http.StatusText(code), Data: struct {
		Code    int
		Message string
	}{code, err.Error()}})
}

// loginForm asks for a token (the daemon's TCP listener: its cookie).
func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, view{Template: "login", Title: "Sign in", Data: struct{ Failed bool }{r.URL.Query().Get("failed") != ""}})
}

// login keeps the token a person pasted in the cookie the daemon's
// listener reads on /ui/ (access.UITokenCookie); the daemon, not this
// handler, decides what it is worth at the next request.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.fail(w, r, http.StatusForbidden, errors.New("a sign-in from another site is refused"))
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" || len(tok) > 512 {
		http.Redirect(w, r, s.cfg.Prefix+"login?failed=1", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: access.UITokenCookie, Value: tok, Path: s.cfg.Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, s.cfg.Prefix, http.StatusSeeOther)
}

// sameOrigin reports whether a state-changing request comes from the
// pages themselves: browsers say where a request comes from in
// Sec-Fetch-Site or Origin; a request that says neither is not a
// browser's cross-site form.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// funcs are the templates' helpers.
func (s *Server) funcs() template.FuncMap {
	return template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.Local().Format("2006-01-02 15:04:05")
		},
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			return humanize.RelTime(t, s.cfg.Now(), "ago", "from now")
		},
		"bytes": func(n int64) string {
			if n < 0 {
				return "deleted"
			}
			return humanize.IBytes(uint64(n))
		},
		"comma": func(n int64) string { return humanize.Comma(n) },
		"list":  func(xs ...string) []string { return xs },
		// heading marks a markdown heading line of a diff.
		"heading": func(s string) bool { return strings.HasPrefix(s, "#") },
		"vis":     visible,
		"base":    filepath.Base,
		"dur": func(d time.Duration) string {
			return d.Round(time.Microsecond * 10).String()
		},
		"sub": func(a, b int) int { return a - b },
	}
}

// InProcess is Config.API for the daemon's own pages: each request goes
// to the control API's handler in this process, with the context (and so
// the caller) of the page's request.
func InProcess(h http.Handler) func(ctx context.Context, method, path string, body, out any) error {
	return func(ctx context.Context, method, path string, body, out any) error {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, path, rd)
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := &recorder{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, req)
		if rec.code >= 300 {
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(rec.body.Bytes(), &e) != nil || e.Error == "" {
				e.Error = http.StatusText(rec.code)
			}
			return errors.New(e.Error)
		}
		if out == nil {
			return nil
		}
		return json.Unmarshal(rec.body.Bytes(), out)
	}
}

// recorder keeps an in-process answer.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }
