package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/compact/llmtest"
	"github.com/memwatch/memwatch/spool"
)

// seedAgentEnv makes this binary act as memory-history's agent on a session log.
const seedAgentEnv = "MEMWATCH_TEST_SEED_AGENT"

// seedAgent does to its session log what memory-history's agent (and the agents
// people run) do: it appends messages; whenever it holds more than 50 it
// trims to the newest 10 (after a delay that is sometimes shorter than
// memwatch's settle time), keeping its metadata line, by temp file and
// rename; and at its points it clears the session (/new), replaces it with
// unrelated content, truncates it to nothing and regrows it, and
// copy-truncates it. The ids of the messages it wrote go to stdout.
func seedAgent() {
	spec := os.Getenv(seedAgentEnv)
	if spec == "" {
		return
	}
	args := strings.SplitN(spec, "\x1f", 3)
	path, script := args[0], strings.Fields(args[2])
	next, _ := strconv.Atoi(args[1])
	var live []string
	inPlace := false
	save := func() {
		meta := fmt.Sprintf(`{"_type":"metadata","created_at":"2026-01-01T00:00:00Z","updated_at":"%d"}`, time.Now().UnixNano())
		if inPlace {
			// Truncate, then write line by line: a reader may see the
			// file with the metadata line alone, then growing.
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|os.O_CREATE, 0o644)
			f.WriteString(meta + "\n")
			time.Sleep(3 * time.Millisecond)
			for _, l := range live {
				f.WriteString(l + "\n")
			}
			f.Close()
			return
		}
		tmp := path + ".tmp"
		os.WriteFile(tmp, []byte(strings.Join(append([]string{meta}, live...), "\n")+"\n"), 0o644)
		os.Rename(tmp, path)
	}
	add := func(kind string) {
		m := fmt.Sprintf(`{"role":"%s","content":"%s %d %s"}`, []string{"user", "assistant"}[next%2], kind, next, strings.Repeat("x", 40))
		fmt.Println(kind, next)
		next++
		live = append(live, m)
		f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		f.WriteString(m + "\n")
		f.Close()
	}
	delays := []time.Duration{10 * time.Millisecond, 200 * time.Millisecond, 1500 * time.Millisecond}
	trims := 0
	for _, op := range script {
		name, arg, _ := strings.Cut(op, ":")
		n, _ := strconv.Atoi(arg)
		switch name {
		case "append": // append:N, one every 20 ms, trimming when over 50
			for range n {
				add("message")
				time.Sleep(20 * time.Millisecond)
				if len(live) > 50 {
					time.Sleep(delays[trims%len(delays)])
					trims++
					live = live[len(live)-10:]
					save()
				}
			}
		case "new": // /new: the session is cleared, the metadata line stays
			live = nil
			save()
		case "replace": // a full replacement with unrelated content
			live = nil
			save()
			for range n {
				add("other")
			}
		case "truncate": // truncation to nothing, then regrowth
			os.Truncate(path, 0)
			live = nil
			time.Sleep(50 * time.Millisecond)
		case "copytruncate": // logrotate's copytruncate
			b, _ := os.ReadFile(path)
			os.WriteFile(path+".1", b, 0o644)
			os.Truncate(path, 0)
			live = nil
			time.Sleep(50 * time.Millisecond)
		case "sleep":
			time.Sleep(time.Duration(n) * time.Millisecond)
		case "inplace": // later saves truncate and rewrite the file in place
			inPlace = true
		}
	}
	os.Exit(0)
}

// runSeedAgent runs the agent with script and returns the ids it wrote.
func runSeedAgent(t *testing.T, path string, first int, script string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), seedAgentEnv+"="+path+"\x1f"+strconv.Itoa(first)+"\x1f"+script, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

var sentRE = regexp.MustCompile(`(message|other) (\d+) x`)

