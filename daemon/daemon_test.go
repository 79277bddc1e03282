package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// testDaemon runs a daemon in-process on a policy; it stops at cleanup.
func testDaemon(t *testing.T, src string) (*Daemon, string) {
	t.Helper()
	dir := t.TempDir()
	p, err := policy.Parse("policy.yaml", []byte(src), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "state")
	d, err := New(Config{Policy: p, PolicyPath: "policy.yaml", StateDir: stateDir, Socket: filepath.Join(stateDir, "s.sock"), Version: "test"},
		slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-d.watch.Ready()
	return d, dir
}

func memory(n int, tag string) []byte {
	var b strings.Builder
	b.WriteString("# now\n\n## State | " + tag + "\n- runs: 1\n\n## Item A\n- a\n\n## Patterns\n- p\n\n# History\n\n")
	for i := range n {
		fmt.Fprintf(&b, "## 2026-01-15-%04d | run %d\n- %s\n\n", 2000-i, i, strings.Repeat("detail ", 30))
	}
	return []byte(b.String())
}

func llmPolicy(root, baseURL string) string {
	return fmt.Sprintf(`version: 1
llm:
  default:
    base_url: %s
    model: fake
    timeout: 5s
    daily_token_budget: 100000
stores:
  - name: apps
    layout: now-history
    paths: [%q]
    compactor: llm
    settle: 50ms
    cooldown: 200ms
    max_size: 2KiB
    keep_history: 2
`, baseURL, root)
}

func waitJournal(t *testing.T, d *Daemon, f state.Filter, timeout time.Duration) state.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		recs, _ := d.db.Journal(context.Background(), f)
		if len(recs) > 0 {
			return recs[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no journal record matching %+v within %v", f, timeout)
	return state.Record{}
}

// A good LLM answer that arrives slowly, while the agent edits memory.md:
// the agent's edit is not lost (the rewrite starts again on the new content).
func TestAgentEditDuringSlowLLMCompactionIsKept(t *testing.T) {
	good := "# now\n\n## State | compacted\n- runs: 1\n\n## Item A\n- a\n\n## Patterns\n- p\n\n# History\n\n## 2026-01-15-2000 | run 0\n\n## 2026-01-15-1999 | run 1\n"
	srv := llmtest.New(t, llmtest.Step{Content: good, Delay: 700 * time.Millisecond})
	root := filepath.Join(t.TempDir(), "app")
	os.MkdirAll(root, 0o755)
	d, _ := testDaemon(t, llmPolicy(root, srv.BaseURL()))
	mem := filepath.Join(root, "memory.md")
	os.WriteFile(mem, memory(20, "v1"), 0o644)
	// The LLM call is in flight; the agent rewrites memory.md meanwhile.
	deadline := time.Now().Add(3 * time.Second)
	for srv.Calls() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	edited := bytes.Replace(memory(20, "v1"), []byte("- runs: 1"), []byte("- runs: 2 (agent edit)"), 1)
	os.WriteFile(mem, edited, 0o644)
	rec := waitJournal(t, d, state.Filter{Rule: nowhistory.RuleCompact, Outcome: state.Done}, 10*time.Second)
	// The compaction that landed was computed from the agent's edit...
	if rec.BeforeSHA != hash(edited) {
		t.Errorf("the compaction replaced content the agent had overwritten: before sha %s, want the edited file's", rec.BeforeSHA[:12])
	}
	// ...and the edit itself is in the archive.
	arch, err := os.ReadFile(filepath.Join(root, rec.Archive))
	if err != nil || !bytes.Equal(arch, edited) {
		t.Errorf("archive %s does not hold the agent's edit: %v", rec.Archive, err)
	}
	if srv.Calls() < 2 {
		t.Errorf("LLM calls = %d, want the first discarded and a second on the edited file", srv.Calls())
	}
}

// A destructive LLM answer is rejected by the guards; the daemon then
// compacts with the heuristic, so memory.md does not stay oversize, and the
// journal says why.
func TestRejectedLLMOutputFallsBackToHeuristic(t *testing.T) {
	// The model drops every # now section but State: a destructive answer.
	bad := "# now\n\n## State | x\n\n# History\n\n## 2026-01-15-2000 | run 0\n"
	srv := llmtest.New(t, llmtest.Step{Content: bad, Tokens: 777})
	root := filepath.Join(t.TempDir(), "app")
	os.MkdirAll(root, 0o755)
	d, _ := testDaemon(t, llmPolicy(root, srv.BaseURL()))
	orig := memory(20, "v1")
	os.WriteFile(filepath.Join(root, "memory.md"), orig, 0o644)
	rec := waitJournal(t, d, state.Filter{Rule: nowhistory.RuleCompact, Outcome: state.Done}, 5*time.Second)
	if !strings.Contains(rec.Reason, "llm output rejected (output drops 2 of 3 # now sections") || !strings.Contains(rec.Reason, "heuristic compactor used") || rec.Tokens != 777 {
		t.Errorf("compaction record = %+v", rec)
	}
	want, _ := nowhistory.CompactHeuristic(orig, 2)
	if b, _ := os.ReadFile(filepath.Join(root, "memory.md")); !bytes.Equal(b, want) {
		t.Error("memory.md is not the heuristic compaction")
	}
	if arch, _ := os.ReadFile(filepath.Join(root, rec.Archive)); !bytes.Equal(arch, orig) {
		t.Error("the archive does not hold the original")
	}
	if srv.Calls() != 1 {
		t.Errorf("LLM calls = %d, want 1", srv.Calls())
	}
}

func TestBudgetExhaustedFallsBackToHeuristic(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: "unused"})
	root := filepath.Join(t.TempDir(), "app")
	os.MkdirAll(root, 0o755)
	src := strings.Replace(llmPolicy(root, srv.BaseURL()), "daily_token_budget: 100000", "daily_token_budget: 10", 1)
	d, _ := testDaemon(t, src)
	orig := memory(20, "v1")
	os.WriteFile(filepath.Join(root, "memory.md"), orig, 0o644)
	rec := waitJournal(t, d, state.Filter{Rule: nowhistory.RuleCompact, Outcome: state.Done}, 5*time.Second)
	if !strings.Contains(rec.Reason, "daily token budget exhausted") || !strings.Contains(rec.Reason, "heuristic compactor used") {
		t.Errorf("reason = %q; want the budget fallback journaled", rec.Reason)
	}
	want, _ := nowhistory.CompactHeuristic(orig, 2)
	if b, _ := os.ReadFile(filepath.Join(root, "memory.md")); !bytes.Equal(b, want) {
		t.Error("memory.md is not the heuristic compaction")
	}
	if srv.Calls() != 0 {
		t.Errorf("LLM calls = %d with an exhausted budget, want 0", srv.Calls())
	}
}

