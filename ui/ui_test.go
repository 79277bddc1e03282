package ui

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/undo"
	"github.com/memwatch/memwatch/versions"
)

// fixture is a state directory with one compaction of a memory file that
// an agent filled with markup and terminal escapes, served by the pages.
type fixture struct {
	root, stateDir string
	db             *state.DB
	rec            state.Record
	srv            *httptest.Server
	client         *http.Client
	undone         []int64 // records UndoOffline was asked to undo
}

const hostile = "<script>alert('memory')</script> \x1b[31mred\x1b[0m \x07 <img src=x onerror=alert(1)>"

func newFixture(t *testing.T, allowUndo bool) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{root: filepath.Join(dir, "agent"), stateDir: filepath.Join(dir, "state")}
	os.MkdirAll(filepath.Join(f.root, "memory"), 0o755)
	before := "# now\n\n## State\n" + hostile + "\n\n# History\n\n## 2026-01-01-1200\n- old entry one\n- old entry two\n"
	after := "# now\n\n## State\n" + hostile + "\n\n# History\n"
	os.WriteFile(filepath.Join(f.root, "memory", "2026-01-02-1200.md"), []byte(before), 0o644)
	os.WriteFile(filepath.Join(f.root, "memory.md"), []byte(after), 0o644)
	p, err := policy.Parse("p.yaml", []byte(fmt.Sprintf("version: 1\nstores:\n  - name: notes\n    layout: now-history\n    paths: [%q]\n    allow_undo: %t\n", f.root, allowUndo)), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.db, err = state.Open(ctx, f.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.db.Close() })
	f.rec = state.Record{Store: "notes", Root: f.root, Rule: "compact", Target: "memory.md", Archive: "memory/2026-01-02-1200.md",
		BeforeSHA: versions.Hash([]byte(before)), BeforeSize: int64(len(before)), AfterSHA: versions.Hash([]byte(after)), AfterSize: int64(len(after)),
		Outcome: state.Done, Reason: "over max_size " + hostile}
	if _, err := f.db.Append(ctx, &f.rec); err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: f.stateDir, Policy: func() *policy.Policy { return p }, DB: f.db, Key: "k3y",
		API: func(context.Context, string, string, any, any) error { return ErrNoDaemon },
		UndoOffline: func(_ context.Context, id int64, _ bool) (undo.Result, error) {
			f.undone = append(f.undone, id)
			return undo.Result{ID: id, Journal: 99}, nil
		}}
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(s.Handler())
	t.Cleanup(f.srv.Close)
	jar, _ := cookiejar.New(nil)
	f.client = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := f.client.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) signIn(t *testing.T) {
	t.Helper()
	if code, _ := f.get(t, "/?key=k3y"); code != http.StatusSeeOther {
		t.Fatalf("sign in with the key: got %d, want a redirect", code)
	}
}

func TestPagesNeedTheKey(t *testing.T) {
	f := newFixture(t, true)
	for _, path := range []string{"/", "/root?root=" + url.QueryEscape(f.root), "/record/1", "/events", "/?key=wrong"} {
		if code, body := f.get(t, path); code != http.StatusUnauthorized || strings.Contains(body, "old entry") {
			t.Errorf("GET %s without the session: got %d, want 401 and nothing of the memory", path, code)
		}
	}
	// The refusal is styled: the pages' stylesheet needs no session.
	if code, body := f.get(t, "/static/style.css"); code != http.StatusOK || !strings.Contains(body, "main {") {
		t.Errorf("GET /static/style.css without the session: got %d, want the stylesheet", code)
	}
	f.signIn(t)
	if code, body := f.get(t, "/"); code != http.StatusOK || !strings.Contains(body, "notes") {
		t.Errorf("overview after signing in: got %d\n%s", code, body)
	}
}

