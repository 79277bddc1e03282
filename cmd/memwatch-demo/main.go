// Command memwatch-demo shows memwatch doing its job: it creates a
// workspace with one root of every supported layout, starts the real
// memwatch daemon on it (offline heuristic compactor, no API key), drives a
// simulated agent that writes its memory the way the seeds describe, and
// prints what memwatch did. Run it with `make demo`.
package main

import (
	"bufio"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/mattn/go-isatty"
	_ "modernc.org/sqlite"
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
	sess := filepath.Join(dir, "coding", "sess-1")
	mem := filepath.Join(dir, "agent", "data", "memory")
	appDB := filepath.Join(dir, "records", "app.db")
	for _, d := range []string{filepath.Join(app, "memory", "run"), filepath.Join(dir, "state"), filepath.Join(ws, "sessions"),
		filepath.Join(sess, "working-memory", "detail"), filepath.Join(mem, "facts"), filepath.Join(mem, "episodes"), filepath.Dir(appDB)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Old run files, so retention has something to do.
	var oldRuns []string
	for i := 1; i <= 3; i++ {
		at := time.Now().AddDate(0, 0, -100-i)
		old := filepath.Join(app, "memory", "run", at.Format("2006-01-02-1504")+"-run.md")
		os.WriteFile(old, []byte("trigger: schedule\noutcome: ok\n"), 0o644)
		os.Chtimes(old, at, at) // written then: a file written now is never old, whatever its name says
		oldRuns = append(oldRuns, old)
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
  - name: coding
    layout: session-detail
    paths: ["%s/coding/*"]
    settle: 300ms
    summary_every: 20
    session_idle: 6s
    overview_max_size: 400B
  - name: agent
    layout: facts-episodes
    paths: ["%s/agent/data/memory"]
    settle: 300ms
    cooldown: 1s
  - name: records
    layout: app-records
    paths: ["%s/records/app.db"]
    settle: 300ms
    limit_per_app: 5
    create_table: true
`, dir, dir, dir, dir, dir, dir)
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
	stopped := false
	defer func() {
		if !stopped { // an error on the way: leave no daemon behind
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
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

	fmt.Printf("==> simulated agents run for %v, one per layout: a price-watching app (now-history), an agent with facts and episodes (facts-episodes),\n    a chat assistant (memory-history), a coding session (session-detail) and an app keeping memories in SQLite (app-records)\n", dur)
	agent := &agent{bin: bin, app: app, rng: rand.New(rand.NewPCG(1, 2))}
	chat := &chatAgent{ws: ws}
	coder := &codingAgent{dir: sess}
	facts := &factsAgent{bin: bin, root: mem}
	records, err := newRecordsApp(appDB)
	if err != nil {
		return err
	}
	defer records.Close()
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
		if err := coder.turn(runN); err != nil {
			return err
		}
		if err := facts.turn(runN); err != nil {
			return err
		}
		if err := records.turn(runN); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Println("   (waiting 8 s so the chat session goes idle and is consolidated to its end)")
	time.Sleep(8 * time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	stopped = true
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("memwatch exited: %w (see %s)", err, logPath)
	}
	var quiet []string
	for _, rule := range []string{"compact", "run-retention", "snapshot", "consolidate", "compress-memory", "summarize", "overview-guard", "summary-line", "index", "record-delete"} {
		out, err := exec.Command(bin, "log", "--policy", policyPath, "--rule", rule, "-n", "4", "--color", "never").CombinedOutput()
		if err != nil { // exit 1: the rule had nothing to do in this run
			quiet = append(quiet, rule)
			continue
		}
		fmt.Printf("\n==> what memwatch did: memwatch log --rule %s -n 4\n", rule)
		fmt.Print(indent(string(out)))
	}
	if len(quiet) > 0 {
		fmt.Printf("\n==> rules with nothing to do in this run: %s\n", strings.Join(quiet, ", "))
	}
	if hist, err := os.ReadFile(filepath.Join(ws, "HISTORY.md")); err == nil {
		entries := strings.Split(string(hist), "\n## ")
		fmt.Printf("\n==> the newest entry memwatch wrote to %s (heuristic compactor: memory-history's raw fallback):\n", rel(filepath.Join(ws, "HISTORY.md")))
		fmt.Print(indent("## " + strings.TrimSpace(entries[len(entries)-1])))
	}
	fmt.Printf("\n==> memwatch recall --dir %s migration   (session-detail's recall_memory, with citations)\n", rel(sess))
	out, _ := exec.Command(bin, "recall", "--dir", sess, "--limit", "3", "migration").CombinedOutput()
	fmt.Print(indent(string(out)))
	fmt.Printf("\n==> %s/INDEX.md, kept by memwatch (facts-episodes' memory index, summary lines written by memwatch)\n", rel(mem))
	idx, _ := os.ReadFile(filepath.Join(mem, "INDEX.md"))
	fmt.Print(indent(string(idx)))
	fmt.Printf("\n==> memwatch records context --policy %s --db %s --app calendar   (at most limit_per_app 5, oldest dropped first)\n", rel(policyPath), rel(appDB))
	out, _ = exec.Command(bin, "records", "context", "--policy", policyPath, "--db", appDB, "--app", "calendar").CombinedOutput()
	fmt.Print(indent(string(out)))
	archives, _ := filepath.Glob(filepath.Join(app, "memory", "*.md"))
	runs, _ := filepath.Glob(filepath.Join(app, "memory", "run", "*.md"))
	expired := 0
	for _, old := range oldRuns {
		if _, err := os.Stat(old); os.IsNotExist(err) {
			expired++
		}
	}
	fi, _ := os.Stat(filepath.Join(app, "memory.md"))
	fmt.Printf(`
==> where to look
   %s/memory.md            the agent's memory, kept under max_size (%s now)
   %s/memory/*.md          %d compaction archive(s): every byte memwatch removed
   %s/memory/run/          %d run file(s); %d of the %d older than run_retention (90d) removed
   %s/memory.snapshot.md   the injection-ready view, kept current
   %s                       the daemon's log
   %s/HISTORY.md           the assistant's history: consolidated session ranges, each citing its lines
   %s/HISTORY-*.md         the same entries filed by month
   %s/MEMORY.md            long-term facts, compressed when over memory_max_size (archives in memory/)
   %s/working-memory/detail/  the coding session's summaries, each citing its lines of messages.jsonl
   %s/INDEX.md             the facts-and-episodes index; summary lines in facts/ and episodes/
   %s                          the app's SQLite memories, held at limit_per_app
   %s log --policy %s      the journal again; %s undo ID restores any change
`, rel(app), humanize.IBytes(uint64(fi.Size())), rel(app), len(archives), rel(app), len(runs), expired, len(oldRuns), rel(app), rel(logPath), rel(ws), rel(ws), rel(ws), rel(sess), rel(mem), rel(appDB), rel(bin), rel(policyPath), rel(bin))
	return reviewPage(bin, dir, policyPath)
}

// reviewPage serves the review page on the demo's state in the
// foreground until Ctrl-C, when a person is watching (a terminal); else
// it says how to open it. Either way no process outlives the demo.
func reviewPage(bin, dir, policyPath string) error {
	// A terminal, not any character device: make demo > /dev/null served
	// the page until killed.
	if !isatty.IsTerminal(os.Stdout.Fd()) {
		fmt.Printf("\n==> the review page: %s ui --policy %s   (each change with its diff and an Undo button, a search with citations)\n", rel(bin), rel(policyPath))
		return nil
	}
	logf, err := os.Create(filepath.Join(dir, "ui.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(interrupt)
	for _, listen := range []string{"127.0.0.1:7878", "127.0.0.1:0"} {
		cmd := exec.Command(bin, "ui", "--policy", policyPath, "--listen", listen)
		cmd.Stderr = logf
		// Its own process group: the terminal's Ctrl-C reaches the demo,
		// which stops the page and waits for it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start memwatch ui: %w", err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if _, url, ok := strings.Cut(strings.TrimSpace(line), "open "); err == nil && ok {
			fmt.Printf("\n==> the review page: %s\n   everything above, in a browser: each change with its diff and an Undo button, a search with citations\n   (press Ctrl-C to stop it; memwatch ui --policy %s serves it again)\n", url, rel(policyPath))
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-interrupt:
				cmd.Process.Signal(syscall.SIGTERM)
				<-done
			case <-done:
			}
			return nil
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	return fmt.Errorf("memwatch ui did not start: see %s", filepath.Join(dir, "ui.log"))
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
	fmt.Printf("   agent: run %d (simulated time %s, a run an hour): %s (memory.md %s)\n", n, at.Format("2006-01-02 15:04"), summary, humanize.IBytes(uint64(len(s))))
	return os.WriteFile(runFile, []byte(fmt.Sprintf("trigger: schedule\noutcome: %s\nduration: 12s\ntokens: 3400\n", summary)), 0o644)
}

// chatAgent writes a chat session the way memory-history's agent does: JSONL
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

// codingAgent writes a coding session the way session-detail's agent does.
type codingAgent struct {
	dir string
}

func (c *codingAgent) turn(n int) error {
	if n == 1 {
		overview := "# Working Memory\n\n## Current Task\nMigrate the billing service to the new schema.\n\n## Key Decisions\n- one migration per table\n- keep a view for the payments service\n\n## Known Context\n- Postgres 15, Go 1.26\n\n## Pending Issues\n- users table is large; batch it\n\n## Recent Operations\n- wrote migrations 001-004\n"
		if err := os.WriteFile(filepath.Join(c.dir, "working-memory", "overview.md"), []byte(overview), 0o644); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "messages.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	file := fmt.Sprintf("migrations/%03d_table.sql", n%7+1)
	fmt.Fprintf(f, `{"role":"user","content":"Write the migration for %s, then run the tests."}`+"\n", file)
	fmt.Fprintf(f, `{"role":"assistant","content":[{"type":"text","text":"Wrote %s; the migration keeps the old columns until the backfill is done."},{"type":"tool_use","name":"Write","input":{}},{"type":"tool_use","name":"Bash","input":{}}]}`+"\n", file)
	return nil
}

// factsAgent keeps facts and episodes the way facts-episodes' Reflector does,
// through memwatch's own memory tools (the seed's memory_append).
type factsAgent struct {
	bin, root string
}

func (a *factsAgent) turn(n int) error {
	if n == 1 {
		os.WriteFile(filepath.Join(a.root, "facts", "user.md"), []byte("# User Facts\n\n- Name: Ada\n- Language: English discussion, Go code\n- Role: Platform engineer\n"), 0o644)
		os.WriteFile(filepath.Join(a.root, "facts", "project.md"), []byte("# Project Facts\n\n> Summary: billing platform, Postgres\n\n- Stack: Go, Postgres 15\n- Conventions: one migration per table\n"), 0o644)
	}
	if n%8 != 0 {
		return nil
	}
	month := time.Now().Format("2006-01")
	entry := fmt.Sprintf("## Migration batch %d\n- Summary: migration batch %d → done, tests green\n- Date: %s\n- Lesson: batch large tables\n", n/8, n/8, time.Now().Format("2006-01-02"))
	tmp := filepath.Join(os.TempDir(), fmt.Sprintf("memwatch-demo-entry-%d.md", os.Getpid()))
	os.WriteFile(tmp, []byte(entry), 0o644)
	defer os.Remove(tmp)
	target := filepath.Join("episodes", month+".md")
	if _, err := os.Stat(filepath.Join(a.root, target)); os.IsNotExist(err) {
		os.WriteFile(filepath.Join(a.root, target), []byte("# "+month+" Episodes\n"), 0o644)
	}
	if out, err := exec.Command(a.bin, "append", a.root, target, "--entry", tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("memwatch append: %v: %s", err, out)
	}
	return nil
}

// recordsApp is an application that keeps memories in SQLite (app-records).
type recordsApp struct{ db *sql.DB }

func newRecordsApp(path string) (*recordsApp, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	// The first write may meet memwatch reading the new file (switching
	// to WAL needs it alone): tried again, as an app would.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err = db.Exec(`CREATE TABLE IF NOT EXISTS app_memories (id INTEGER PRIMARY KEY AUTOINCREMENT, app_id TEXT NOT NULL, content TEXT NOT NULL,
		created_at DATETIME DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME DEFAULT CURRENT_TIMESTAMP, source_conversation_id TEXT, metadata TEXT)`)
		if err == nil || !strings.Contains(err.Error(), "locked") || time.Now().After(deadline) {
			break
		}
	}
	return &recordsApp{db: db}, err
}

func (r *recordsApp) Close() error { return r.db.Close() }

var calendarFacts = []string{"User prefers meetings after 2pm on weekdays.", "User is working on project Phoenix, deadline Nov 1.",
	"User's team standup is at 9:30.", "User blocks Fridays for focus time.", "User travels to Berlin next month.", "User wants reminders 15 minutes ahead."}

func (r *recordsApp) turn(n int) error {
	if n%3 != 0 {
		return nil
	}
	at := time.Now().Add(time.Duration(n) * time.Minute).UTC().Format("2006-01-02 15:04:05")
	_, err := r.db.Exec(`INSERT INTO app_memories (app_id, content, created_at, updated_at) VALUES ('calendar', ?, ?, ?)`,
		fmt.Sprintf("%s (conversation %d)", calendarFacts[(n/3)%len(calendarFacts)], n/3), at, at)
	return err
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

// shorten says a daemon log line in a few words: its message, the store,
// rule and file (the whole line is in memwatch.log).
func shorten(line string) string {
	f := logfmt(line)
	var b strings.Builder
	b.WriteString(f["msg"])
	for _, k := range []string{"store", "rule", "target", "path", "reason"} {
		if v := f[k]; v != "" {
			if k == "path" || k == "target" {
				v = rel(v)
			}
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	return b.String()
}

// logfmt reads the key=value pairs of a slog text line (values quoted
// when they hold spaces).
func logfmt(line string) map[string]string {
	out := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			for end < len(rest) && (rest[end] != '"' || rest[end-1] == '\\') {
				end++
			}
			if uq, err := strconv.Unquote(rest[:min(end+1, len(rest))]); err == nil {
				v = uq
			} else {
				v = rest[1:min(end, len(rest))]
			}
			rest = rest[min(end+1, len(rest)):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out[k] = v
		line = rest
	}
	return out
}

func rel(p string) string {
	wd, _ := os.Getwd()
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
