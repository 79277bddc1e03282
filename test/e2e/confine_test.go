package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/memwatch/memwatch/state"
)

// The confinement suite runs memwatch as root over directories an
// unprivileged agent owns, with the agent doing its worst: symlinked
// roots, symlinked inputs, symlinked archive and detail directories, and a
// loop swapping directories for symlinks while jobs run. Nothing outside
// the roots may be read into the agent's files, created, changed or
// deleted, and what memwatch creates must belong to the agent.

// agentUID is the unprivileged agent: a uid with no other files on the
// machine (MEMWATCH_TEST_AGENT_UID overrides it).
func agentUID() int {
	if n, err := strconv.Atoi(os.Getenv("MEMWATCH_TEST_AGENT_UID")); err == nil {
		return n
	}
	return 64711
}

const helperEnv = "MEMWATCH_TEST_AGENT_HELPER"

// agentHelperMain runs the agent's side when this binary is re-executed as
// the agent: "swap" swaps paths for symlinks in a loop, "append" appends
// lines to files, "records" inserts rows; each until its deadline, never
// stopping on an error (the swaps make the agent's own writes fail too).
func agentHelperMain() {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	args := strings.Split(os.Getenv(helperEnv+"_ARGS"), "\x1f")
	until := time.Now().Add(30 * time.Second)
	if d, err := time.ParseDuration(os.Getenv(helperEnv + "_FOR")); err == nil {
		until = time.Now().Add(d)
	}
	switch mode {
	case "swap": // args: path, symlink target, path, target, ...
		for i := 0; time.Now().Before(until); i++ {
			for j := 0; j+1 < len(args); j += 2 {
				p, target := args[j], args[j+1]
				if os.Rename(p, p+".real") == nil {
					os.Symlink(target, p)
					time.Sleep(time.Duration(i%3) * time.Millisecond)
					os.Remove(p)
					os.Rename(p+".real", p)
				}
			}
			time.Sleep(time.Millisecond)
		}
	case "append": // args: file, format with %d, file, format, ...
		for i := 0; time.Now().Before(until); i++ {
			for j := 0; j+1 < len(args); j += 2 {
				if f, err := os.OpenFile(args[j], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err == nil {
					fmt.Fprintf(f, args[j+1], i)
					f.Close()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	case "gets": // args: socket, URL paths: one GET after another as this user, a JSON answer each
		c := socketClient(args[0])
		c.Timeout = 30 * time.Second
		enc := json.NewEncoder(os.Stdout)
		for _, path := range args[1:] {
			start := time.Now()
			var g gotAs
			if resp, err := c.Get("http://memwatch" + path); err != nil {
				g.Body = err.Error()
			} else {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				g.Code, g.Body = resp.StatusCode, string(body)
			}
			g.Took = time.Since(start)
			enc.Encode(g)
		}
	case "flood": // args: socket, URL path, parallel, rounds: GETs at once as this user
		n, _ := strconv.Atoi(args[2])
		rounds, _ := strconv.Atoi(args[3])
		c := socketClient(args[0])
		c.Timeout = 2 * time.Minute
		var mu sync.Mutex
		codes := map[int]int{}
		var worst time.Duration
		var bytes int64
		for range rounds {
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					code := 0
					var got int64
					if resp, err := c.Get("http://memwatch" + args[1]); err == nil {
						got, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = resp.StatusCode
					}
					mu.Lock()
					codes[code]++
					worst, bytes = max(worst, time.Since(start)), max(bytes, got)
					mu.Unlock()
				}()
			}
			wg.Wait()
		}
		fmt.Printf("%v %d %d\n", codes, worst.Milliseconds(), bytes)
	case "hold": // args: socket, count: connections held open (idle, kept alive, a POST with no body)
		n, _ := strconv.Atoi(args[1])
		var held []net.Conn
		for i := 0; i < n && time.Now().Before(until); i++ {
			c, err := net.Dial("unix", args[0])
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			switch i % 3 {
			case 1:
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: memwatch\r\n\r\n")
			case 2:
				fmt.Fprintf(c, "POST /v1/trigger HTTP/1.1\r\nHost: memwatch\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
			}
			held = append(held, c)
		}
		fmt.Printf("held %d\n", len(held))
		os.Stdout.Sync()
		time.Sleep(time.Until(until))
		for _, c := range held {
			c.Close()
		}
	case "mcpinit": // args: socket, count: MCP sessions opened one after another
		n, _ := strconv.Atoi(args[1])
		c := socketClient(args[0])
		codes := map[int]int{}
		for i := range n {
			req, _ := http.NewRequest("POST", "http://memwatch/mcp", strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c%d","version":"1"}}}`, i)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			code := 0
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			codes[code]++
		}
		fmt.Printf("%v\n", codes)
	case "records": // args: database
		db, err := sql.Open("sqlite", "file:"+args[0]+"?_pragma=busy_timeout(5000)")
		if err != nil {
			os.Exit(1)
		}
		for i := 0; time.Now().Before(until); i++ {
			db.Exec(`INSERT INTO app_memories(app_id, content) VALUES('A', ?)`, fmt.Sprintf("agent memory %d", i))
			time.Sleep(100 * time.Millisecond)
		}
		db.Close()
	}
	os.Exit(0)
}

// tree is what a directory holds: every entry's mode, owner, size, link
// target or content hash, and modification time.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			out[p] = "error: " + err.Error()
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d %d %d", fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(h[:8])
		}
		out[p] = desc
		return nil
	})
	return out
}