// TestAgentTextIsInert: what an agent wrote into its memory (markup,
// terminal escapes) is shown as text on every page that shows it.
func TestAgentTextIsInert(t *testing.T) {
	f := newFixture(t, true)
	f.signIn(t)
	for _, path := range []string{"/record/1", "/archive?root=" + url.QueryEscape(f.root) + "&path=" + url.QueryEscape(f.rec.Archive), "/root?root=" + url.QueryEscape(f.root)} {
		code, body := f.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		for _, bad := range []string{"<script>alert", "<img", "\x1b", "\x07"} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: the page holds %q as written", path, bad)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;") || !strings.Contains(body, "␛[31m") {
			t.Errorf("GET %s: want the agent's text shown escaped, with ␛ for the escape", path)
		}
	}
	// The record's diff shows what the compaction removed.
	_, body := f.get(t, "/record/1")
	if !strings.Contains(body, `<tr class="del">`) || !strings.Contains(body, "old entry one") {
		t.Errorf("record page: want the removed lines in the diff:\n%s", body)
	}
}

func TestUndoNeedsTheFormsToken(t *testing.T) {
	f := newFixture(t, true)
	f.signIn(t)
	_, page := f.get(t, "/record/1")
	i := strings.Index(page, `name="csrf" value="`)
	if i < 0 {
		t.Fatalf("no undo form:\n%s", page)
	}
	csrf := page[i+len(`name="csrf" value="`):]
	csrf = csrf[:strings.IndexByte(csrf, '"')]
	post := func(form url.Values, origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/record/1/undo", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	cases := []struct {
		name   string
		form   url.Values
		origin string
		code   int
	}{
		{"no token", url.Values{}, "", http.StatusForbidden},
		{"wrong token", url.Values{"csrf": {"00"}}, "", http.StatusForbidden},
		{"another site", url.Values{"csrf": {csrf}}, "https://evil.example", http.StatusForbidden},
		{"the page's form", url.Values{"csrf": {csrf}}, f.srv.URL, http.StatusSeeOther},
	}
	for _, c := range cases {
		if got := post(c.form, c.origin).StatusCode; got != c.code {
			t.Errorf("%s: got %d, want %d", c.name, got, c.code)
		}
	}
	if len(f.undone) != 1 || f.undone[0] != 1 {
		t.Errorf("undone: got %v, want record 1 once (by the page's own form)", f.undone)
	}
}

func TestUndoRefusedWhereTheStoreForbidsIt(t *testing.T) {
	f := newFixture(t, false)
	f.signIn(t)
	_, page := f.get(t, "/record/1")
	if strings.Contains(page, `action="/record/1/undo"`) || !strings.Contains(page, "does not allow undo") {
		t.Errorf("record page of a store without allow_undo: want no undo button and why:\n%s", page)
	}
}

