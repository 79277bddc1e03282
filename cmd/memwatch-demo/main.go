// Command memwatch-demo shows memwatch doing its job: it creates a
// workspace with one root of every supported layout, starts the real
// memwatch daemon on it (offline heuristic compactor, no API key), drives a
// simulated agent that writes its memory the way the seeds describe, and
// prints what memwatch did. Run it with `make demo`.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "bin/memwatch", "memwatch binary")
	dir := flag.String("dir", "demo", "workspace directory (recreated)")
	dur := flag.Duration("duration", 25*time.Second, "how long the simulated agent runs")
	flag.Parse()
	if err := run(*bin, *dir, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(bin, dir string, dur time.Duration) error {
	bin, _ = filepath.Abs(bin)
	dir, _ = filepath.Abs(dir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	app := filepath.Join(dir, "spaces", "home", "apps", "price-watcher")
	ws := filepath.Join(dir, "workspaces", "assistant", "memory")
	for _, d := range []string{filepath.Join(app, "memory", "run"), filepath.Join(dir, "state"), filepath.Join(ws, "sessions")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Old run files, so retention has something to do.
	for i := 1; i <= 3; i++ {
		old := time.Now().AddDate(0, 0, -100-i).Format("2006-01-02-1504")
		os.WriteFile(filepath.Join(app, "memory", "run", old+"-run.md"), []byte("trigger: schedule\noutcome: ok\n"), 0o644)
	}
	policyPath := filepath.Join(dir, "policy.yaml")
	policy := fmt.Sprintf(`version: 1
state_dir: %s/state
stores:
  - name: apps
    layout: now-history
    paths: ["%s/spaces/*/apps/*"]
    compactor: heuristic
    settle: 300ms
    cooldown: 5s
    max_size: 8KiB
    keep_history: 5
    run_retention: 90d
    snapshot_file: memory.snapshot.md
  - name: assistant
    layout: memory-history
    paths: ["%s/workspaces/*/memory"]
    compactor: heuristic
    settle: 300ms
    cooldown: 2s
    window: 20
    keep: 5
    session_idle: 6s
    memory_max_size: 1KiB
`, dir, dir, dir)
	if err := os.WriteFile(policyPath, []byte(policy), 0o644); err != nil {
		return err
	}
	fmt.Printf("==> workspace %s\n==> policy %s:\n%s\n", dir, policyPath, indent(policy))

	logPath := filepath.Join(dir, "memwatch.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--policy", policyPath, "--log-format", "text")
	cmd.Stdout = logf
	pr, pw, _ := os.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start memwatch: %w", err)
	}
	pw.Close()
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt, syscall.SIGTERM)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		closed := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if strings.Contains(line, "msg=ready") && !closed {
				close(ready)
				closed = true
			}
			if (strings.Contains(line, "rewrote file") || strings.Contains(line, "removed file") || strings.Contains(line, "msg=ready")) && !strings.Contains(line, "rule=snapshot") {
				fmt.Println("   memwatch:", shorten(line))
			}
		}
	}()
	fmt.Printf("==> started memwatch (pid %d), log in %s\n", cmd.Process.Pid, logPath)
	select {
	case <-ready:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		return fmt.Errorf("memwatch did not become ready; see %s", logPath)
	}

	fmt.Printf("==> simulated agents run for %v: a price-watching app (seed 000) and a chat assistant (seed 002)\n", dur)
	agent := &agent{bin: bin, app: app, rng: rand.New(rand.NewPCG(1, 2))}
	chat := &chatAgent{ws: ws}
	deadline := time.Now().Add(dur)
	for runN := 1; time.Now().Before(deadline); runN++ {
		select {
		case <-interrupt:
			deadline = time.Now()
			continue
		default:
		}
		if err := agent.run(runN); err != nil {
			return err
		}
		if err := chat.turn(runN); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Println("   (waiting 8 s so the chat session goes idle and is consolidated to its end)")
	time.Sleep(8 * time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("memwatch exited: %w (see %s)", err, logPath)
	}
	for _, rule := range []string{"compact", "run-retention", "snapshot", "consolidate", "compress-memory"} {
		fmt.Printf("\n==> what memwatch did: memwatch log --rule %s\n", rule)
		out, _ := exec.Command(bin, "log", "--policy", policyPath, "--rule", rule, "--limit", "8").CombinedOutput()
		fmt.Print(indent(string(out)))
	}
	if hist, err := os.ReadFile(filepath.Join(ws, "HISTORY.md")); err == nil {
		entries := strings.Split(string(hist), "\n## ")
		fmt.Printf("\n==> the newest entry memwatch wrote to %s (heuristic compactor: seed 002's raw fallback):\n", rel(filepath.Join(ws, "HISTORY.md")))
		fmt.Print(indent("## " + strings.TrimSpace(entries[len(entries)-1])))
	}
	archives, _ := filepath.Glob(filepath.Join(app, "memory", "*.md"))
	runs, _ := filepath.Glob(filepath.Join(app, "memory", "run", "*.md"))
	fi, _ := os.Stat(filepath.Join(app, "memory.md"))
	fmt.Printf(`
==> where to look
   %s/memory.md            the agent's memory, kept under max_size (%d bytes now)
   %s/memory/*.md          %d compaction archive(s): every byte memwatch removed
   %s/memory/run/          %d run file(s): those older than run_retention were removed
   %s/memory.snapshot.md   the injection-ready view, kept current
   %s                       the daemon's log
   %s/HISTORY.md           the assistant's history: consolidated session ranges, each citing its lines
   %s/HISTORY-*.md         the same entries filed by month
   %s/MEMORY.md            long-term facts, compressed when over memory_max_size (archives in memory/)
   %s log --policy %s      the journal again; %s undo ID restores any change
`, rel(app), fi.Size(), rel(app), len(archives), rel(app), len(runs), rel(app), rel(logPath), rel(ws), rel(ws), rel(ws), rel(bin), rel(policyPath), rel(bin))
	return nil
}

