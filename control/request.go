package control

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrUsage marks a request's own mistake (an unknown scope or store, a
// bad number): the daemon answers 400, and the CLI exits 2, as grep does.
var ErrUsage = errors.New("usage")

// UsageError is a request's mistake, said to the user.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }
func (e *UsageError) Unwrap() error { return ErrUsage }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Recall's bounds: what a request may ask. One answer holds at most
// MaxLimit results in at most MaxAnswer bytes; a client pages past them
// (Offset, RecallResponse.Next) up to MaxResults deep. What one request
// costs the daemon is then bounded whatever it asks: a search ranks at most
// MaxResults candidates and decodes only the page it returns.
const (
	DefaultLimit = 5 // session-detail's
	MaxLimit     = 1000
	MaxResults   = 10_000
	MaxContext   = 50 // turns around each result
	MaxQuery     = 4 << 10
	MaxAnswer    = 4 << 20
)

// Sorts of a recall.
const (
	SortRelevance = "relevance"
	SortNewest    = "newest"
)

// RecallRequest is a recall as the CLI, the MCP tools and the pages ask
// it (GET /v1/recall).
type RecallRequest struct {
	Query string
	// Dir is a directory to search (recall --dir), absolute; Cwd the
	// caller's working directory, which says what "here" is when the
	// request names nothing (the root it is in, a project's memory, or
	// every root the caller reaches).
	Dir, Cwd string
	Store    string
	All      bool
	Host     string
	// Scope lists the sources to search (detail, messages, history, ...);
	// none: all.
	Scope []string
	Limit int
	// Offset skips the first Offset results (the next page: the previous
	// answer's Next); Offset+Limit is at most MaxResults.
	Offset  int
	Sort    string
	Context int // turns before and after each result
	Explain bool
}

// Values encodes the request as a query string.
func (r RecallRequest) Values() url.Values {
	v := url.Values{"q": {r.Query}}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("dir", r.Dir)
	set("cwd", r.Cwd)
	set("store", r.Store)
	set("host", r.Host)
	set("sort", r.Sort)
	if r.All {
		v.Set("all", "1")
	}
	if len(r.Scope) > 0 {
		v.Set("scope", strings.Join(r.Scope, ","))
	}
	if r.Limit > 0 {
		v.Set("limit", strconv.Itoa(r.Limit))
	}
	if r.Offset > 0 {
		v.Set("offset", strconv.Itoa(r.Offset))
	}
	if r.Context > 0 {
		v.Set("context", strconv.Itoa(r.Context))
	}
	if r.Explain {
		v.Set("explain", "1")
	}
	return v
}

// ParseRecallRequest reads a request from a query string, every value
// checked and bounded (a UsageError names the first that is not right).
func ParseRecallRequest(v url.Values) (RecallRequest, error) {
	r := RecallRequest{Query: v.Get("q"), Dir: v.Get("dir"), Cwd: v.Get("cwd"), Store: v.Get("store"), Host: v.Get("host"),
		Sort: v.Get("sort"), All: v.Get("all") == "1", Explain: v.Get("explain") == "1", Limit: DefaultLimit}
	// The old name of dir (a client before 0.x sends root=).
	if r.Dir == "" {
		r.Dir = v.Get("root")
	}
	if strings.TrimSpace(r.Query) == "" {
		return r, Usagef("give something to search for")
	}
	if len(r.Query) > MaxQuery {
		return r, Usagef("the query is %d bytes; at most %d", len(r.Query), MaxQuery)
	}
	for _, d := range []struct{ name, p string }{{"dir", r.Dir}, {"cwd", r.Cwd}} {
		if d.p != "" && (!filepath.IsAbs(d.p) || strings.ContainsRune(d.p, 0)) {
			return r, Usagef("%s must be an absolute path", d.name)
		}
	}
	num := func(name string, min, max int, out *int) error {
		s := v.Get(name)
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < min || n > max {
			return Usagef("%s must be a number from %d to %d, not %q", name, min, max, Clip(s))
		}
		*out = n
		return nil
	}
	// A limit past one answer's is served a page at a time: this one, and
	// next says where the rest starts.
	if err := num("limit", 1, math.MaxInt32, &r.Limit); err != nil {
		return r, err
	}
	r.Limit = min(r.Limit, MaxLimit)
	if err := num("offset", 0, MaxResults-r.Limit, &r.Offset); err != nil {
		return r, err
	}
	if err := num("context", 0, MaxContext, &r.Context); err != nil {
		return r, err
	}
	switch r.Sort {
	case "", SortRelevance, SortNewest:
	default:
		return r, Usagef("sort must be %s or %s, not %q", SortRelevance, SortNewest, Clip(r.Sort))
	}
	if s := v.Get("scope"); s != "" && s != "all" {
		for _, l := range strings.Split(s, ",") {
			if l = strings.TrimSpace(l); l != "" && l != "all" {
				r.Scope = append(r.Scope, l)
			}
		}
	}
	return r, nil
}

// Clip bounds what an error repeats of a value a client sent: its first
// 64 bytes.
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