func TestEventsSayWhenTheJournalChanges(t *testing.T) {
	f := newFixture(t, true)
	s, _ := New(Config{StateDir: f.stateDir, Policy: func() *policy.Policy { return nil }, DB: f.db}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		var all string
		for {
			n, err := resp.Body.Read(b)
			all += string(b[:n])
			if strings.Contains(all, "event: change") || err != nil {
				got <- all
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // subscribed
	if _, err := f.db.Append(context.Background(), &state.Record{Store: "notes", Root: f.root, Rule: "compact", Target: "memory.md", Outcome: state.Done}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if !strings.Contains(s, "event: change") {
			t.Errorf("event stream: got %q, want a change", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no change event within 5s of a journal record")
	}
}

func TestVisible(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"\x1b[2Jcleared", "␛[2Jcleared"},
		{"tab\tkept", "tab\tkept"},
		{"cr\rhidden", "cr␍hidden"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{"c1 \u009b csi", "c1 \uFFFD csi"},
	} {
		if got := visible(c.in); got != c.want {
			t.Errorf("visible(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRecordDiffOutlivesTheFile: a compaction record shows its diff after
// the agent wrote the file again (no version kept), from what memwatch
// wrote, kept with the record; and not once the journal let it go.
func TestRecordDiffOutlivesTheFile(t *testing.T) {
	f := newFixture(t, true)
	f.signIn(t)
	after, err := os.ReadFile(filepath.Join(f.root, "memory.md"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.root, "memory.md"), append(after, "- the agent wrote on\n"...), 0o644)
	if _, body := f.get(t, "/record/1"); strings.Contains(body, `<tr class="del">`) {
		t.Fatalf("record page: a diff with nothing of the after side kept:\n%s", body)
	}
	if err := f.db.KeepWritten(context.Background(), f.rec.ID, after); err != nil {
		t.Fatal(err)
	}
	_, body := f.get(t, "/record/1")
	if !strings.Contains(body, `<tr class="del">`) || !strings.Contains(body, "old entry one") || !strings.Contains(body, "kept with this record") {
		t.Errorf("record page after the file changed: want the diff from what memwatch wrote:\n%s", body)
	}
	if err := f.db.DeleteRecords(context.Background(), []int64{f.rec.ID}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.db.Written(context.Background(), f.rec.ID); ok || err != nil {
		t.Errorf("what record %d wrote outlived the record (ok %t, err %v)", f.rec.ID, ok, err)
	}
}

// TestUndoneRecordOffersRedo: a record an undo undid says by which (a
// link), offers no Undo but Redo while the undo holds its rule off the
// file, and a Redo ends the hold.
func TestUndoneRecordOffersRedo(t *testing.T) {
	f := newFixture(t, true)
	f.signIn(t)
	ctx := context.Background()
	undo := state.Record{Store: "notes", Root: f.root, Rule: "undo", Target: "memory.md", Key: rewrite.UndoKey(f.rec.ID), Outcome: state.Done, Reason: "undo of #1"}
	if _, err := f.db.Append(ctx, &undo); err != nil {
		t.Fatal(err)
	}
	if err := f.db.PutHold(ctx, state.Hold{Root: f.root, Target: "memory.md", Rule: "compact", Record: f.rec.ID, Undo: undo.ID, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, page := f.get(t, "/record/1")
	if !strings.Contains(page, fmt.Sprintf(`Undone by <a href="/record/%d">#%d</a>`, undo.ID, undo.ID)) || strings.Contains(page, `id="undo"`) || !strings.Contains(page, `action="/record/1/redo"`) {
		t.Fatalf("record page of an undone change:\n%s\nwant \"Undone by #%d\" (a link), a Redo form and no Undo", page, undo.ID)
	}
	i := strings.Index(page, `name="csrf" value="`)
	csrf := page[i+len(`name="csrf" value="`):]
	csrf = csrf[:strings.IndexByte(csrf, '"')]
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/record/1/redo", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.srv.URL)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "redone=1") {
		t.Fatalf("redo: %d to %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, held, _ := f.db.GetHold(ctx, f.root, "memory.md"); held {
		t.Errorf("the hold stands after Redo")
	}
	_, page = f.get(t, "/record/1?redone=1")
	if strings.Contains(page, `action="/record/1/redo"`) || !strings.Contains(page, "Redone") {
		t.Errorf("record page after Redo:\n%s", page)
	}
}

// TestVersionsPage: a memory file's versions, newest first, each with its
// author, a diff to the one before, and Restore where the store allows it.
func TestVersionsPage(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "agent")
	os.MkdirAll(root, 0o755)
	p, err := policy.Parse("p.yaml", []byte(fmt.Sprintf("version: 1\nstores:\n  - name: notes\n    layout: now-history\n    paths: [%q]\n", root)), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := state.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	vs, err := versions.Open(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	r, err := confine.Open(root, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	agent := func(string) (string, int64) { return versions.ByAgent, 0 }
	for _, text := range []string{"# now\n\n- first fact\n", "# now\n\n- first fact\n- second fact <b>bold</b>\n"} {
		os.WriteFile(filepath.Join(root, "memory.md"), []byte(text), 0o644)
		if _, _, _, err := vs.Capture(ctx, r, "memory.md", agent); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Config{StateDir: filepath.Join(dir, "state"), Policy: func() *policy.Policy { return p }, DB: db, Versions: vs, Key: "k3y",
		API: func(context.Context, string, string, any, any) error { return ErrNoDaemon }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c.Get(srv.URL + "/?key=k3y")
	resp, err := c.Get(srv.URL + "/versions?root=" + url.QueryEscape(root) + "&path=memory.md")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "memory.md: versions") || !strings.Contains(page, ">v2<") || !strings.Contains(page, ">v1<") {
		t.Fatalf("versions page: %d\n%s", resp.StatusCode, page)
	}
	if !strings.Contains(page, `<tr class="add">`) || !strings.Contains(page, "second fact &lt;b&gt;bold&lt;/b&gt;") {
		t.Errorf("versions page: want v2's added line in the diff, escaped:\n%s", page)
	}
	if strings.Count(page, `class="restore"`) != 2 {
		t.Errorf("versions page: want a Restore for each version (the store allows undo)")
	}
}