func hash(b []byte) string { return rewrite.Hash(b) }

func TestTCPControlNeedsToken(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "0123456789abcdef0123456789abcdef"
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	testDaemon(t, fmt.Sprintf("version: 1\ncontrol:\n  tcp: %s\n  token_file: %s\n", addr, tokenFile))
	get := func(path, tok string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/v1/status", "", 401},
		{"/v1/status", "Bearer wrong-token-wrong-token", 401},
		{"/v1/status", token, 401}, // the token without "Bearer "
		{"/v1/status", "Basic " + token, 401},
		{"/v1/status", "Bearer " + token, 200},
		{"/metrics", "Bearer " + token, 200},
	} {
		if got := get(c.path, c.token); got != c.want {
			t.Errorf("GET %s with Authorization %q = %d, want %d", c.path, c.token, got, c.want)
		}
	}
	// A huge body is refused after 1 MiB, and the error does not echo it.
	body := io.MultiReader(strings.NewReader(`{"path":"`), io.LimitReader(zeros{}, 300<<20), strings.NewReader(`"}`))
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/compact", body)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || len(b) > 1024 {
			t.Errorf("300 MB body: %d with a %d-byte answer, want 413 and a short one", resp.StatusCode, len(b))
		}
	} // the server may also close the connection mid-upload, which is fine
}

// zeros is an endless reader of 'a'.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

