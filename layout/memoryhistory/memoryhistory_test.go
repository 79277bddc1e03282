package memoryhistory_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/daemon/daemontest"
	"github.com/memwatch/memwatch/layout/memoryhistory"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

// run starts a daemon on the policy and returns a stop function.
func run(t *testing.T, src, stateDir string) (stop func()) {
	t.Helper()
	return daemontest.Run(t, src, stateDir).Stop
}

func policyFor(ws, llmURL, extra string) string {
	llm, compactor := "", "heuristic"
	if llmURL != "" {
		llm = fmt.Sprintf("llm:\n  default:\n    base_url: %s\n    model: fake\n    timeout: 1s\n", llmURL)
		compactor = "llm"
	}
	return fmt.Sprintf(`version: 1
%sstores:
  - name: ws
    layout: memory-history
    paths: [%q]
    compactor: %s
    settle: 50ms
    cooldown: 100ms
    window: 50
    keep: 10
    session_idle: 1h
%s`, llm, ws, compactor, extra)
}

func appendLines(t *testing.T, path string, from, n int) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := from; i < from+n; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(f, `{"role":%q,"content":"message %d %s"}`+"\n", role, i, strings.Repeat("word ", 60))
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	daemontest.WaitFor(t, what, timeout, cond)
}

func read(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func TestSixtyMessagesOneConsolidation(t *testing.T) {
	good := `{"history_entry":"[2026-02-27 14:30] The user asked about memwatch; the assistant explained consolidation.","memory_update":"# Facts\n- the user builds memwatch\n"}`
	srv := llmtest.New(t, llmtest.Step{Content: good, Tokens: 500})
	ws := t.TempDir()
	stateDir := t.TempDir()
	run(t, policyFor(ws, srv.BaseURL(), ""), stateDir)
	appendLines(t, filepath.Join(ws, "sessions", "abc.jsonl"), 0, 60)
	waitFor(t, "a history entry", 5*time.Second, func() bool { return strings.Contains(read(filepath.Join(ws, "HISTORY.md")), "<!-- memwatch") })
	time.Sleep(500 * time.Millisecond)
	hist := read(filepath.Join(ws, "HISTORY.md"))
	if got := strings.Count(hist, "<!-- memwatch: sessions/abc.jsonl#L1-50 range:"); got != 1 {
		t.Errorf("HISTORY.md has %d entries for L1-50, want 1:\n%s", got, hist)
	}
	if strings.Count(hist, "<!-- memwatch") != 1 || srv.Calls() != 1 {
		t.Errorf("consolidations: %d entries, %d LLM calls; want 1 and 1", strings.Count(hist, "<!-- memwatch"), srv.Calls())
	}
	if !strings.Contains(hist, "The user asked about memwatch") {
		t.Errorf("history entry not written: %s", hist)
	}
	month := "HISTORY-" + time.Now().UTC().Format("2006-01") + ".md"
	if !strings.Contains(read(filepath.Join(ws, month)), "sessions/abc.jsonl#L1-50") {
		t.Errorf("%s lacks the entry", month)
	}
	if got := read(filepath.Join(ws, "MEMORY.md")); got != "# Facts\n- the user builds memwatch\n" {
		t.Errorf("MEMORY.md = %q", got)
	}
	// The conversation went to the model as data, with the seed's structure.
	prompt := srv.Requests()[0].Messages[1].Content
	for _, want := range []string{"## Current Long-term Memory", "(empty)", "## Conversation to Process", "USER: message 0", "ASSISTANT: message 49"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if strings.Contains(prompt, "message 50 ") {
		t.Error("prompt includes a line beyond the range")
	}
}

// A crash between writing the entry and committing the progress: on
// restart the marker is found, nothing is written twice and the next range
// follows without a gap.
func TestRestartNoDuplicateNoGap(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"history_entry":"[2026-02-27 14:30] second range","memory_update":""}`})
	ws := t.TempDir()
	stateDir := t.TempDir()
	log := filepath.Join(ws, "sessions", "abc.jsonl")
	appendLines(t, log, 0, 60)
	// As left by a memwatch killed after the append, before the progress
	// commit: the lines are in the spool, the entry and its marker in HISTORY.md.
	marker := crashedRange(t, ws, stateDir, "sessions/abc.jsonl", 50)
	os.WriteFile(filepath.Join(ws, "HISTORY.md"), []byte("## 2026-02-27T14:30:00.000Z\nfirst range\n"+marker+"\n"), 0o644)
	stop := run(t, policyFor(ws, srv.BaseURL(), ""), stateDir)
	time.Sleep(700 * time.Millisecond)
	if srv.Calls() != 0 {
		t.Errorf("LLM called %d times for an already written range", srv.Calls())
	}
	if got := strings.Count(read(filepath.Join(ws, "HISTORY.md")), "#L1-50"); got != 1 {
		t.Errorf("L1-50 written %d times", got)
	}
	stop()
	appendLines(t, log, 60, 50) // 110 lines: L51-100 is next
	run(t, policyFor(ws, srv.BaseURL(), ""), stateDir)
	waitFor(t, "the next range", 5*time.Second, func() bool { return strings.Contains(read(filepath.Join(ws, "HISTORY.md")), "#L51-100 range:") })
	hist := read(filepath.Join(ws, "HISTORY.md"))
	if strings.Count(hist, "<!-- memwatch") != 2 {
		t.Errorf("want exactly the entries L1-50 and L51-100:\n%s", hist)
	}
}

func TestHangingLLMRawFallback(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Hang: true})
	ws := t.TempDir()
	run(t, policyFor(ws, srv.BaseURL(), ""), t.TempDir())
	appendLines(t, filepath.Join(ws, "sessions", "abc.jsonl"), 0, 60)
	waitFor(t, "a raw-fallback entry", 10*time.Second, func() bool { return strings.Contains(read(filepath.Join(ws, "HISTORY.md")), "[raw-fallback]") })
	hist := read(filepath.Join(ws, "HISTORY.md"))
	var lines []string
	for _, l := range strings.Split(hist, "\n") {
		if strings.HasPrefix(l, "- user: ") || strings.HasPrefix(l, "- assistant: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 10 {
		t.Fatalf("raw fallback has %d messages, want the last 10:\n%s", len(lines), hist)
	}
	if !strings.HasPrefix(lines[0], "- user: message 40 ") || !strings.HasPrefix(lines[9], "- assistant: message 49 ") {
		t.Errorf("not the last 10 messages of L1-50: first %q, last %q", lines[0][:30], lines[9][:30])
	}
	for _, l := range lines {
		text := l[strings.Index(l, ": ")+2:]
		if n := len([]rune(text)); n != 200 {
			t.Errorf("message cut to %d characters, want 200", n)
		}
	}
}

func TestParseTiers(t *testing.T) {
	tiers := []string{
		"```json\n{\"history_entry\": \"[2026-02-27 14:30] fenced answer\", \"memory_update\": \"\"}\n```",
		"Here is the consolidation you asked for:\n{\"history_entry\": \"[2026-02-27 14:30] prose around {braces}\", \"memory_update\": \"\"}\nLet me know!",
		`{"history_entry": "[2026-02-27 14:30] cut off answer", "memory_update": "# Facts\n- half a fa`,
	}
	for i, answer := range tiers {
		t.Run(fmt.Sprint("tier", i+1), func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Step{Content: answer})
			ws := t.TempDir()
			run(t, policyFor(ws, srv.BaseURL(), ""), t.TempDir())
			appendLines(t, filepath.Join(ws, "sessions", "abc.jsonl"), 0, 60)
			want := []string{"fenced answer", "prose around {braces}", "cut off answer"}[i]
			waitFor(t, want, 5*time.Second, func() bool { return strings.Contains(read(filepath.Join(ws, "HISTORY.md")), want) })
			if strings.Contains(read(filepath.Join(ws, "HISTORY.md")), "[raw-fallback]") {
				t.Error("fell back although the answer was recoverable")
			}
		})
	}
}

