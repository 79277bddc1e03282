package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentHome is a home directory with the data of every agent memwatch has
// a preset for, each session in its agent's real format (the fixtures of
// session/testdata/agents, whose SOURCES.md names the upstream formats).
func agentHome(t *testing.T) string {
	t.Helper()
	h := t.TempDir()
	fixture := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "session", "testdata", "agents", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := map[string][]byte{
		".claude/projects/-src-shop/5b1c.jsonl":                             fixture("claude-code.jsonl"),
		".claude/projects/-src-shop/memory/MEMORY.md":                       []byte("# Project memory\n\n- deploys go through make release\n"),
		".codex/sessions/2025/10/29/rollout-2025-10-29T00-59-38-019a.jsonl": fixture("codex.jsonl"),
		".nanobot/sessions/telegram_42.jsonl":                               fixture("nanobot.jsonl"),
		".nanobot/workspace/memory/MEMORY.md":                               []byte("# Memory\n\n- user: Ada\n"),
		".nanobot/workspace/memory/history.jsonl":                           []byte(`{"cursor": 1, "timestamp": "2026-01-30 09:00", "content": "[2026-01-30 09:00] User set up the Telegram channel."}` + "\n"),
		".openclaw/agents/main/sessions/7d2e.jsonl":                         fixture("openclaw.jsonl"),
		".openclaw/workspace/MEMORY.md":                                     []byte("# MEMORY\n\n- backups: nightly\n"),
		".openclaw/workspace/memory/2026-01-12.md":                          []byte("backups nightly at 02:00 to the NAS\n"),
		// Beside the transcript: a run trace, never read.
		".openclaw/agents/main/sessions/7d2e.trajectory.jsonl": []byte(`{"type":"message","message":{"role":"user","content":"trajectoryonlyword"}}` + "\n"),
		// nanobot 0.3: workspace/sessions/<base64url key>.jsonl, and an
		// internal Dream session, left out.
		".nanobot/workspace/sessions/d2hhdHNhcHA6Nzc.jsonl": []byte(`{"_type":"metadata","key":"whatsapp:77","created_at":"2026-02-03T08:00:00","updated_at":"2026-02-03T08:01:00","metadata":{},"last_consolidated":0}` + "\n" +
			`{"role":"user","content":"book the piano tuner for Thursday","timestamp":"2026-02-03T08:00:10"}` + "\n" +
			`{"role":"assistant","content":"Booked the piano tuner for Thursday 10:00.","timestamp":"2026-02-03T08:00:30"}` + "\n"),
		".nanobot/workspace/sessions/ZHJlYW06MjAyNjAyMDMtMDgwMDAw.jsonl": []byte(`{"_type":"metadata","key":"dream:20260203-080000","created_at":"2026-02-03T08:00:00","updated_at":"2026-02-03T08:00:00","metadata":{},"last_consolidated":0}` + "\n" +
			`{"role":"user","content":"dreamonlyword consolidate history","timestamp":"2026-02-03T08:00:00"}` + "\n"),
		".gemini/tmp/9b1d8f0c/chats/session-2026-11-20T09-14-5f1c2a9e.jsonl": fixture("gemini-cli.jsonl"),
		".gemini/GEMINI.md": []byte("## Gemini Added Memories\n- The ledger service deploys on Fridays only.\n"),
	}
	for p, b := range files {
		p = filepath.Join(h, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestAgentPresets: memwatch init finds every agent; with its policy the
// daemon consolidates each agent's sessions into the file that agent reads,
// dated by the conversation, and recall finds words in user text, assistant
// text, tool inputs and tool results, citing the session file and line.
func TestAgentPresets(t *testing.T) {
	home := agentHome(t)
	pol := filepath.Join(home, "policy.yaml")
	out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput()
	if err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	for _, agent := range []string{"Claude Code", "Codex CLI", "Gemini CLI", "nanobot", "OpenClaw"} {
		if !strings.Contains(string(out), "found "+agent) {
			t.Errorf("init did not find %s:\n%s", agent, out)
		}
	}
	if out, err := exec.Command(memwatchFast, "validate", "--policy", pol).CombinedOutput(); err != nil {
		t.Fatalf("validate the init policy: %v\n%s", err, out)
	}
	// The sessions ended long ago: consolidate them once they are quiet.
	// Claude Code, nanobot and OpenClaw consolidate their own: memwatch
	// does too only when asked (TestPresetsLeaveSelfConsolidationAlone).
	b, _ := os.ReadFile(pol)
	b = []byte(strings.ReplaceAll(string(b), "    paths:", "    session_idle: 1s\n    settle: 50ms\n    consolidate: true\n    paths:"))
	os.WriteFile(pol, b, 0o644)
	state := filepath.Join(home, "state")
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("ready", 10*time.Second)

	// Consolidated once, into the file each agent reads, in the month (or
	// the day) of the conversation: HISTORY.md and its monthly file for
	// Claude Code and Codex, a record in nanobot's history.jsonl (it has
	// one, so auto picks it), the daily note of the day for OpenClaw.
	day := time.Date(2026, 1, 20, 8, 0, 5, 0, time.UTC).Local().Format(time.DateOnly)
	for _, tt := range []struct{ history, month, cite, word string }{
		{".claude/projects/-src-shop/memory/HISTORY.md", ".claude/projects/-src-shop/memory/HISTORY-2025-03.md", "5b1c.jsonl#L2-18", "previous revision"},
		{".codex/memwatch/HISTORY.md", ".codex/memwatch/HISTORY-2025-10.md", "rollout-2025-10-29T00-59-38-019a.jsonl#L3-12", "flaky"},
		{".nanobot/workspace/memory/history.jsonl", "", "telegram_42.jsonl#L2-5", "dentist"},
		{".openclaw/workspace/memory/" + day + ".md", "", "7d2e.jsonl#L3-6", "NAS"},
		{".gemini/memwatch/HISTORY.md", ".gemini/memwatch/HISTORY-2026-11.md", "session-2026-11-20T09-14-5f1c2a9e.jsonl#L2-15", "eu-west-2"},
	} {
		path := filepath.Join(home, tt.history)
		deadline := time.Now().Add(30 * time.Second)
		var got []byte
		for time.Now().Before(deadline) {
			if got, _ = os.ReadFile(path); strings.Contains(string(got), tt.cite) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(string(got), tt.cite) || !strings.Contains(string(got), tt.word) {
			t.Errorf("%s: got %q, want an entry citing %s with %q", tt.history, got, tt.cite, tt.word)
		}
		if n := strings.Count(string(got), tt.cite+" range:"); n != 1 {
			t.Errorf("%s: %d consolidated ranges, want 1", tt.history, n)
		}
		if tt.month != "" {
			waitFor(t, filepath.Join(home, tt.month), tt.cite, 30*time.Second)
		}
	}
	// The rewind: the edited prompt's branch is the conversation; the
	// abandoned draft is not in the entry (and is still recalled below).
	if h := readFile(t, filepath.Join(home, ".claude/projects/-src-shop/memory/HISTORY.md")); !strings.Contains(h, "payments to 2.5") || strings.Contains(h, "zebra") {
		t.Errorf("Claude Code entry after a rewind: want the kept branch (2.5) and not the abandoned one (zebra):\n%s", h)
	}
	if h := readFile(t, filepath.Join(home, ".gemini/memwatch/HISTORY.md")); !strings.Contains(h, "Fridays only") || strings.Contains(h, "Forget that") || strings.Contains(h, "[tool result]") || strings.Contains(h, "absolute_path") {
		t.Errorf("Gemini CLI entry: want the kept conversation, not the prompt its $rewindTo abandoned, and no tool input or output verbatim:\n%s", h)
	}
	waitFor(t, filepath.Join(home, ".nanobot/workspace/memory/history.jsonl"), "piano tuner", 30*time.Second)
	// nanobot's record follows its own: the next cursor, its timestamp form.
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(home, ".nanobot/workspace/memory/history.jsonl"))), "\n")
	var dentist, tuner bool
	for _, l := range lines[1:] {
		var rec struct {
			Cursor     int    `json:"cursor"`
			Timestamp  string `json:"timestamp"`
			Content    string `json:"content"`
			SessionKey string `json:"session_key"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Cursor < 2 || len(rec.Timestamp) != len("2026-02-01 10:05") {
			t.Errorf("nanobot history.jsonl record %q: want a cursor after nanobot's and its timestamp form", l)
		}
		dentist = dentist || strings.Contains(rec.Content, "dentist") && rec.SessionKey == "telegram:42"
		tuner = tuner || strings.Contains(rec.Content, "piano tuner") && rec.SessionKey == "whatsapp:77"
		if strings.Contains(rec.Content, "dreamonlyword") {
			t.Errorf("nanobot's internal dream session was consolidated: %s", l)
		}
	}
	if len(lines) != 3 || !dentist || !tuner {
		t.Errorf("nanobot history.jsonl: got %q, want its record, then one per session with nanobot's session_key", lines)
	}
	for _, gone := range []string{".nanobot/workspace/memory/HISTORY.md", ".openclaw/workspace/HISTORY.md"} {
		if _, err := os.Stat(filepath.Join(home, gone)); err == nil {
			t.Errorf("%s was written, where the agent does not read", gone)
		}
	}
	for _, junk := range []string{".openclaw/workspace/memory/MEMORY-", ".claude/projects/-src-shop/memory/MEMORY-"} {
		ms, _ := filepath.Glob(filepath.Join(home, junk+"*"))
		if len(ms) > 0 {
			t.Errorf("an archive landed in a folder the agent indexes: %v", ms)
		}
	}
	// Recall across every store, each hit cited by its session file and line.
	for _, tt := range []struct{ query, want string }{
		{"checkout", "5b1c.jsonl#L2"},              // user text (Claude Code)
		{"previous revision", "5b1c.jsonl#L5"},     // assistant text
		{"rollout undo", "5b1c.jsonl#L3"},          // tool input
		{"rolled back", "5b1c.jsonl#L4"},           // tool result
		{"zebra", "5b1c.jsonl#L16"},                // a branch abandoned by a rewind stays searchable
		{"grep -rn flaky", "019a.jsonl#L7"},        // Codex tool input
		{"Success. Updated", "019a.jsonl#L10"},     // Codex tool result
		{"Größe", "telegram_42.jsonl#L2"},          // nanobot, non-ASCII
		{"Created job 7", "telegram_42.jsonl#L4"},  // nanobot tool result
		{"backup schedule", "7d2e.jsonl#L3"},       // OpenClaw user text (numeric timestamps)
		{"to the NAS", "7d2e.jsonl#L5"},            // OpenClaw tool result
		{"piano tuner", "d2hhdHNhcHA6Nzc.jsonl#L"}, // nanobot 0.3's workspace/sessions
		{"Fridays only", "5f1c2a9e.jsonl#L13"},     // Gemini CLI user text
		{"nightly pipeline", "5f1c2a9e.jsonl#L8"},  // Gemini CLI: the last version of a message written twice
		{"absolute_path", "5f1c2a9e.jsonl#L6"},     // Gemini CLI tool call
		{"via the nightly", "5f1c2a9e.jsonl#L6"},   // Gemini CLI tool result
	} {
		cmd := exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "--limit", "20", tt.query)
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("recall %q: want a citation of %s, got (%v)\n%s", tt.query, tt.want, err, out)
		}
	}
	// Once per message, with its role; never what is not a conversation.
	for _, tt := range []struct {
		query string
		hits  int
		role  string
	}{
		{`"cluster through the nightly"`, 1, "assistant:"}, // once, though the Gemini CLI wrote it twice (the recordings: TestRecordedAgents)
		{`"Fridays only"`, 3, ""},                          // the prompt, the save_memory call, the answer
		{"trajectoryonlyword", 0, ""},                      // OpenClaw's run trace
		{"dreamonlyword", 0, ""},                           // nanobot's Dream session
	} {
		cmd := exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "--limit", "20", "--scope", "messages", "--json", tt.query)
		cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
		out, err := cmd.Output()
		if exitCode(err) == 1 {
			err = nil // nothing found, as grep says it
		}
		var res []struct {
			Text, Citation string
		}
		if err != nil || json.Unmarshal(out, &res) != nil {
			t.Errorf("recall --json %q: %v\n%s", tt.query, err, out)
			continue
		}
		if len(res) != tt.hits {
			t.Errorf("recall %q: %d hits, want %d: %+v", tt.query, len(res), tt.hits, res)
		}
		for _, r := range res {
			if tt.role != "" && !strings.HasPrefix(r.Text, tt.role) {
				t.Errorf("recall %q: hit %q, want it labelled %s", tt.query, r.Text, tt.role)
			}
		}
	}
	p.stop(30 * time.Second)
}

// TestPresetsLeaveSelfConsolidationAlone: the agents that consolidate their
// own conversations (Claude Code's auto-memory, nanobot's Consolidator and
// Dream, OpenClaw's daily notes) get no second history from memwatch by
// default, and their sessions are still recalled.
func TestPresetsLeaveSelfConsolidationAlone(t *testing.T) {
	home := agentHome(t)
	pol := filepath.Join(home, "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(pol)
	os.WriteFile(pol, []byte(strings.ReplaceAll(string(b), "    paths:", "    session_idle: 1s\n    settle: 50ms\n    paths:")), 0o644)
	state := filepath.Join(home, "state")
	p := start(t, "--policy", pol, "--state-dir", state, "--log-level", "debug")
	p.waitLog("ready", 10*time.Second)
	// Codex has no history of its own: its consolidation is the witness
	// that the daemon had time to consolidate the others.
	waitFor(t, filepath.Join(home, ".codex/memwatch/HISTORY.md"), "range:", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	for _, f := range []string{".claude/projects/-src-shop/memory/HISTORY.md", ".nanobot/workspace/memory/HISTORY.md"} {
		if _, err := os.Stat(filepath.Join(home, f)); err == nil {
			t.Errorf("%s written by default, beside the agent's own consolidation", f)
		}
	}
	if h := readFile(t, filepath.Join(home, ".nanobot/workspace/memory/history.jsonl")); strings.Count(h, "\n") != 1 {
		t.Errorf("nanobot's history.jsonl got memwatch's records by default:\n%s", h)
	}
	if ms, _ := filepath.Glob(filepath.Join(home, ".openclaw/workspace/memory/*.md")); len(ms) != 1 {
		t.Errorf("OpenClaw's daily notes: got %v, want only its own", ms)
	}
	cmd := exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "dentist")
	cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "telegram_42.jsonl#L") {
		t.Errorf("recall of nanobot's session: (%v)\n%s", err, out)
	}
	// nanobot clears the session (/new): what it said is still recalled,
	// from the spool, cited where it was; once.
	sess := filepath.Join(home, ".nanobot/sessions/telegram_42.jsonl")
	first, _, _ := strings.Cut(readFile(t, sess), "\n")
	os.WriteFile(sess, []byte(first+"\n"), 0o644)
	p.waitLogWith("captured", map[string]any{"why": "cleared"}, 10*time.Second)
	cmd = exec.Command(memwatchFast, "recall", "--policy", pol, "--all", "--json", "dentist")
	cmd.Env = append(os.Environ(), "MEMWATCH_STATE_DIR="+state)
	out, err := cmd.Output()
	if exitCode(err) == 1 {
		err = nil // nothing found, as grep says it
	}
	var res []struct{ Citation string }
	var cites []string
	if err == nil && json.Unmarshal(out, &res) == nil {
		for _, r := range res {
			cites = append(cites, r.Citation[strings.LastIndex(r.Citation, "/")+1:])
		}
	}
	if strings.Join(cites, " ") != "telegram_42.jsonl#L5 telegram_42.jsonl#L4 telegram_42.jsonl#L3 telegram_42.jsonl#L2" {
		t.Errorf("recall after nanobot cleared its session: got %v (%v), want its four messages with the word, once each, cited where they were", cites, err)
	}
	p.stop(30 * time.Second)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor waits until path holds want.
func waitFor(t *testing.T, path, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Errorf("%s: got %q, want it to hold %q", path, b, want)
}