// sent counts how often each message went to the model, over every request.
func sent(srv *llmtest.Server) map[string]int {
	n := map[string]int{}
	for _, r := range srv.Requests() {
		for _, m := range r.Messages {
			for _, s := range sentRE.FindAllStringSubmatch(m.Content, -1) {
				n[s[1]+" "+s[2]]++
			}
		}
	}
	return n
}

// TestEveryMessageReachesTheModelOnce runs memory-history's agent (and the same
// agent against a session-detail log) against the real memwatch with an
// LLM: whatever the agent does to its log, and across a kill of memwatch
// in the middle, every message it wrote is sent to the model exactly once.
func TestEveryMessageReachesTheModelOnce(t *testing.T) {
	for _, tc := range []struct {
		layout, log, options, answer string
	}{
		{"memory-history", "sessions/s1.jsonl", "    sessions: sessions/*.jsonl\n    window: 50\n    keep: 10\n    session_idle: 2s\n",
			`{"history_entry":"[2026-01-01 00:00] consolidated","memory_update":""}`},
		{"session-detail", "messages.jsonl", "    summary_every: 20\n    session_idle: 2s\n",
			`{"title":"T","summary":"S","keywords":["k"]}`},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.New(t, llmtest.Step{Content: tc.answer})
			dir := t.TempDir()
			root := filepath.Join(dir, "ws", "a")
			os.MkdirAll(filepath.Join(root, filepath.Dir(tc.log)), 0o755)
			log := filepath.Join(root, tc.log)
			stateDir := filepath.Join(dir, "state")
			pol := writePolicy(t, dir, fmt.Sprintf(`llm:
  default:
    base_url: %s
    model: fake
    timeout: 5s
stores:
  - name: s
    layout: %s
    paths: [%q]
    compactor: llm
    settle: 100ms
%s`, srv.BaseURL(), tc.layout, filepath.Join(dir, "ws", "*"), tc.options))
			p := start(t, "--policy", pol, "--state-dir", stateDir)
			p.waitLog("ready", 10*time.Second)
			wrote := runSeedAgent(t, log, 0, "append:70 new append:30 sleep:300 replace:15 append:45")
			// Kill memwatch while nothing is in flight but lines wait,
			// captured and not yet consolidated; the agent is paused (it
			// cannot trim what memwatch, being down, could not see).
			waitQuiet(t, srv)
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			p = start(t, "--policy", pol, "--state-dir", stateDir)
			p.waitLog("ready", 10*time.Second)
			// A truncation in place destroys the bytes themselves: what memwatch
			// has not captured by then is gone from the disk. Lines are
			// captured within milliseconds (tens under -race with every test
			// running), so the agent truncates a human pause after its last
			// write; renames, deletes and rewrites are safe at any speed.
			wrote = append(wrote, runSeedAgent(t, log, 1000, "append:40 sleep:300 truncate append:20 sleep:300 copytruncate append:55 sleep:200 new append:12")...)
			// Idle: the rest goes too.
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) && len(sent(srv)) < len(wrote) {
				time.Sleep(100 * time.Millisecond)
			}
			waitQuiet(t, srv)
			if err := p.stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			got := sent(srv)
			missing, twice := 0, 0
			for _, w := range wrote {
				switch got[w] {
				case 0:
					missing++
					if missing <= 5 {
						t.Errorf("%s never reached the model", w)
					}
				case 1:
				default:
					twice++
					if twice <= 5 {
						t.Errorf("%s reached the model %d times", w, got[w])
					}
				}
			}
			t.Logf("%s: %d messages written, %d LLM calls, %d missing, %d sent twice", tc.layout, len(wrote), srv.Calls(), missing, twice)
		})
	}
}