func TestSessionsOfOneWorkspaceNeverConcurrent(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"history_entry":"[2026-02-27 14:30] ok","memory_update":""}`, Delay: 300 * time.Millisecond})
	ws := t.TempDir()
	run(t, policyFor(ws, srv.BaseURL(), ""), t.TempDir())
	for _, s := range []string{"a", "b", "c"} {
		appendLines(t, filepath.Join(ws, "sessions", s+".jsonl"), 0, 60)
	}
	waitFor(t, "three consolidations", 10*time.Second, func() bool { return strings.Count(read(filepath.Join(ws, "HISTORY.md")), "<!-- memwatch") == 3 })
	if p := srv.PeakConcurrency(); p != 1 {
		t.Errorf("peak concurrent consolidations = %d, want 1", p)
	}
}

func TestMirrorIdempotentAcrossRestarts(t *testing.T) {
	ws := t.TempDir()
	stateDir := t.TempDir()
	var hist strings.Builder
	hist.WriteString("# History\n\n")
	for _, m := range []string{"2026-01", "2026-02", "2026-03"} {
		for d := 1; d <= 3; d++ {
			fmt.Fprintf(&hist, "## %s-%02dT10:00:00.000Z\nentry of %s day %d\n\n", m, d, m, d)
		}
	}
	hist.WriteString("## not a timestamp\nthis one stays put\n")
	os.WriteFile(filepath.Join(ws, "HISTORY.md"), []byte(hist.String()), 0o644)
	// The agent already wrote one entry to its monthly file itself.
	os.WriteFile(filepath.Join(ws, "HISTORY-2026-02.md"), []byte("## 2026-02-02T10:00:00.000Z\nentry of 2026-02 day 2\n"), 0o644)
	var snapshot map[string]string
	for i := range 3 {
		stop := run(t, policyFor(ws, "", ""), stateDir)
		waitFor(t, "monthly files", 5*time.Second, func() bool {
			return strings.Count(read(filepath.Join(ws, "HISTORY-2026-03.md")), "## ") == 3 && strings.Count(read(filepath.Join(ws, "HISTORY-2026-02.md")), "## ") == 3
		})
		time.Sleep(300 * time.Millisecond)
		stop()
		cur := map[string]string{}
		for _, m := range []string{"2026-01", "2026-02", "2026-03"} {
			c := read(filepath.Join(ws, "HISTORY-"+m+".md"))
			for d := 1; d <= 3; d++ {
				if n := strings.Count(c, fmt.Sprintf("entry of %s day %d\n", m, d)); n != 1 {
					t.Errorf("run %d: %s day %d present %d times", i, m, d, n)
				}
			}
			cur[m] = c
		}
		if snapshot != nil && fmt.Sprint(cur) != fmt.Sprint(snapshot) {
			t.Errorf("run %d changed the monthly files", i)
		}
		snapshot = cur
	}
	if read(filepath.Join(ws, "HISTORY.md")) != hist.String() {
		t.Error("mirror mode changed HISTORY.md")
	}
}

// In move mode memwatch rewrites HISTORY.md while the agent appends to it:
// every agent entry survives exactly once.
func TestMoveWhileAgentAppends(t *testing.T) {
	ws := t.TempDir()
	h := filepath.Join(ws, "HISTORY.md")
	var old strings.Builder
	for d := 1; d <= 20; d++ {
		fmt.Fprintf(&old, "## 2026-01-%02dT10:00:00.000Z\nold entry %d\n\n", d, d)
	}
	os.WriteFile(h, []byte(old.String()), 0o644)
	run(t, policyFor(ws, "", "    history_mode: move\n"), t.TempDir())
	now := time.Now().UTC()
	for i := range 300 {
		f, _ := os.OpenFile(h, os.O_WRONLY|os.O_APPEND, 0)
		fmt.Fprintf(f, "## %s\nnew entry %d\n\n", now.Add(time.Duration(i)*time.Second).Format("2006-01-02T15:04:05.000Z"), i)
		f.Close()
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "old entries moved", 5*time.Second, func() bool { return !strings.Contains(read(h), "old entry") })
	cur := read(h)
	for i := range 300 {
		if n := strings.Count(cur, fmt.Sprintf("new entry %d\n", i)); n != 1 {
			t.Errorf("agent entry %d present %d times in HISTORY.md", i, n)
		}
	}
	jan := read(filepath.Join(ws, "HISTORY-2026-01.md"))
	for d := 1; d <= 20; d++ {
		if n := strings.Count(jan, fmt.Sprintf("old entry %d\n", d)); n != 1 {
			t.Errorf("old entry %d present %d times in HISTORY-2026-01.md", d, n)
		}
	}
	archives, _ := filepath.Glob(filepath.Join(ws, "memory", "HISTORY-*.md"))
	if len(archives) == 0 {
		t.Error("HISTORY.md was rewritten without an archive")
	}
}

func TestCompressHeuristic(t *testing.T) {
	// A repeated item goes (the first stays); a heading stays, empty or
	// not: a compression moves what is under headings, whole, and no line
	// of the file is in neither file after it.
	in := "# Facts\n- likes Go\n- likes Go\n\n## Empty\n\n## People\n- Ada\n- likes Go\n```\n}\n}\n```\n"
	want := "# Facts\n- likes Go\n\n## Empty\n\n## People\n- Ada\n```\n}\n}\n```\n"
	if got := string(memoryhistory.CompressHeuristic([]byte(in))); got != want {
		t.Errorf("CompressHeuristic:\n got %q\nwant %q", got, want)
	}
}

func TestParseHistory(t *testing.T) {
	pre, es := memoryhistory.ParseHistory([]byte("# History\n\n## 2026-02-27T14:30:00.000Z\na\n```\n## not an entry\n```\n## 2026-03-01 09:00 | note\nb\n## garbage\nc\n"))
	if string(pre) != "# History\n\n" || len(es) != 3 {
		t.Fatalf("preamble %q, %d entries", pre, len(es))
	}
	if !es[0].OK || es[0].Month() != "HISTORY-2026-02.md" || !strings.Contains(string(es[0].Raw), "## not an entry") {
		t.Errorf("entry 0 = %+v", es[0])
	}
	if !es[1].OK || es[1].Month() != "HISTORY-2026-03.md" || es[2].OK {
		t.Errorf("entries = %+v", es)
	}
	_ = state.Done
}