// asAgent runs f's file creation as the agent would: chown to the agent.
func own(t *testing.T, uid int, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfinementAsRootWithAnUnprivilegedAgent(t *testing.T) {
	t.Parallel() // mostly waits on the daemon and its agents: beside the other such tests
	if os.Geteuid() != 0 {
		t.Skip("the confinement suite needs root (it runs memwatch as root beside an unprivileged agent); CI runs it as root")
	}
	uid := agentUID()
	var rnd [8]byte
	rand.Read(rnd[:])
	secret := "ROOTONLY-SECRET-" + hex.EncodeToString(rnd[:])

	// A base directory everyone can traverse (t.TempDir is root-only).
	base, err := os.MkdirTemp("", "memwatch-confine")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	// The agent runs a copy of this test binary it can execute.
	helper := filepath.Join(base, "agent-helper")
	copyFile(t, os.Args[0], helper, 0o755)

	// What only root may see.
	ro := filepath.Join(base, "rootonly")
	mkfile := func(p, content string, mode fs.FileMode) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	big := func(tag string) string {
		var b strings.Builder
		b.WriteString("# now\n\n## State | " + tag + "\n- " + tag + "\n\n# History\n\n")
		for i := range 40 {
			fmt.Fprintf(&b, "## 2026-01-%02d-%04d | %s %d\n- %s\n\n", i%28+1, i, tag, i, strings.Repeat("detail ", 12))
		}
		return b.String()
	}
	mkfile(filepath.Join(ro, "secret.md"), big(secret), 0o600)
	mkfile(filepath.Join(ro, "nhroot", "memory.md"), big(secret), 0o600)
	mkfile(filepath.Join(ro, "nhroot", "memory", "run", "2000-01-01-0000-run.md"), secret, 0o600)
	var jl strings.Builder
	for i := range 30 {
		fmt.Fprintf(&jl, `{"role":"user","content":"%s message %d"}`+"\n", secret, i)
	}
	mkfile(filepath.Join(ro, "secret.jsonl"), jl.String(), 0o600)
	mkfile(filepath.Join(ro, "history.md"), "# History\n\n## 2026-01-01T00:00:00Z\n"+secret+" entry\n", 0o600)
	os.MkdirAll(filepath.Join(ro, "dir"), 0o700)
	rootDB := filepath.Join(ro, "root.db")
	makeRecordsDB(t, rootDB, secret, 6)
	os.Chmod(ro, 0o700)

	// What the agent owns: one directory per layout, roots below it.
	ws := filepath.Join(base, "ws")
	os.MkdirAll(ws, 0o755)
	var agentPaths []string
	adir := func(p string) string {
		os.MkdirAll(p, 0o750)
		for d := p; d != ws && strings.HasPrefix(d, ws); d = filepath.Dir(d) {
			agentPaths = append(agentPaths, d)
		}
		return p
	}
	afile := func(p, content string) {
		adir(filepath.Dir(p))
		os.WriteFile(p, []byte(content), 0o640)
		agentPaths = append(agentPaths, p)
	}
	alink := func(target, p string) {
		adir(filepath.Dir(p))
		os.Symlink(target, p)
		agentPaths = append(agentPaths, p)
	}
	for _, l := range []string{"nh", "fe", "mh", "sd", "ar"} {
		adir(filepath.Join(ws, l))
	}
	// now-history
	afile(filepath.Join(ws, "nh/a/memory.md"), big("agent a"))
	afile(filepath.Join(ws, "nh/a/memory/run/2000-01-01-0000-run.md"), "an old run")
	alink(filepath.Join(ro, "secret.md"), filepath.Join(ws, "nh/b/memory.md"))
	alink(filepath.Join(ro, "nhroot"), filepath.Join(ws, "nh/evil"))
	afile(filepath.Join(ws, "nh/d/placeholder"), "")
	mkfile(filepath.Join(ws, "nh/d/memory.md"), big(secret), 0o600) // root-only, inside an agent root
	// facts-episodes
	afile(filepath.Join(ws, "fe/a/facts/user.md"), "# User\n\n- Name: Alice\n- Role: dev\n")
	afile(filepath.Join(ws, "fe/a/episodes/2026-01.md"), "# 2026-01 Episodes\n\n## Fix\n- Summary: fixed the thing\n- Date: 2026-01-03\n")
	alink(filepath.Join(ro, "secret.md"), filepath.Join(ws, "fe/a/facts/ext.md"))
	// memory-history
	afile(filepath.Join(ws, "mh/a/MEMORY.md"), "# Memory\n- likes tea\n")
	afile(filepath.Join(ws, "mh/a/sessions/s1.jsonl"), `{"role":"user","content":"hello"}`+"\n")
	alink(filepath.Join(ro, "secret.jsonl"), filepath.Join(ws, "mh/a/sessions/s2.jsonl"))
	alink(filepath.Join(ro, "history.md"), filepath.Join(ws, "mh/b/HISTORY.md"))
	// session-detail
	alink(filepath.Join(ro, "secret.jsonl"), filepath.Join(ws, "sd/a/messages.jsonl"))
	afile(filepath.Join(ws, "sd/b/messages.jsonl"), `{"role":"user","content":"start"}`+"\n")
	afile(filepath.Join(ws, "sd/b/working-memory/overview.md"), "# Working Memory\n")
	alink(filepath.Join(ro, "dir"), filepath.Join(ws, "sd/c/working-memory/detail"))
	afile(filepath.Join(ws, "sd/c/messages.jsonl"), strings.Repeat(`{"role":"user","content":"c"}`+"\n", 12))
	// app-records
	appDB := filepath.Join(ws, "ar/app.db")
	makeRecordsDB(t, appDB, "agent", 5)
	agentPaths = append(agentPaths, appDB)
	alink(rootDB, filepath.Join(ws, "ar/evil.db"))
	own(t, uid, agentPaths...)

	before := tree(t, ro)
	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`stores:
  - name: nh
    layout: now-history
    paths: [%q]
    settle: 50ms
    cooldown: 0s
    max_size: 2KiB
    keep_history: 2
    run_retention: 1s
    snapshot_file: memory.snapshot.md
  - name: fe
    layout: facts-episodes
    paths: [%q]
    settle: 50ms
    cooldown: 0s
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 50ms
    cooldown: 0s                  # a consolidation refused during a swap retries at once, not in 5m
    sessions: sessions/*.jsonl
    window: 4
    keep: 1
    session_idle: 1s
  - name: sd
    layout: session-detail
    paths: [%q]
    settle: 50ms
    cooldown: 0s
    summary_every: 5
    session_idle: 1s
  - name: ar
    layout: app-records
    paths: [%q]
    settle: 50ms
    limit_per_app: 3
`, filepath.Join(ws, "nh/*"), filepath.Join(ws, "fe/*"), filepath.Join(ws, "mh/*"), filepath.Join(ws, "sd/*"), filepath.Join(ws, "ar/*.db")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)

	// The agent at work for a while: writing, and swapping directories (and
	// its database) for symlinks into root-only places the whole time.
	race := 30 * time.Second
	if testing.Short() {
		race = 5 * time.Second
	}
	agent := func(mode string, args ...string) *exec.Cmd {
		cmd := exec.Command(helper, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperEnv+"_ARGS="+strings.Join(args, "\x1f"), helperEnv+"_FOR="+race.String(),
			"GORACE=atexit_sleep_ms=0")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		cmd.Dir = base
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	agents := []*exec.Cmd{
		agent("append",
			filepath.Join(ws, "nh/a/memory.md"), "## 2026-02-01-%04d | agent run\n- did things\n\n",
			filepath.Join(ws, "mh/a/sessions/s1.jsonl"), `{"role":"user","content":"message %d"}`+"\n",
			filepath.Join(ws, "sd/b/messages.jsonl"), `{"role":"assistant","content":"answer %d"}`+"\n",
			filepath.Join(ws, "fe/a/episodes/2026-01.md"), "\n## Task %d\n- Summary: did a task\n- Date: 2026-01-04\n"),
		agent("swap",
			filepath.Join(ws, "nh/a/memory"), filepath.Join(ro, "dir"),
			filepath.Join(ws, "nh/a"), filepath.Join(ro, "nhroot"),
			filepath.Join(ws, "mh/a/sessions"), filepath.Join(ro, "dir"),
			filepath.Join(ws, "sd/b/working-memory"), filepath.Join(ro, "dir"),
			filepath.Join(ws, "fe/a/facts"), filepath.Join(ro, "dir"),
			filepath.Join(ws, "ar/app.db"), rootDB),
		agent("records", appDB),
	}
	for _, a := range agents {
		a.Wait()
	}
	// The last jobs settle and sessions go idle: under load, jobs racing the
	// swaps may all have been refused, so wait for the work they left.
	deadline := time.Now().Add(30 * time.Second)
	for _, rule := range []string{"consolidate", "summarize", "compact"} {
		for time.Now().Before(deadline) {
			out, _ := exec.Command(memwatchFast, "log", "--state-dir", stateDir, "--json", "--rule", rule, "--limit", "1000").Output()
			if strings.Contains(string(out), `"outcome": "done"`) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second)
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// 1. Nothing outside the roots was created, changed or deleted.
	after := tree(t, ro)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("root-only %s changed:\n  before %s\n  after  %s", k, v, after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("memwatch created %s (%s) outside every root", k, v)
		}
	}
	// 2. No byte of a root-only file is anywhere in the agents' roots, and
	// 3. everything there belongs to the agent.
	filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, _ := os.Lstat(path)
		st := fi.Sys().(*syscall.Stat_t)
		if path == filepath.Join(ws, "nh/d/memory.md") {
			return nil // root's own file in the agent's root: left alone, checked below
		}
		if path != ws && (int(st.Uid) != uid || int(st.Gid) != uid) {
			t.Errorf("%s is owned by %d:%d, not the agent (%d)", path, st.Uid, st.Gid, uid)
		}
		if fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), secret) {
				t.Errorf("%s holds bytes of a root-only file", path)
			}
		}
		return nil
	})
	if b, _ := os.ReadFile(filepath.Join(ws, "nh/d/memory.md")); string(b) != big(secret) {
		t.Errorf("the root-only memory.md inside an agent root was changed")
	}
	// 4. The agent can still create its own files where memwatch created directories.
	for _, cmd := range []string{
		"mkdir -p " + filepath.Join(ws, "nh/a/memory/run/new") + " && touch " + filepath.Join(ws, "nh/a/memory/run/2026-02-01-0000-run.md"),
		"touch " + filepath.Join(ws, "sd/b/working-memory/detail/note.md") + " " + filepath.Join(ws, "sd/b/working-memory/overview.md"),
		"touch " + filepath.Join(ws, "mh/a/memory-note.md"),
	} {
		c := exec.Command("sh", "-c", cmd)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("as the agent: %s: %v %s", cmd, err, out)
		}
	}
	// 5. The journal says what was refused, and work was done meanwhile.
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{})
	count := map[string]int{}
	refusedRoot, skippedInput := false, false
	for _, r := range recs {
		count[r.Store+"/"+r.Rule+"/"+r.Outcome]++
		refusedRoot = refusedRoot || r.Rule == "root-refused" && strings.HasSuffix(r.Root, "/nh/evil")
		skippedInput = skippedInput || r.Outcome == state.Skipped && strings.HasPrefix(r.Reason, "not read:")
	}
	t.Logf("journal: %v", count)
	if !refusedRoot {
		t.Error("no journal record of the refused symlinked root nh/evil")
	}
	if !skippedInput {
		t.Error("no journal record of a skipped symlinked input")
	}
	if count["nh/compact/done"] == 0 || count["sd/summarize/done"] == 0 || count["mh/consolidate/done"] == 0 {
		t.Errorf("the layouts did no work during the race (%v); the test did not exercise them", count)
		for _, r := range recs {
			if r.Outcome != state.Done {
				t.Logf("%s %s %s %s: %s", r.Store, r.Root, r.Rule, r.Outcome, r.Reason)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string, mode fs.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
}

// makeRecordsDB creates an app_memories database with n records of app A.
func makeRecordsDB(t *testing.T, path, tag string, n int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE app_memories (id INTEGER PRIMARY KEY AUTOINCREMENT, app_id TEXT NOT NULL, content TEXT NOT NULL,
		created_at DATETIME DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME DEFAULT CURRENT_TIMESTAMP, source_conversation_id TEXT, metadata TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		db.Exec(`INSERT INTO app_memories(app_id, content) VALUES('A', ?)`, fmt.Sprintf("%s record %d", tag, i))
	}
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestBoundsKeepTheDaemonSmall: a 2 GB (sparse) memory.md and a 64 MB
// single-line session log do not make memwatch load them: its peak RSS
// stays under a stated bound, the oversize file is skipped and reported,
// the huge line is counted and cut, and nothing is lost.
func TestBoundsKeepTheDaemonSmall(t *testing.T) {
	dir := t.TempDir()
	nh := filepath.Join(dir, "nh", "a")
	sd := filepath.Join(dir, "sd", "s")
	os.MkdirAll(nh, 0o755)
	os.MkdirAll(sd, 0o755)
	mem := filepath.Join(nh, "memory.md")
	f, _ := os.Create(mem)
	f.WriteString("# now\n\n## State | sparse\n\n# History\n")
	f.Truncate(2 << 30)
	f.Close()
	huge := strings.Repeat("y", 64<<20)
	os.WriteFile(filepath.Join(sd, "messages.jsonl"), []byte(`{"role":"user","content":"before"}`+"\n"+`{"role":"user","content":"`+huge+`"}`+"\n"+`{"role":"user","content":"after"}`+"\n"), 0o644)
	pol := writePolicy(t, dir, fmt.Sprintf(`stores:
  - name: nh
    layout: now-history
    paths: [%q]
    settle: 50ms
  - name: sd
    layout: session-detail
    paths: [%q]
    settle: 50ms
    cooldown: 0s
    summary_every: 2
    session_idle: 1s
    max_line: 64KiB
`, filepath.Join(dir, "nh", "*"), filepath.Join(dir, "sd", "*")))
	stateDir := filepath.Join(dir, "state")
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	var summaries []string
	for time.Now().Before(deadline) {
		summaries, _ = filepath.Glob(filepath.Join(sd, "working-memory", "detail", "*.md"))
		if len(summaries) >= 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rss := peakRSS(t, p.cmd.Process.Pid)
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	const bound = 64 << 20
	t.Logf("peak RSS %d MiB with a 2 GiB memory.md and a 64 MiB line (bound %d MiB)", rss>>20, bound>>20)
	if rss > bound {
		t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, bound>>20)
	}
	if fi, _ := os.Stat(mem); fi.Size() != 2<<30 {
		t.Errorf("memory.md changed size: %d", fi.Size())
	}
	if len(summaries) < 2 {
		t.Fatalf("summaries = %v, want the huge line's range summarized too", summaries)
	}
	for _, s := range summaries {
		if fi, _ := os.Stat(s); fi.Size() > 256<<10 {
			t.Errorf("%s is %d bytes: the huge line was copied", s, fi.Size())
		}
	}
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, _ := db.Journal(context.Background(), state.Filter{Root: nh, Outcome: state.Skipped})
	reported := false
	for _, r := range recs {
		reported = reported || strings.Contains(r.Reason, "larger than memwatch loads")
	}
	if !reported {
		t.Errorf("the oversize memory.md was not reported in the journal: %+v", recs)
	}
}
