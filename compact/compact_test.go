package compact

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

const sentinelKey = "sk-SENTINEL-7f3a9c-never-log-me"

func newClient(t *testing.T, srv *llmtest.Server, mod func(*policy.Endpoint)) (*Client, *bytes.Buffer) {
	t.Helper()
	t.Setenv("MEMWATCH_TEST_KEY", sentinelKey)
	db, err := state.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ep := &policy.Endpoint{Name: "default", BaseURL: srv.BaseURL(), Model: "test-model", APIKeyEnv: "MEMWATCH_TEST_KEY",
		Timeout: 2 * time.Second, MaxConcurrency: 2, MaxInputTokens: 8000, DailyTokenBudget: 100000,
		Headers: map[string]string{"X-Team": "memwatch"}}
	if mod != nil {
		mod(ep)
	}
	var logs bytes.Buffer
	c, err := NewClient(ep, db, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c.doer.base = 10 * time.Millisecond
	return c, &logs
}

func TestCompleteSendsKeyHeadersAndRecordsTokens(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"a":"b"}`, Tokens: 321})
	c, _ := newClient(t, srv, nil)
	r, err := c.Complete(context.Background(), Prompt{System: "s", User: "u", JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != `{"a":"b"}` || r.Tokens != 321 {
		t.Errorf("reply = %+v", r)
	}
	h := srv.Headers()[0]
	if got := h.Get("Authorization"); got != "Bearer "+sentinelKey {
		t.Errorf("Authorization header not sent")
	}
	if got := h.Get("X-Team"); got != "memwatch" {
		t.Errorf("extra header = %q", got)
	}
	if req := srv.Requests()[0]; req.ResponseFormat == nil || req.Model != "test-model" {
		t.Errorf("request = %+v; want json_object format and the model", req)
	}
	if used, _ := c.Used(context.Background()); used != 321 {
		t.Errorf("used = %d, want 321", used)
	}
}

func TestRetries(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Step{Status: 429, RetryAfter: "1"},
		llmtest.Step{Status: 503},
		llmtest.Step{Delay: 3 * time.Second}, // past the 2s timeout
		llmtest.Step{Content: "ok"},
	)
	c, _ := newClient(t, srv, nil)
	t0 := time.Now()
	r, err := c.Complete(context.Background(), Prompt{User: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "ok" || srv.Calls() != 4 {
		t.Errorf("reply %q after %d calls, want ok after 4", r.Text, srv.Calls())
	}
	// Retry-After: 1 plus the 2s timeout must both have been waited for.
	if el := time.Since(t0); el < 3*time.Second {
		t.Errorf("took %v; Retry-After or the timeout was not honoured", el)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Status: 500})
	c, logs := newClient(t, srv, nil)
	_, err := c.Complete(context.Background(), Prompt{User: "x"})
	if err == nil {
		t.Fatal("want an error after persistent 500s")
	}
	if srv.Calls() != 4 {
		t.Errorf("calls = %d, want 4", srv.Calls())
	}
	for _, s := range []string{err.Error(), logs.String()} {
		if strings.Contains(s, sentinelKey) || strings.Contains(s, "SENTINEL") {
			t.Errorf("API key leaked: %s", s)
		}
	}
}

func TestBudget(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: "ok", Tokens: 900})
	c, _ := newClient(t, srv, func(ep *policy.Endpoint) { ep.DailyTokenBudget = 1850; ep.MaxOutputTokens = 100 })
	ctx := context.Background()
	if _, err := c.Complete(ctx, Prompt{User: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, Prompt{User: "x"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Complete(ctx, Prompt{User: "x"})
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("third call: %v, want ErrBudget", err)
	}
	if srv.Calls() != 2 {
		t.Errorf("calls = %d; a refused call must not reach the endpoint", srv.Calls())
	}
	// The next day the budget is fresh.
	c.Now = func() time.Time { return time.Now().Add(24 * time.Hour) }
	if _, err := c.Complete(ctx, Prompt{User: "x"}); err != nil {
		t.Errorf("next day: %v", err)
	}
}

func TestCancelHangingCall(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Hang: true})
	c, _ := newClient(t, srv, func(ep *policy.Endpoint) { ep.Timeout = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	t0 := time.Now()
	_, err := c.Complete(ctx, Prompt{User: "x"})
	if err == nil || time.Since(t0) > 2*time.Second {
		t.Errorf("cancelled call returned %v after %v", err, time.Since(t0))
	}
}

func TestTruncatedOutputIsAnError(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"history_entry": "cut`, FinishReason: "length"})
	c, _ := newClient(t, srv, nil)
	r, err := c.Complete(context.Background(), Prompt{User: "x"})
	if err == nil || !strings.Contains(err.Error(), "truncated") || r.Tokens == 0 {
		t.Errorf("truncated output: %+v, %v", r, err)
	}
}