func FuzzParseHistory(f *testing.F) {
	f.Add([]byte("## 2026-02-27T14:30:00.000Z\nx\n"))
	f.Add([]byte("pre\n## x\n```\n## y\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		pre, es := memoryhistory.ParseHistory(src)
		n := len(pre)
		for _, e := range es {
			n += len(e.Raw)
		}
		if n != len(src) {
			t.Fatalf("preamble and entries cover %d of %d bytes", n, len(src))
		}
	})
}

// A session that goes quiet for session_idle is consolidated to its end,
// even under window (the zero-integration stand-in for the seed's /new).
func TestIdleSessionConsolidatesTheRest(t *testing.T) {
	ws := t.TempDir()
	src := strings.Replace(policyFor(ws, "", ""), "session_idle: 1h", "session_idle: 1s", 1)
	run(t, src, t.TempDir())
	appendLines(t, filepath.Join(ws, "sessions", "quiet.jsonl"), 0, 12)
	waitFor(t, "idle consolidation", 8*time.Second, func() bool {
		return strings.Contains(read(filepath.Join(ws, "HISTORY.md")), "<!-- memwatch: sessions/quiet.jsonl#L1-12 range:")
	})
	if !strings.Contains(read(filepath.Join(ws, "HISTORY.md")), "[raw-fallback]") {
		t.Error("the heuristic compactor should write memory-history's raw fallback")
	}
}