// agent writes memory like the seed's platform and AI do: the platform
// stamps a History heading, the AI edits # now and fills in the summary,
// and the platform saves a run file.
type agent struct {
	bin   string
	app   string
	rng   *rand.Rand
	price int
	runs  int
}

func (a *agent) run(n int) error {
	mem := filepath.Join(a.app, "memory.md")
	if a.price == 0 {
		a.price = 1199
		initial := "# now\n\n## State | watching AirPods Pro\n- runs_completed: 0\n- alerts_sent: 0\n- last_result: none\n\n## AirPods Pro (JD.com)\n- current_price: ¥1199\n- lowest_seen: ¥1099\n\n## Patterns\n- prices are lowest on weekday mornings\n\n## Errors\n- JD anti-bot: switch to mobile User-Agent header\n\n# History\n"
		if err := os.WriteFile(mem, []byte(initial), 0o644); err != nil {
			return err
		}
	}
	at := time.Now().Add(time.Duration(n) * time.Hour) // one simulated run per hour
	stamp := at.Format("2006-01-02-1504")
	if out, err := exec.Command(a.bin, "stamp", mem, "--at", at.Format("2006-01-02T15:04")).CombinedOutput(); err != nil {
		return fmt.Errorf("stamp: %v: %s", err, out)
	}
	a.runs++
	old := a.price
	a.price += []int{-50, 0, 30, 20, -10}[a.rng.IntN(5)]
	summary := "routine check, no change"
	detail := ""
	if a.price != old {
		summary = fmt.Sprintf("AirPods ¥%d→¥%d", old, a.price)
		detail = fmt.Sprintf("### Details\n- AirPods Pro: ¥%d→¥%d\n- checked JD.com listing and two resellers; %s\n", old, a.price, strings.Repeat("noted seller ratings and shipping times; ", 8))
	}
	b, err := os.ReadFile(mem)
	if err != nil {
		return err
	}
	s := string(b)
	// The AI's Edit calls: fill in the summary after the stamp, update State.
	s = strings.Replace(s, "## "+stamp+"\n", "## "+stamp+" | "+summary+"\n"+detail, 1)
	s = replaceLine(s, "- runs_completed:", fmt.Sprintf("- runs_completed: %d", a.runs))
	s = replaceLine(s, "- current_price:", fmt.Sprintf("- current_price: ¥%d", a.price))
	s = replaceLine(s, "- last_result:", "- last_result: "+summary)
	tmp := mem + ".edit"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, mem); err != nil { // editors save by rename
		return err
	}
	runFile := filepath.Join(a.app, "memory", "run", stamp+"-run.md")
	fmt.Printf("   agent: run %d at %s: %s (memory.md %d bytes)\n", n, stamp, summary, len(s))
	return os.WriteFile(runFile, []byte(fmt.Sprintf("trigger: schedule\noutcome: %s\nduration: 12s\ntokens: 3400\n", summary)), 0o644)
}

// chatAgent writes a chat session the way seed 002's agent does: JSONL
// messages, plus facts it keeps in MEMORY.md itself.
type chatAgent struct {
	ws string
	n  int
}

var chatTurns = []struct{ user, assistant string }{
	{"Can you help me plan the database migration?", "Sure. Let's list the tables first and check which ones have foreign keys."},
	{"We use Postgres 15, and I prefer small reversible steps.", "Noted: Postgres 15, small reversible migrations. I'll write one migration per table."},
	{"The users table is the biggest one.", "Then we migrate users last, in batches of 10,000 rows, behind a feature flag."},
	{"What about the payments service?", "It reads users directly; we add a view so it keeps working during the migration."},
}

func (c *chatAgent) turn(n int) error {
	f, err := os.OpenFile(filepath.Join(c.ws, "sessions", "chat-1.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	t := chatTurns[n%len(chatTurns)]
	now := time.Now().UTC().Format(time.RFC3339)
	fmt.Fprintf(f, `{"role":"user","content":%q,"timestamp":%q}`+"\n", t.user, now)
	fmt.Fprintf(f, `{"role":"assistant","content":[{"type":"text","text":%q},{"type":"tool_use","name":"Read","input":{}}],"timestamp":%q}`+"\n", t.assistant, now)
	c.n += 2
	if n%3 == 0 {
		// The agent appends a fact to MEMORY.md (sometimes one it already has).
		m, _ := os.OpenFile(filepath.Join(c.ws, "MEMORY.md"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		fmt.Fprintf(m, "- prefers small reversible migrations (noted in turn %d)\n- uses Postgres 15\n", n%4)
		m.Close()
	}
	if n%10 == 0 {
		fmt.Printf("   chat: %d messages in sessions/chat-1.jsonl\n", c.n)
	}
	return nil
}

func replaceLine(s, prefix, line string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i] = line
			break
		}
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	return "   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ") + "\n"
}

func shorten(line string) string {
	if i := strings.Index(line, "msg="); i >= 0 {
		line = line[i:]
	}
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}

func rel(p string) string {
	wd, _ := os.Getwd()
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