func TestTCPRefusesReadableTokenFile(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef"), 0o644)
	p, err := policy.Parse("p.yaml", []byte(fmt.Sprintf("version: 1\ncontrol:\n  tcp: 127.0.0.1:0\n  token_file: %s\n", tokenFile)), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, err := New(Config{Policy: p, StateDir: dir, Socket: filepath.Join(dir, "s.sock")}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "readable by group or others") {
		t.Errorf("Run with a 0644 token file: %v", err)
	}
}

func TestWatchdogPings(t *testing.T) {
	p, _ := policy.Parse("p.yaml", []byte("version: 1\n"), registry.Specs())
	dir := t.TempDir()
	got := make(chan string, 16)
	d, err := New(Config{Policy: p, StateDir: dir, Socket: filepath.Join(dir, "s.sock"), Watchdog: 100 * time.Millisecond,
		Notify: func(s string) { got <- s }}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	pings := 0
	for deadline := time.After(2 * time.Second); pings < 2; {
		select {
		case s := <-got:
			if s == "WATCHDOG=1" {
				pings++
			}
		case <-deadline:
			t.Fatalf("watchdog pings = %d in 2s, want >= 2", pings)
		}
	}
	cancel()
	<-done
}

// A stop that arrives while the daemon is still starting is a clean stop.
func TestStopDuringStartupIsClean(t *testing.T) {
	for i := range 30 {
		p, _ := policy.Parse("p.yaml", []byte(fmt.Sprintf("version: 1\nstores:\n  - name: s\n    layout: now-history\n    paths: [%q]\n", filepath.Join(t.TempDir(), "*"))), registry.Specs())
		dir := t.TempDir()
		d, err := New(Config{Policy: p, StateDir: dir, Socket: filepath.Join(dir, "s.sock")}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Duration(i%10) * time.Millisecond); cancel() }()
		if err := d.Run(ctx); err != nil {
			t.Fatalf("stop after %dms of startup: %v", i%10, err)
		}
	}
}

// TestStoppedIsLoggedLast: stopped while an LLM compaction is in flight
// (the fake endpoint holds its answer until the test lets it go), the
// daemon logs "waiting for running jobs", and "stopped" only once that
// job has ended: the last line of its log (it was logged before the wait,
// so a person saw a stopped daemon still at work).
func TestStoppedIsLoggedLast(t *testing.T) {
	good := "# now\n\n## State | compacted\n- runs: 1\n\n## Item A\n- a\n\n## Patterns\n- p\n\n# History\n\n## 2026-01-15-2000 | run 0\n"
	release := make(chan struct{})
	srv := llmtest.New(t, llmtest.Step{Content: good, Wait: release})
	root := filepath.Join(t.TempDir(), "app")
	os.MkdirAll(root, 0o755)
	dir := t.TempDir()
	p, err := policy.Parse("policy.yaml", []byte(llmPolicy(root, srv.BaseURL())), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	d, err := New(Config{Policy: p, PolicyPath: "policy.yaml", StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "s.sock"), Version: "test"},
		slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-d.watch.Ready()
	os.WriteFile(filepath.Join(root, "memory.md"), memory(20, "v1"), 0o644)
	for deadline := time.Now().Add(10 * time.Second); srv.Calls() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no LLM call within 10 s")
		}
	}
	cancel()
	// The job is held in its LLM call until the engine says it waits for
	// it; then the call ends, and so does the job.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), `"msg":"waiting for running jobs"`); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no \"waiting for running jobs\" within 10 s of the stop:\n%s", logs.String())
		}
	}
	if strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("\"stopped\" logged while a job still runs")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Msg string }
		json.Unmarshal([]byte(l), &rec)
		msgs = append(msgs, rec.Msg)
	}
	waiting := slices.Index(msgs, "waiting for running jobs")
	if waiting < 0 {
		t.Fatalf("no job was running at the stop: %q", msgs)
	}
	if got := msgs[len(msgs)-1]; got != "stopped" {
		t.Errorf("last log line %q, want \"stopped\" (the log: %q)", got, msgs[waiting:])
	}
	if n := strings.Count(logs.String(), `"msg":"stopped"`); n != 1 {
		t.Errorf("\"stopped\" logged %d times", n)
	}
}

// lockedBuffer is a log's bytes, written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