func TestCompressMemoryHeuristic(t *testing.T) {
	ws := t.TempDir()
	src := strings.Replace(policyFor(ws, "", ""), "window: 50", "window: 50\n    memory_max_size: 200B", 1)
	var mem strings.Builder
	mem.WriteString("# Facts\n")
	for i := range 20 {
		fmt.Fprintf(&mem, "- fact %d\n- fact %d\n", i%5, i%5)
	}
	mem.WriteString("\n## Empty\n\n")
	os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(mem.String()), 0o644)
	run(t, src, t.TempDir())
	waitFor(t, "compression", 5*time.Second, func() bool { return len(read(filepath.Join(ws, "MEMORY.md"))) < mem.Len() })
	if got, want := read(filepath.Join(ws, "MEMORY.md")), "# Facts\n- fact 0\n- fact 1\n- fact 2\n- fact 3\n- fact 4\n\n## Empty\n\n"; got != want {
		t.Errorf("MEMORY.md = %q, want %q", got, want)
	}
	archives, _ := filepath.Glob(filepath.Join(ws, "memory", "MEMORY-*.md"))
	if len(archives) != 1 || read(archives[0]) != mem.String() {
		t.Errorf("archive = %v; want the pre-image in memory/MEMORY-*.md", archives)
	}
}