// TestTrimmedInPlaceReachesTheModelOnce: memory-history's agent trims its log to
// the newest 10 messages after 50 by rewriting it in place, so memwatch
// may capture the file with its metadata line alone, then the kept
// messages as they are written back; then it clears it with /new. Each of
// its 200 messages reaches the model exactly once, across the first trim
// too.
func TestTrimmedInPlaceReachesTheModelOnce(t *testing.T) {
	srv := llmtest.New(t, llmtest.Step{Content: `{"history_entry":"[2026-01-01 00:00] consolidated","memory_update":""}`})
	dir := t.TempDir()
	root := filepath.Join(dir, "ws", "a")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	pol := writePolicy(t, dir, fmt.Sprintf(`llm:
  default:
    base_url: %s
    model: fake
    timeout: 5s
stores:
  - name: s
    layout: memory-history
    paths: [%q]
    compactor: llm
    settle: 100ms
    sessions: sessions/*.jsonl
    window: 50
    keep: 10
    session_idle: 2s
`, srv.BaseURL(), filepath.Join(dir, "ws", "*")))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 10*time.Second)
	wrote := runSeedAgent(t, filepath.Join(root, "sessions", "s1.jsonl"), 0, "inplace append:200 sleep:300 new")
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && len(sent(srv)) < len(wrote) {
		time.Sleep(100 * time.Millisecond)
	}
	waitQuiet(t, srv)
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := sent(srv)
	missing, twice := 0, 0
	for _, w := range wrote {
		switch got[w] {
		case 0:
			if missing++; missing <= 5 {
				t.Errorf("%s never reached the model", w)
			}
		case 1:
		default:
			if twice++; twice <= 5 {
				t.Errorf("%s reached the model %d times", w, got[w])
			}
		}
	}
	t.Logf("%d messages written, %d LLM calls, %d missing, %d sent twice", len(wrote), srv.Calls(), missing, twice)
}

// waitQuiet waits until no LLM call arrived for a second.
func waitQuiet(t *testing.T, srv *llmtest.Server) {
	t.Helper()
	last, since := srv.Calls(), time.Now()
	for time.Since(since) < time.Second {
		time.Sleep(100 * time.Millisecond)
		if n := srv.Calls(); n != last {
			last, since = n, time.Now()
		}
	}
}

// TestShowKeepsACitationTrue: a citation written before the agent trimmed
// its log still shows the same lines afterwards (memwatch show).
func TestShowKeepsACitationTrue(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "ws", "a")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("state_dir: %s\nstores:\n  - name: s\n    layout: memory-history\n    paths: [%q]\n    settle: 50ms\n    window: 50\n    keep: 10\n    session_idle: 1h\n", stateDir, filepath.Join(dir, "ws", "*")))
	p := start(t, "--policy", pol)
	p.waitLog("ready", 10*time.Second)
	log := filepath.Join(root, "sessions", "s1.jsonl")
	runSeedAgent(t, log, 0, "append:52")
	// The oldest 41 messages (L1-41) are consolidated when the log holds 51;
	// the agent keeps the newest 10 then, by rewriting the file.
	var cite string
	deadline := time.Now().Add(10 * time.Second)
	for cite == "" && time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(root, "HISTORY.md"))
		if m := regexp.MustCompile(`memwatch: (sessions/s1\.jsonl\S*#L\d+-\d+) range:`).FindSubmatch(b); m != nil {
			cite = string(m[1])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cite == "" {
		t.Fatal("no consolidation")
	}
	out, err := exec.Command(memwatchBin, "show", "--policy", pol, "--dir", root, cite).CombinedOutput()
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	c, _ := spool.ParseCitation(cite)
	for i := c.From; i <= c.To; i++ {
		if !strings.Contains(string(out), fmt.Sprintf("message %d ", i-1)) {
			t.Errorf("show %s lacks message %d:\n%s", cite, i-1, out)
			break
		}
	}
	if !strings.Contains(string(out), "(from the spool") {
		t.Errorf("the lines were trimmed from the log; show should say they come from the spool:\n%s", out)
	}
	p.stop(5 * time.Second)
}
