package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// The share suite runs the real daemon as root beside real unprivileged
// users and checks what issue [guard-2] asks: no user can kill, starve or
// fool the root daemon or root's client. Each flood runs under a watchdog
// that kills the daemon past 1.5 GiB, so a failure cannot take the test
// machine down.

// rssWatch samples a process's resident memory until stop: its peak, and
// the process killed past limit.
type rssWatch struct {
	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

func watchRSS(pid int, limit int64) *rssWatch {
	w := &rssWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			rss := vmRSS(pid)
			w.mu.Lock()
			w.peak = max(w.peak, rss)
			w.mu.Unlock()
			if rss > limit {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()
	return w
}

func (w *rssWatch) Peak() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak
}

func (w *rssWatch) Stop() { close(w.stop); <-w.done }

// vmRSS is a live process's resident memory now (0 once it is gone).
func vmRSS(pid int) int64 { return procStatus(pid, "VmRSS:") }

// helperAs starts this test binary as u in one of its helper modes
// (agentHelperMain) and returns the command, its stdout read line by line.
func helperAs(t *testing.T, helper string, u tenant, mode string, d time.Duration, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := u.command(helper, "-test.run=^$")
	cmd.Env = append(cmd.Env, helperEnv+"="+mode, helperEnv+"_ARGS="+strings.Join(args, "\x1f"), helperEnv+"_FOR="+d.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestShareOfEveryTenant: alice floods the root daemon with searches,
// connections and MCP sessions; bob is served throughout.
//   - 32 parallel recalls of 100,000 results over her 200,000-line log,
//     twice: the daemon stays under 600 MiB and bob's recall answers
//     within 2 s throughout;
//   - 30,000 connections held (idle, kept alive, POSTs whose body never
//     comes): bob's recall answers within 5 s, his MEMORY.md change is
//     versioned within 10 s, and nothing fails for want of a descriptor;
//   - 200 MCP sessions: bob's is a 200, and the log says it in a line.
func TestShareOfEveryTenant(t *testing.T) {
	base, alice, bob := tenants(t)
	aWord, bWord := secretWord("floodkudu"), secretWord("bobkudu")
	aRoot, bRoot := filepath.Join(alice.home, "ws", "a"), filepath.Join(bob.home, "ws", "b")
	lines := 200_000
	var log strings.Builder
	for i := range lines {
		fmt.Fprintf(&log, `{"role":"user","content":"line %d of the flood %s"}`+"\n", i, aWord)
	}
	alice.write(t, filepath.Join(aRoot, "sessions", "big.jsonl"), log.String())
	bob.write(t, filepath.Join(bRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"bob's own note `+bWord+`"}`+"\n")
	bob.write(t, filepath.Join(bRoot, "MEMORY.md"), "# Memory\n- bob's fact\n")
	stateDir := filepath.Join(base, "state")
	pol, sock, bin, p := wsDaemon(t, base, "", "--state-dir", stateDir)
	pid := p.cmd.Process.Pid
	rss := watchRSS(pid, 1536<<20)
	defer rss.Stop()
	helper := filepath.Join(base, "helper")
	copyFile(t, os.Args[0], helper, 0o755)
	bobRecall := func() (time.Duration, string, error) {
		start := time.Now()
		out, err := bob.command(bin, "recall", "--policy", pol, "--dir", bRoot, bWord).CombinedOutput()
		return time.Since(start), string(out), err
	}
	waitUntil(t, 30*time.Second, func() bool { _, out, _ := bobRecall(); return strings.Contains(out, bWord) })
	waitUntil(t, 60*time.Second, func() bool {
		code, _, body := getAs(t, helper, alice, sock, "/v1/recall?"+url.Values{"q": {aWord}, "dir": {aRoot}, "limit": {"3"}}.Encode())
		return code == 200 && strings.Count(body, aWord) >= 3
	})
	alive := func(what string) {
		t.Helper()
		if p.cmd.Process.Signal(syscall.Signal(0)) != nil {
			t.Fatalf("the daemon is gone after %s (peak RSS %d MiB)", what, rss.Peak()>>20)
		}
	}
	// bob asks again and again while fn runs: each answer within limit.
	whileServed := func(what string, limit time.Duration, fn func()) {
		t.Helper()
		done := make(chan struct{})
		var worst time.Duration
		asked := 0
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				took, out, err := bobRecall()
				asked++
				worst = max(worst, took)
				if err != nil || !strings.Contains(out, bWord) {
					t.Errorf("bob's recall during %s: %v\n%s", what, err, out)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		fn()
		close(done)
		wg.Wait()
		t.Logf("%s: bob asked %d times, the slowest answer in %v (peak RSS %d MiB)", what, asked, worst.Round(time.Millisecond), rss.Peak()>>20)
		if worst > limit {
			t.Errorf("during %s bob's recall took up to %v, want within %v", what, worst.Round(time.Millisecond), limit)
		}
		alive(what)
	}

	// Searches.
	flood := "/v1/recall?" + url.Values{"q": {aWord}, "dir": {aRoot}, "limit": {"100000"}}.Encode()
	whileServed("32 parallel recalls of 100,000 results, twice", 2*time.Second, func() {
		cmd, out := helperAs(t, helper, alice, "flood", time.Minute, sock, flood, "32", "2")
		if out.Scan() {
			t.Logf("alice's flood: %s (status: count, the slowest ms, the largest answer)", out.Text())
		}
		cmd.Wait()
	})
	if peak := rss.Peak(); peak > 600<<20 {
		t.Errorf("the daemon's peak RSS was %d MiB during the searches, over 600 MiB", peak>>20)
	}
	if code, _, body := getAs(t, helper, alice, sock, flood); code != 200 || strings.Count(body, aWord) < 100 {
		t.Errorf("alice's recall of 100,000 after the flood: %d, %d results in its first 64 KiB", code, strings.Count(body, aWord))
	}

	// Connections: as many helpers as the descriptors a process may open
	// need for 30,000.
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	each := min(15_000, int(rl.Max)-64)
	whileServed("30,000 connections held", 5*time.Second, func() {
		held := 0
		var holders []*exec.Cmd
		for n := 0; n < 30_000; n += each {
			cmd, out := helperAs(t, helper, alice, "hold", 60*time.Second, sock, fmt.Sprint(min(each, 30_000-n)))
			if !out.Scan() {
				t.Fatalf("a holding helper said nothing")
			}
			var k int
			fmt.Sscanf(out.Text(), "held %d", &k)
			held += k
			holders = append(holders, cmd)
		}
		t.Logf("alice holds %d connections in %d processes", held, len(holders))
		if held < 29_000 {
			t.Errorf("alice made only %d connections", held)
		}
		wrote := time.Now()
		bob.write(t, filepath.Join(bRoot, "MEMORY.md"), "# Memory\n- bob's fact\n- a new fact while alice holds her connections\n")
		waitUntil(t, 10*time.Second, func() bool {
			for _, v := range listVersions(t, pol, stateDir, filepath.Join(bRoot, "MEMORY.md")) {
				if v.Size == int64(len("# Memory\n- bob's fact\n- a new fact while alice holds her connections\n")) {
					return true
				}
			}
			return false
		})
		t.Logf("bob's MEMORY.md change versioned %v after he wrote it", time.Since(wrote).Round(time.Millisecond))
		for _, cmd := range holders {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	if strings.Contains(p.text(), "too many open files") {
		t.Errorf("the daemon ran out of descriptors:\n%s", linesWith(p.text(), "too many open files", 5))
	}

	// MCP sessions.
	cmd, out := helperAs(t, helper, alice, "mcpinit", time.Minute, sock, "200")
	if out.Scan() {
		t.Logf("alice's 200 MCP sessions: %s", out.Text())
	}
	cmd.Wait()
	_, out = helperAs(t, helper, bob, "mcpinit", time.Minute, sock, "1")
	if !out.Scan() || out.Text() != "map[200:1]" {
		t.Errorf("bob's MCP session after alice's 200: %s, want map[200:1]", out.Text())
	}
	if n := strings.Count(p.text(), `"msg":"mcp: `); n > 3 {
		t.Errorf("%d log lines about MCP sessions, want a few:\n%s", n, linesWith(p.text(), `"msg":"mcp: `, 5))
	}
	alive("the MCP sessions")
}

// linesWith are the last n lines of s holding sub.
func linesWith(s, sub string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// TestRootClientTrustsOnlyRoot: root's memwatch with alice's environment
// (su without -, sudo -E): her runtime directory announcing her own state
// is not believed (log shows none of her records, restore of bob's file
// writes none of her text), and a policy she owns is refused.
func TestRootClientTrustsOnlyRoot(t *testing.T) {
	base, alice, bob := tenants(t)
	forged := secretWord("forgedrecord")
	bRoot := filepath.Join(bob.home, "ws", "b")
	bob.write(t, filepath.Join(bRoot, "MEMORY.md"), "# Memory\n- bob's own fact\n")
	// Root's daemon of the system's kind: a policy naming no state_dir.
	pol, _, bin, _ := wsDaemon(t, base, "", "--state-dir", filepath.Join(base, "rootstate"))
	// alice's own state, with a record and a version of bob's file she
	// made up (made here, then moved into her home and made hers).
	made := filepath.Join(base, "forging")
	ctx := context.Background()
	db, err := state.Open(ctx, made)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, &state.Record{Store: "mh", Root: bRoot, Rule: "compress-memory", Target: "MEMORY.md", Outcome: state.Done, Reason: forged}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	vs, err := versions.Open(ctx, made)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(filepath.Join(bRoot, "MEMORY.md"))
	os.WriteFile(filepath.Join(bRoot, "MEMORY.md"), []byte("# Memory\n- "+forged+"\n"), 0o640)
	root, err := confine.Open(bRoot, confine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := vs.Capture(ctx, root, "MEMORY.md", func(string) (string, int64) { return "agent", 0 }); err != nil {
		t.Fatal(err)
	}
	root.Close()
	vs.Close()
	os.WriteFile(filepath.Join(bRoot, "MEMORY.md"), orig, 0o640)
	herState := filepath.Join(alice.home, "state")
	if err := os.Rename(made, herState); err != nil {
		t.Fatal(err)
	}
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", alice.uid, alice.gid), herState).Run()
	herPol := filepath.Join(alice.home, "policy.yaml")
	alice.write(t, herPol, fmt.Sprintf("version: 1\nstores:\n  - name: mh\n    layout: memory-history\n    paths: [%q]\n", filepath.Join(base, "*", "ws", "*")))
	// Root's default state directory, as the system's: removed after if
	// this test made it.
	if _, err := os.Stat("/var/lib/memwatch"); os.IsNotExist(err) {
		t.Cleanup(func() { os.RemoveAll("/var/lib/memwatch") })
	}
	herRun := filepath.Join(alice.home, "run")
	alice.mkdir(t, filepath.Join(herRun, "memwatch"))
	alice.write(t, filepath.Join(herRun, "memwatch", "daemon.json"), fmt.Sprintf(`{"pid":1,"state_dir":%q,"socket":%q,"policy":%q}`, herState, filepath.Join(herRun, "memwatch.sock"), pol))
	os.Chmod(filepath.Join(herRun, "memwatch"), 0o700)
	os.Chmod(filepath.Join(herRun, "memwatch", "daemon.json"), 0o600)
	asRoot := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(filteredEnv("XDG_RUNTIME_DIR", "STATE_DIRECTORY", "MEMWATCH_POLICY", "MEMWATCH_STATE_DIR"), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	her := []string{"XDG_RUNTIME_DIR=" + herRun}
	if out, _ := asRoot(her, "log", "--policy", pol, "--json", "-n", "1000"); strings.Contains(out, forged) {
		t.Errorf("root's memwatch log with alice's runtime directory showed her record:\n%s", out)
	}
	before, _ := os.ReadFile(filepath.Join(bRoot, "MEMORY.md"))
	out2, err := asRoot(her, "restore", "--policy", pol, filepath.Join(bRoot, "MEMORY.md")+"@1")
	if after, _ := os.ReadFile(filepath.Join(bRoot, "MEMORY.md")); string(after) != string(before) {
		t.Errorf("root's restore with alice's runtime directory changed bob's MEMORY.md: %v %s\n%s", err, out2, after)
	}
	// Her policy, named by the environment: refused, saying why.
	out3, err := asRoot([]string{"MEMWATCH_POLICY=" + herPol}, "log")
	var exit *exec.ExitError
	if err == nil || !strings.Contains(out3, "belongs to uid") || !asExit(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("root's memwatch log with alice's MEMWATCH_POLICY: %v\n%s", err, out3)
	}
	// Her state directory, named by the environment: refused too.
	if out4, err := asRoot([]string{"MEMWATCH_STATE_DIR=" + herState}, "log", "--policy", pol, "--json"); err == nil || strings.Contains(out4, forged) {
		t.Errorf("root's memwatch log with alice's MEMWATCH_STATE_DIR: %v\n%s", err, out4)
	}
}

// filteredEnv is this process's environment without the keys named.
func filteredEnv(drop ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			keep = keep && k != d
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

func asExit(err error, exit **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*exit = e
	return ok
}

// TestMCPForEveryUser: the policy names root's 0700 state directory (as a
// system install's may); alice's memwatch mcp, started by her agent in
// her project's root, lists recall_memory and finds her own line through
// the daemon; bound to bob's root it is refused.
func TestMCPForEveryUser(t *testing.T) {
	base, alice, bob := tenants(t)
	aWord, bWord := secretWord("mcpokapi"), secretWord("bobmcpokapi")
	aRoot, bRoot := filepath.Join(alice.home, "ws", "a"), filepath.Join(bob.home, "ws", "b")
	alice.write(t, filepath.Join(aRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"the okapi plan `+aWord+`"}`+"\n")
	bob.write(t, filepath.Join(bRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"the okapi plan `+bWord+`"}`+"\n")
	stateDir := filepath.Join(base, "state")
	pol, _, bin, _ := wsDaemon(t, base, "state_dir: "+stateDir+"\n")
	waitUntil(t, 30*time.Second, func() bool {
		out, _ := alice.command(bin, "recall", "--policy", pol, "--all", aWord).CombinedOutput()
		return strings.Contains(string(out), aWord)
	})
	cmd := alice.command(bin, "mcp", "--policy", pol)
	cmd.Dir = aRoot
	cs := mcpOver(t, cmd)
	tools := listTools(t, cs)
	if !contains(tools, "recall_memory") {
		t.Fatalf("alice's memwatch mcp lists %v, no recall_memory", tools)
	}
	got, isErr := callText(t, cs, "recall_memory", map[string]any{"query": "okapi plan"})
	if isErr || !strings.Contains(got, aWord) || strings.Contains(got, bWord) {
		t.Errorf("alice's recall_memory: error %v\n%s", isErr, got)
	}
	cs.Close()
	// Bound to bob's root: refused.
	out, err := alice.command(bin, "mcp", "--policy", pol, "--root", bRoot).CombinedOutput()
	if err == nil {
		t.Errorf("alice's memwatch mcp --root bob's root started:\n%s", out)
	}
}

// mcpOver connects an MCP client to memwatch mcp run as cmd.
func mcpOver(t *testing.T, cmd *exec.Cmd) *mcp.ClientSession {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "share-test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to memwatch mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestNoOracle: alice asks about bob's project and about a directory only
// his sessions name, over the socket and with memwatch recall run there:
// no answer or error names his roots or counts his files. Her own project
// folders named after paths in his 0700 home, one that exists and one
// that does not, get labels that do not tell which.
func TestNoOracle(t *testing.T) {
	base, alice, bob := tenants(t)
	bProjDir := filepath.Join(bob.home, "proj")
	for _, d := range []string{bProjDir, filepath.Join(bob.home, "hidden", "merger-plans")} {
		bob.mkdir(t, d)
	}
	// His home and project open as most are; his agent's folder and his
	// hidden directory are not.
	os.Chmod(bob.home, 0o755)
	os.Chmod(bProjDir, 0o755)
	os.Chmod(filepath.Join(bob.home, "hidden"), 0o700)
	enc := func(p string) string { return strings.NewReplacer("/", "-", ".", "-").Replace(p) }
	bProj := filepath.Join(bob.home, ".claude", "projects", enc(bProjDir))
	bob.write(t, filepath.Join(bProj, "s1.jsonl"), `{"type":"user","cwd":"`+bProjDir+`","message":{"role":"user","content":"merger plans"}}`+"\n")
	os.Chmod(filepath.Join(bob.home, ".claude"), 0o700)
	word := secretWord("oracle")
	var aRoots []string
	for _, p := range []string{filepath.Join(bob.home, "hidden", "merger-plans"), filepath.Join(bob.home, "hidden", "no-such-plans")} {
		r := filepath.Join(alice.home, ".claude", "projects", enc(p))
		alice.write(t, filepath.Join(r, "s1.jsonl"), `{"type":"user","message":{"role":"user","content":"a note `+word+`"}}`+"\n")
		aRoots = append(aRoots, r)
	}
	sock := filepath.Join(base, "run", "memwatch.sock")
	pol := writePolicy(t, base, fmt.Sprintf("control:\n  socket: %s\nstores:\n  - name: claude\n    layout: memory-history\n    paths: [%q]\n    sessions: \"*.jsonl\"\n    consolidate: false\n    settle: 30ms\n",
		sock, filepath.Join(base, "*", ".claude", "projects", "*")))
	os.Chmod(pol, 0o644)
	bin := filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", filepath.Join(base, "state"))
	p.waitLog("ready", 10*time.Second)
	helper := filepath.Join(base, "helper")
	copyFile(t, os.Args[0], helper, 0o755)
	leaks := func(what, s string) {
		t.Helper()
		for _, bad := range []string{bProj, enc(bProjDir), "file(s) of", "root(s) of"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s tells alice %q:\n%s", what, bad, s)
			}
		}
	}
	waitUntil(t, 30*time.Second, func() bool {
		out, _ := alice.command(bin, "recall", "--policy", pol, "--all", "--json", word).CombinedOutput()
		return strings.Count(string(out), word) >= 2
	})
	for _, cwd := range []string{bProjDir, filepath.Join(bob.home, "hidden"), filepath.Join(bob.home, "hidden", "merger-plans")} {
		_, _, body := getAs(t, helper, alice, sock, "/v1/recall?"+url.Values{"q": {"merger plans"}, "cwd": {cwd}}.Encode())
		leaks("/v1/recall?cwd="+cwd, body)
	}
	// memwatch recall run in his project's directory.
	cmd := alice.command(bin, "recall", "--policy", pol, "merger plans")
	cmd.Dir = bProjDir
	got, _ := cmd.CombinedOutput()
	leaks("memwatch recall in "+bProjDir, string(got))
	// Labels: both of her folders by their raw names.
	out, _ := alice.command(bin, "recall", "--policy", pol, "--all", "--json", word).CombinedOutput()
	for _, r := range aRoots {
		raw := strings.TrimPrefix(filepath.Base(r), "-")
		if !strings.Contains(string(out), `"project": "`+raw+`"`) {
			t.Errorf("alice's folder %s is not labelled by its raw name %q:\n%s", filepath.Base(r), raw, out)
		}
	}
	leaks("the labels of alice's folders", string(out))
}