// crashedRange captures rel into the spool of stateDir and returns the
// marker consolidation writes for its first n messages.
func crashedRange(t *testing.T, ws, stateDir, rel string, n int) string {
	t.Helper()
	ctx := context.Background()
	sp, err := spool.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	root, err := confine.Open(ws, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := sp.Capture(ctx, root, rel, spool.Options{IsMessage: session.IsMessage}); err != nil {
		t.Fatal(err)
	}
	st, _, _ := sp.Find(ctx, root.ID(), rel)
	var lines []spool.Line
	sp.Read(ctx, st.ID, 0, int64(n), func(l spool.Line) error { lines = append(lines, l); return nil })
	return fmt.Sprintf("<!-- memwatch: %s range:%s -->", spool.Cite(rel, lines), spool.RangeID(rel, lines))
}

// TestCompressMovesFactsOut: an oversize MEMORY.md of distinct facts gets
// under memory_max_size, offline and with an LLM that prunes two thirds of
// it (more than max_loss), and every fact taken out is in the month's
// pruned-facts file, which the agent can read.
func TestCompressMovesFactsOut(t *testing.T) {
	var mem strings.Builder
	mem.WriteString("# Facts\n\n## People\n")
	for i := range 400 {
		if i == 200 {
			mem.WriteString("\n## Projects\n")
		}
		fmt.Fprintf(&mem, "- fact %03d: something worth remembering\n", i)
	}
	var kept strings.Builder
	kept.WriteString("# Facts\n\n## Projects\n")
	for i := 266; i < 400; i++ {
		fmt.Fprintf(&kept, "- fact %03d: something worth remembering\n", i)
	}
	for _, tt := range []struct {
		name string
		llm  string // the LLM's answer; "" for offline
	}{{"offline", ""}, {"llm prunes two thirds", kept.String()}} {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			url := ""
			if tt.llm != "" {
				url = llmtest.New(t, llmtest.Step{Content: tt.llm}).BaseURL()
			}
			src := strings.Replace(policyFor(ws, url, ""), "window: 50", "window: 50\n    memory_max_size: 8KiB", 1)
			os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(mem.String()), 0o644)
			stop := run(t, src, t.TempDir())
			waitFor(t, "compression", 10*time.Second, func() bool { return len(read(filepath.Join(ws, "MEMORY.md"))) <= 8<<10 })
			var prunedFile string
			waitFor(t, "the pruned-facts file", 5*time.Second, func() bool {
				ms, _ := filepath.Glob(filepath.Join(ws, "memory", "MEMORY-pruned-*.md"))
				if len(ms) == 1 {
					prunedFile = ms[0]
				}
				return len(ms) == 1
			})
			stop()
			now, pruned := read(filepath.Join(ws, "MEMORY.md")), read(prunedFile)
			for i := range 400 {
				fact := fmt.Sprintf("- fact %03d: something worth remembering\n", i)
				if !strings.Contains(now, fact) && !strings.Contains(pruned, fact) {
					t.Fatalf("fact %03d is in neither MEMORY.md nor %s", i, prunedFile)
				}
			}
			if !strings.Contains(now, "fact 399") {
				t.Errorf("the newest fact left MEMORY.md:\n%s", now)
			}
			if strings.Contains(pruned, "fact 399") {
				t.Errorf("a fact still in MEMORY.md was put in the pruned file")
			}
		})
	}
}

