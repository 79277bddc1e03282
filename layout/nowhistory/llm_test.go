package nowhistory

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

func llmEnv(t *testing.T, baseURL, model string, maxInput int) *layout.Env {
	t.Helper()
	db, err := state.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	ep := &policy.Endpoint{Name: "default", BaseURL: baseURL, Model: model, Timeout: 2 * time.Minute, MaxConcurrency: 1,
		MaxInputTokens: maxInput, DailyTokenBudget: 1_000_000, APIKeyEnv: os.Getenv("MEMWATCH_TEST_LLM_KEY_ENV")}
	c, err := compact.NewClient(ep, db, log)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := policy.Parse("p.yaml", []byte("version: 1\nstores:\n  - name: apps\n    layout: now-history\n    paths: [\"/x/*\"]\n    max_size: 2KiB\n    keep_history: 3\n"), []policy.LayoutSpec{{Name: "now-history", NewOptions: Layout{}.NewOptions}})
	return &layout.Env{Store: p.Stores[0], Rewriter: rewrite.New(db, log), DB: db, LLM: c, Log: log, Now: time.Now}
}

// Over max_input_tokens, old History entries are dropped whole before the
// call: the prompt holds the newest keep_history entries and all of # now.
func TestLLMInputOverContextIsTrimmedByWholeEntries(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: "# now\n"})
	old, _ := os.ReadFile(filepath.Join("testdata", "large", "memory.md"))
	env := llmEnv(t, srv.BaseURL(), "fake", 700)
	compactLLM(context.Background(), env, old, 3, 2048)
	if srv.Calls() != 1 {
		t.Fatalf("calls = %d", srv.Calls())
	}
	prompt := srv.Requests()[0].Messages[1].Content
	for _, want := range []string{"routine check 0", "routine check 2", "## Errors"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if strings.Contains(prompt, "routine check 3") {
		t.Error("prompt holds History entries beyond keep_history although the input was over max_input_tokens")
	}
	// Far over: the call is refused and the caller falls back.
	env = llmEnv(t, srv.BaseURL(), "fake", 256)
	if _, _, err := compactLLM(context.Background(), env, old, 3, 2048); err == nil || !strings.Contains(err.Error(), "exceeds max_input_tokens") {
		t.Errorf("far over the context: %v", err)
	}
}

// TestRealEndpoint runs one compaction against a real OpenAI-compatible
// endpoint when MEMWATCH_TEST_LLM_URL and MEMWATCH_TEST_LLM_MODEL are set
// (MEMWATCH_TEST_LLM_KEY_ENV names the variable holding a key, if any).
func TestRealEndpoint(t *testing.T) {
	url, model := os.Getenv("MEMWATCH_TEST_LLM_URL"), os.Getenv("MEMWATCH_TEST_LLM_MODEL")
	if url == "" || model == "" {
		t.Skip("set MEMWATCH_TEST_LLM_URL and MEMWATCH_TEST_LLM_MODEL to run against a real endpoint")
	}
	old, _ := os.ReadFile(filepath.Join("testdata", "large", "memory.md"))
	env := llmEnv(t, url, model, 8000)
	out, tokens, err := compactLLM(context.Background(), env, old, 3, 2048)
	var rej *rewrite.Rejected
	switch {
	case errors.As(err, &rej):
		t.Logf("the model's answer was rejected by the guards (%d tokens): %s\n%s", tokens, rej.Reason, out)
	case err != nil:
		t.Fatalf("real endpoint: %v", err)
	default:
		t.Logf("accepted compaction (%d tokens, %d -> %d bytes):\n%s", tokens, len(old), len(out), out)
		if tokens == 0 {
			t.Error("no token use recorded")
		}
	}
}