func TestKeyFilePermissions(t *testing.T) {
	f := t.TempDir() + "/key"
	os.WriteFile(f, []byte(sentinelKey), 0o644)
	_, err := NewClient(&policy.Endpoint{Name: "x", APIKeyFile: f}, nil, slog.Default())
	if err == nil || strings.Contains(err.Error(), sentinelKey) {
		t.Errorf("world-readable key file: %v", err)
	}
}

// TestNoRedirects: an endpoint that redirects gets neither the key nor
// the memory text a second time, and the error says why.
func TestNoRedirects(t *testing.T) {
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
		w.WriteHeader(500)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	srv := llmtest.New(t, llmtest.Step{Content: "ok"})
	c, _ := newClient(t, srv, func(ep *policy.Endpoint) { ep.BaseURL = redirecting.URL })
	_, err := c.Complete(context.Background(), Prompt{User: "the memory text"})
	if err == nil || !strings.Contains(err.Error(), "does not follow redirects") || strings.Contains(err.Error(), sentinelKey) {
		t.Errorf("Complete = %v, want a refused redirect", err)
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

// TestKeyFileOwnerAndLinks: a key file must be memwatch's user's, not a
// symbolic link, and private.
func TestKeyFileOwnerAndLinks(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "key")
	os.WriteFile(f, []byte(sentinelKey), 0o600)
	if _, err := NewClient(&policy.Endpoint{Name: "x", APIKeyFile: f, MaxConcurrency: 1}, nil, slog.Default()); err != nil {
		t.Fatalf("a private key file of memwatch's user: %v", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(f, link)
	if _, err := NewClient(&policy.Endpoint{Name: "x", APIKeyFile: link}, nil, slog.Default()); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symlinked key file: %v", err)
	}
	if os.Geteuid() == 0 {
		os.Chown(f, 4244, 4244)
		if _, err := NewClient(&policy.Endpoint{Name: "x", APIKeyFile: f}, nil, slog.Default()); err == nil || !strings.Contains(err.Error(), "belongs to uid 4244") {
			t.Errorf("a key file another user owns: %v", err)
		}
	}
}

func TestParseFields(t *testing.T) {
	tests := []struct {
		name, text string
		tier       int
		entry      string
	}{
		{"plain", `{"history_entry":"[2026-02-27 14:30] did x","memory_update":"# Facts"}`, 1, "[2026-02-27 14:30] did x"},
		{"fenced", "```json\n{\"history_entry\": \"a\", \"memory_update\": \"b\"}\n```", 1, "a"},
		{"prose around", "Sure! Here is the JSON:\n{\"history_entry\": \"with {braces} inside\", \"memory_update\": \"m\"}\nHope that helps.", 2, "with {braces} inside"},
		{"broken json", `{"history_entry": "line one\nline two", "memory_update": "unterminated`, 3, "line one\nline two"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, tier, err := ParseFields(tt.text, "history_entry", "memory_update")
			if err != nil {
				t.Fatal(err)
			}
			if tier != tt.tier || m["history_entry"] != tt.entry {
				t.Errorf("tier %d entry %q, want tier %d entry %q", tier, m["history_entry"], tt.tier, tt.entry)
			}
		})
	}
	if _, _, err := ParseFields("I cannot help with that.", "history_entry"); !errors.Is(err, ErrUnparseable) {
		t.Errorf("prose: %v, want ErrUnparseable", err)
	}
}

func FuzzParseFields(f *testing.F) {
	f.Add(`{"a":"b"}`)
	f.Add("```\n{\"a\": 1}\n```")
	f.Add(`x {"a": "\u00e9\"}"} y`)
	f.Fuzz(func(t *testing.T, s string) {
		m, tier, err := ParseFields(s, "a", "b")
		if err == nil && (tier < 1 || tier > 3 || m == nil) {
			t.Errorf("tier %d map %v", tier, m)
		}
	})
}

func TestGuards(t *testing.T) {
	var rej *rewrite.Rejected
	if err := CheckText([]byte("ok\ttab\nline")); err != nil {
		t.Errorf("clean text rejected: %v", err)
	}
	for _, bad := range [][]byte{[]byte("a\x00b"), []byte("\xff\xfe"), []byte("esc\x1b[31m")} {
		if err := CheckText(bad); !errors.As(err, &rej) {
			t.Errorf("CheckText(%q) = %v, want a rejection", bad, err)
		}
	}
	if err := CheckShrinks([]byte("12345"), []byte("123456"), 0); !errors.As(err, &rej) {
		t.Errorf("growing output accepted")
	}
	if err := CheckShrinks([]byte("1234567890"), []byte("12345"), 4); !errors.As(err, &rej) {
		t.Errorf("output over the limit accepted")
	}
	if err := CheckShrinks([]byte("1234567890"), []byte("123"), 4); err != nil {
		t.Errorf("good output rejected: %v", err)
	}
	before := []string{"State", "AirPods", "MacBook", "Patterns"}
	if err := CheckLoss("sections", before, []string{"State", "AirPods", "MacBook"}, 0.25); err != nil {
		t.Errorf("25%% loss rejected at max_loss 25%%: %v", err)
	}
	if err := CheckLoss("sections", before, []string{"State", "Patterns"}, 0.25); !errors.As(err, &rej) || !strings.Contains(rej.Reason, "2 of 4") {
		t.Errorf("50%% loss: %v", err)
	}
}

// TestFailuresAreLoggedOncePerBurst: a redirecting, a dead and a 401
// endpoint each give one WARN naming the endpoint and the cause at the
// first failure, not a line per call; every failure is counted (OnFail);
// the endpoint answering again ends the burst with the count.
func TestFailuresAreLoggedOncePerBurst(t *testing.T) {
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"invalid api key"}}`, http.StatusUnauthorized)
	}))
	defer unauthorized.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for _, tt := range []struct{ name, url, cause string }{
		{"redirect", redirecting.URL, "redirect"},
		{"dead", deadURL, "unreachable"},
		{"401", unauthorized.URL, "unauthorized"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Step{Content: "ok"})
			c, logs := newClient(t, srv, func(ep *policy.Endpoint) { ep.BaseURL = tt.url })
			counted := map[string]int{}
			c.OnFail = func(ep, cause string) { counted[ep+" "+cause]++ }
			for range 20 {
				if _, err := c.Complete(context.Background(), Prompt{User: "the memory text"}); err == nil {
					t.Fatal("Complete succeeded")
				}
			}
			warns := strings.Count(logs.String(), "level=WARN")
			if warns != 1 || !strings.Contains(logs.String(), "endpoint=default") || !strings.Contains(logs.String(), "cause="+tt.cause) {
				t.Errorf("%d WARN lines, want 1 naming the endpoint and cause %s:\n%s", warns, tt.cause, logs)
			}
			if strings.Contains(logs.String(), sentinelKey) {
				t.Error("the API key is in the log")
			}
			if got := counted["default "+tt.cause]; got != 20 {
				t.Errorf("OnFail counted %v, want 20 %s", counted, tt.cause)
			}
			// Answering again ends the burst, with the count.
			c.api = newClientFor(t, srv.BaseURL()).api
			if _, err := c.Complete(context.Background(), Prompt{User: "x"}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), "llm endpoint answers again") || !strings.Contains(logs.String(), "failures_not_logged=19") {
				t.Errorf("no end of the burst with its count:\n%s", logs)
			}
		})
	}
}

// newClientFor is a client of a working endpoint at url.
func newClientFor(t *testing.T, url string) *Client {
	t.Helper()
	c, err := NewClient(&policy.Endpoint{Name: "default", BaseURL: url, Model: "m", Timeout: 2 * time.Second, MaxConcurrency: 1, MaxInputTokens: 8000, DailyTokenBudget: 100000}, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