// TestAutoMemoryStaysLoadable: with memory_max_lines 200 and link_pruned
// (the claude-code preset), an over-long MEMORY.md keeps within both limits,
// its oldest facts move to a topic file beside it, and MEMORY.md ends with a
// link to that file: nothing the loader cuts is out of the agent's reach.
func TestAutoMemoryStaysLoadable(t *testing.T) {
	for _, tt := range []struct {
		name       string
		facts      int
		size       string
		wantMaxLen int
	}{
		{"over the lines", 320, "25KiB", 25 << 10},
		{"over the bytes", 150, "2KiB", 2 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			var mem strings.Builder
			mem.WriteString("# Project memory\n\n")
			for i := range tt.facts {
				fmt.Fprintf(&mem, "- note %03d: deploys go through make release\n", i)
			}
			src := strings.Replace(policyFor(ws, "", ""), "window: 50", "window: 50\n    memory_max_size: "+tt.size+"\n    memory_max_lines: 200\n    link_pruned: true", 1)
			os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte(mem.String()), 0o644)
			stop := run(t, src, t.TempDir())
			var topic string
			waitFor(t, "the topic file", 10*time.Second, func() bool {
				ms, _ := filepath.Glob(filepath.Join(ws, "memory-older-*.md"))
				if len(ms) == 1 {
					topic = ms[0]
				}
				return len(ms) == 1 && strings.Contains(read(filepath.Join(ws, "MEMORY.md")), "("+filepath.Base(ms[0])+")")
			})
			stop()
			now, older := read(filepath.Join(ws, "MEMORY.md")), read(topic)
			if n := strings.Count(now, "\n"); n > 200 || len(now) > tt.wantMaxLen {
				t.Errorf("MEMORY.md: %d lines, %d bytes; want at most 200 and %d", n, len(now), tt.wantMaxLen)
			}
			lines := strings.Split(strings.TrimSpace(now), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, "]("+filepath.Base(topic)+")") {
				t.Errorf("MEMORY.md's last line is %q, want the link to %s", last, filepath.Base(topic))
			}
			for i := range tt.facts {
				fact := fmt.Sprintf("- note %03d: deploys go through make release\n", i)
				if !strings.Contains(now, fact) && !strings.Contains(older, fact) {
					t.Fatalf("note %03d is in neither MEMORY.md nor %s", i, topic)
				}
			}
			if !strings.Contains(now, fmt.Sprintf("note %03d", tt.facts-1)) || !strings.Contains(older, "note 000") {
				t.Errorf("the newest note should stay and the oldest move out:\nMEMORY.md:\n%s", now)
			}
		})
	}
}

// TestWindowCountsPendingMessages: memory-history's rule for a reader that
// cannot trim the log. An agent writing one message at a time, each seen
// on its own, gets a consolidation of all but the newest keep when more
// than window are pending, then nothing until window are pending again:
// 100 messages (window 50, keep 10) are two requests, L1-41 at message 51
// and L42-82 at message 92, not one per message after the 51st.
func TestWindowCountsPendingMessages(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"history_entry":"[2026-02-27 14:30] consolidated","memory_update":""}`})
	ws := t.TempDir()
	stateDir := t.TempDir()
	run(t, policyFor(ws, srv.BaseURL(), ""), stateDir)
	log := filepath.Join(ws, "sessions", "slow.jsonl")
	for i := range 100 {
		appendLines(t, log, i, 1)
		time.Sleep(90 * time.Millisecond) // past the settle time: each message is its own evaluation
	}
	hist := filepath.Join(ws, "HISTORY.md")
	ranges := regexp.MustCompile(`#L(\d+)-(\d+)`)
	waitFor(t, "the second range", 5*time.Second, func() bool { return len(ranges.FindAllString(read(hist), -1)) >= 2 })
	time.Sleep(500 * time.Millisecond)
	// Each message is seen on its own on an idle machine: L1-41 at the
	// 51st, L42-82 at the 92nd. On a loaded one an evaluation may see a
	// message or two more pending: the ranges then end that much later,
	// the rule the same (all but the newest keep).
	got := ranges.FindAllStringSubmatch(read(hist), -1)
	next, ok := 1, srv.Calls() == 2 && len(got) == 2
	for _, m := range got {
		from, _ := strconv.Atoi(m[1])
		to, _ := strconv.Atoi(m[2])
		ok = ok && from == next && to-from+1 >= 41 && to-from+1 <= 45
		next = to + 1
	}
	if !ok {
		t.Errorf("got %d requests, ranges %v; want 2, L1-41 and L42-82 (a message or two later on a loaded machine)", srv.Calls(), got)
	}
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, err := db.Journal(context.Background(), state.Filter{Rule: memoryhistory.RuleConsolidate})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, r := range recs {
		reasons = append(reasons, r.Reason)
	}
	want := regexp.MustCompile(`(5\d) messages pending > window 50; consolidating (4\d), keeping the newest 10`)
	if !slices.ContainsFunc(reasons, func(r string) bool {
		m := want.FindStringSubmatch(r)
		if m == nil {
			return false
		}
		pending, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		return n == pending-10
	}) {
		t.Errorf("journal reasons %q; want one saying \"51 messages pending > window 50; consolidating 41, keeping the newest 10\" (or a message or two more)", reasons)
	}
}

// TestMirrorAfterConsolidations: the mirror rule parses only what was
// appended since it last looked while memwatch is the only writer, and
// still sees what an agent does: its own entry appended to HISTORY.md
// between consolidations, and its monthly file deleted, are mirrored.
func TestMirrorAfterConsolidations(t *testing.T) {
	ws := t.TempDir()
	src := strings.Replace(policyFor(ws, "", ""), "session_idle: 1h", "session_idle: 300ms", 1)
	run(t, src, t.TempDir())
	month := filepath.Join(ws, "HISTORY-"+time.Now().UTC().Format("2006-01")+".md")
	hist := filepath.Join(ws, "HISTORY.md")
	for i := range 3 {
		appendLines(t, filepath.Join(ws, "sessions", fmt.Sprintf("s%d.jsonl", i)), 0, 5)
		waitFor(t, "a consolidation", 5*time.Second, func() bool { return strings.Count(read(hist), "<!-- memwatch") == i+1 })
	}
	stamp := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	f, _ := os.OpenFile(hist, os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintf(f, "\n## %s\nthe agent's own entry\n", stamp)
	f.Close()
	waitFor(t, "the agent's entry mirrored", 5*time.Second, func() bool { return strings.Contains(read(month), "the agent's own entry") })
	appendLines(t, filepath.Join(ws, "sessions", "s9.jsonl"), 0, 5)
	waitFor(t, "a fourth consolidation", 5*time.Second, func() bool { return strings.Count(read(hist), "<!-- memwatch") == 4 })
	os.Remove(month)
	appendLines(t, filepath.Join(ws, "sessions", "s10.jsonl"), 0, 5)
	waitFor(t, "every entry mirrored again", 5*time.Second, func() bool {
		m := read(month)
		return strings.Count(m, "<!-- memwatch") == 5 && strings.Contains(m, "the agent's own entry")
	})
}
