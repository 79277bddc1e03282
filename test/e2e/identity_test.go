package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/versions"
)

// The identity suite: a root is a directory, not a path. alice owns the
// directories above her roots and swaps them for symbolic links into
// bob's tree, once and in a loop, while the daemon works and while it is
// stopped; she gets none of bob's bytes and writes nothing into his tree.
// Real users (useradd), the real binary, as root.

func secretWord(tag string) string {
	var rnd [6]byte
	rand.Read(rnd[:])
	return tag + hex.EncodeToString(rnd[:])
}

// as runs a shell command as u and fails the test when it fails.
func (u tenant) sh(t *testing.T, script string) {
	t.Helper()
	if out, err := u.command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("as %s: %s: %v\n%s", u.name, script, err, out)
	}
}

// leaks lists what memwatch's state holds of secret under paths below
// prefix: spool lines and version contents kept for a root there.
func leaks(t *testing.T, stateDir, prefix, secret string) []string {
	t.Helper()
	var out []string
	db, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, "spool.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT l.root, l.path, ln.seq FROM logs l JOIN lines ln ON ln.log = l.id WHERE instr(ln.data, ?) > 0`, secret)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, path string
		var seq int64
		rows.Scan(&key, &path, &seq)
		if id, _ := confine.ParseKey(key); confine.Within(prefix, id.Path) {
			out = append(out, fmt.Sprintf("spool: %s line %d of %s", path, seq, id.Path))
		}
	}
	rows.Close()
	vs, err := versions.OpenReadOnly(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	keys, _ := vs.Roots(context.Background())
	for _, k := range keys {
		id, ok := confine.ParseKey(k)
		if !ok || !confine.Within(prefix, id.Path) {
			continue
		}
		files, _ := vs.Files(context.Background(), id)
		for _, f := range files {
			list, _ := vs.List(context.Background(), id, f)
			for _, v := range list {
				if _, data, err := vs.Get(context.Background(), id, f, v.N); err == nil && strings.Contains(string(data), secret) {
					out = append(out, fmt.Sprintf("versions: %s@%d in %s", f, v.N, id.Path))
				}
			}
		}
	}
	return out
}

// grepTree lists the files below dir that hold s.
func grepTree(dir, s string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), s) {
				out = append(out, p)
			}
		}
		return nil
	})
	return out
}

// TestIdentitySwappedParent: alice replaces her ~/proj with a symbolic
// link to bob's, once (the daemon refuses it, says so in the log and in
// status, and takes nothing of bob's), then puts back a real directory of
// her own (served as a new root: none of bob's versions, nothing restored
// into it, nothing recalled), then swaps it back and forth in a loop
// while bob's agent writes: memwatch's state holds none of bob's bytes
// under her paths, and her tree none at all.
func TestIdentitySwappedParent(t *testing.T) {
	t.Parallel() // mostly waits on daemons: beside the other such tests
	base, alice, bob := tenants(t)
	secret := secretWord("bobsecret")
	bobP1 := filepath.Join(bob.home, "proj", "p1")
	bob.write(t, filepath.Join(bobP1, "memory", "MEMORY.md"), "# Memory\n\n- "+secret+" is the launch code\n")
	bob.write(t, filepath.Join(bobP1, "s1.jsonl"), `{"role":"user","content":"remember `+secret+`"}`+"\n")
	aliceP1 := filepath.Join(alice.home, "proj", "p1")
	alice.write(t, filepath.Join(aliceP1, "memory", "MEMORY.md"), "# Memory\n\n- alice likes tea\n")
	alice.write(t, filepath.Join(aliceP1, "s1.jsonl"), `{"role":"user","content":"alicequokka says hello"}`+"\n")
	sock := filepath.Join(base, "run", "memwatch.sock")
	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`control:
  socket: %s
stores:
  - name: cc
    preset: claude-code
    paths: [%q]
    settle: 30ms
`, sock, filepath.Join(base, "*", "proj", "*")))
	os.Chmod(pol, 0o644)
	bin := filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	for _, f := range []string{filepath.Join(bobP1, "memory", "MEMORY.md"), filepath.Join(aliceP1, "memory", "MEMORY.md")} {
		waitUntil(t, 15*time.Second, func() bool { return len(listVersions(t, pol, stateDir, f)) > 0 })
		if len(listVersions(t, pol, stateDir, f)) == 0 {
			t.Fatalf("no version of %s", f)
		}
	}

	// Once: ~/proj becomes a link to bob's proj.
	aliceProj := filepath.Join(alice.home, "proj")
	alice.sh(t, fmt.Sprintf("mv %s %s.real && ln -s %s %s", aliceProj, aliceProj, filepath.Join(bob.home, "proj"), aliceProj))
	p.waitLogWith("store root refused; memwatch does not follow it", map[string]any{"root": aliceProj}, 10*time.Second)
	out, _ := exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
	if !strings.Contains(string(out), aliceProj+": ") || !strings.Contains(string(out), "symbolic link") {
		t.Errorf("memwatch status does not list the refused root %s:\n%s", aliceProj, out)
	}
	// alice puts back a real ~/proj/p1 of her own, empty.
	alice.sh(t, fmt.Sprintf("rm %s && mkdir -p %s", aliceProj, aliceP1))
	waitUntil(t, 10*time.Second, func() bool {
		out, _ := exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
		return strings.Contains(string(out), `"`+aliceP1+`"`)
	})
	// As alice, over the socket: her MEMORY.md's versions, a restore of
	// what is missing, a recall of bob's word.
	out, err := alice.command(bin, "versions", "--json", "--policy", pol, filepath.Join(aliceP1, "memory", "MEMORY.md")).CombinedOutput()
	if strings.Contains(string(out), secret) || strings.Contains(string(out), `"n": 1`) {
		t.Errorf("alice's new directory lists versions: %v\n%s", err, out)
	}
	out, err = alice.command(bin, "restore", "--missing", aliceP1, "--policy", pol).CombinedOutput()
	if err == nil && strings.Contains(string(out), "restored") {
		t.Errorf("restore --missing in alice's new directory restored something: %s", out)
	}
	out, _ = alice.command(bin, "recall", "--policy", pol, "--all", "--json", secret).CombinedOutput()
	if strings.Contains(string(out), secret) {
		t.Errorf("alice recalled bob's word:\n%s", out)
	}
	if files := grepTree(alice.home, secret); len(files) > 0 {
		t.Errorf("bob's bytes in alice's tree: %q", files)
	}

	// In a loop, while bob's agent writes.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.OpenFile(filepath.Join(bobP1, "s1.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				fmt.Fprintf(f, `{"role":"user","content":"%s turn %d"}`+"\n", secret, i)
				f.Close()
			}
			os.WriteFile(filepath.Join(bobP1, "memory", "MEMORY.md"), []byte(fmt.Sprintf("# Memory\n\n- %s is the launch code, version %d\n", secret, i)), 0o644)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	swap := exec.Command("/bin/sh", "-c", fmt.Sprintf(`end=$(($(date +%%s)+5))
while [ $(date +%%s) -lt $end ]; do
  mv %[1]s %[1]s.real && ln -s %[2]s %[1]s && sleep 0.02 && rm %[1]s && mv %[1]s.real %[1]s && sleep 0.02
done`, aliceProj, filepath.Join(bob.home, "proj")))
	swap.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(alice.uid), Gid: uint32(alice.gid)}}
	if out, err := swap.CombinedOutput(); err != nil {
		t.Fatalf("alice's swaps: %v\n%s", err, out)
	}
	close(stop)
	<-done
	time.Sleep(time.Second) // what was queued during the swaps runs
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if l := leaks(t, stateDir, alice.home, secret); len(l) > 0 {
		t.Errorf("memwatch's state holds bob's bytes under alice's paths:\n%s", strings.Join(l, "\n"))
	}
	if files := grepTree(alice.home, secret); len(files) > 0 {
		t.Errorf("bob's bytes in alice's tree: %q", files)
	}
	if l := leaks(t, stateDir, bob.home, secret); len(l) == 0 {
		t.Error("memwatch kept none of bob's own lines and versions: the test did not exercise the capture")
	}
}

// TestIdentityRestoreIntoSwappedTree: with the daemon stopped, alice's
// deleted memory.md is not written into bob's tree through ~/nest swapped
// for a link to his; once she has a real directory again it is not a
// directory the versions came from, and nothing is written either. In
// her own directory, restore --missing brings 0600 and 0604 files back
// with those modes and her as owner.
func TestIdentityRestoreIntoSwappedTree(t *testing.T) {
	t.Parallel() // mostly waits on daemons: beside the other such tests
	base, alice, bob := tenants(t)
	p1 := filepath.Join(alice.home, "nest", "p1")
	alice.write(t, filepath.Join(p1, "memory.md"), "# now\n\n## State | alice\n- alice's plan\n\n# History\n")
	alice.write(t, filepath.Join(p1, "memory", "run", "a-run.md"), "# run\n- a run of alice's\n")
	os.Chmod(filepath.Join(p1, "memory.md"), 0o600)
	os.Chmod(filepath.Join(p1, "memory", "run", "a-run.md"), 0o604)
	bob.mkdir(t, filepath.Join(bob.home, "nest", "p1"))
	stateDir := filepath.Join(base, "state")
	pol := writePolicy(t, base, fmt.Sprintf(`stores:
  - name: nh
    layout: now-history
    paths: [%q]
    settle: 30ms
`, filepath.Join(base, "*", "nest", "*")))
	p := startBin(t, memwatchFast, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	for _, f := range []string{"memory.md", "memory/run/a-run.md"} {
		waitUntil(t, 15*time.Second, func() bool { return len(listVersions(t, pol, stateDir, filepath.Join(p1, f))) > 0 })
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	restore := func() (string, error) {
		out, err := exec.Command(memwatchFast, "restore", "--missing", p1, "--policy", pol, "--state-dir", stateDir).CombinedOutput()
		return string(out), err
	}
	bobBefore := tree(t, filepath.Join(bob.home, "nest"))

	// ~/nest becomes a link to bob's nest.
	nest := filepath.Join(alice.home, "nest")
	alice.sh(t, fmt.Sprintf("rm %s/memory.md %s/memory/run/a-run.md && mv %s %s.real && ln -s %s %s", p1, p1, nest, nest, filepath.Join(bob.home, "nest"), nest))
	if out, err := restore(); err == nil || !strings.Contains(out, "symbolic link") {
		t.Errorf("restore --missing through a linked parent: %v\n%s", err, out)
	}
	// A real directory of alice's again, but not the one the versions came from.
	alice.sh(t, fmt.Sprintf("rm %s && mkdir -p %s", nest, p1))
	if out, err := restore(); err == nil || !strings.Contains(out, "another directory") {
		t.Errorf("restore --missing into another directory at the path: %v\n%s", err, out)
	}
	if after := tree(t, filepath.Join(bob.home, "nest")); fmt.Sprint(after) != fmt.Sprint(bobBefore) {
		t.Errorf("bob's tree changed:\n before %v\n after  %v", bobBefore, after)
	}
	if files := grepTree(p1, "alice's plan"); len(files) > 0 {
		t.Errorf("written into a directory the versions did not come from: %q", files)
	}
	// Her own directory back: both files, with their modes and owner.
	alice.sh(t, fmt.Sprintf("rm -r %s && mv %s.real %s", nest, nest, nest))
	if out, err := restore(); err != nil || !strings.Contains(out, "restored") {
		t.Fatalf("restore --missing in alice's own directory: %v\n%s", err, out)
	}
	for f, mode := range map[string]fs.FileMode{"memory.md": 0o600, "memory/run/a-run.md": 0o604} {
		fi, err := os.Stat(filepath.Join(p1, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != mode || int(st.Uid) != alice.uid {
			t.Errorf("%s restored as %v uid %d, want %v uid %d", f, fi.Mode().Perm(), st.Uid, mode, alice.uid)
		}
	}
}

// TestIdentityOwnRecall: alice, not root, recalls a line she cleared from
// her own session log through the daemon (she cannot read memwatch's
// state), shows its citation and lists her journal; bob's cleared line is
// not hers to find. init, as root, names only the roots of the home it
// scans from what her agent's files list.
func TestIdentityOwnRecall(t *testing.T) {
	t.Parallel() // mostly waits on daemons: beside the other such tests
	base, alice, bob := tenants(t)
	aWord, bWord := secretWord("alicequokka"), secretWord("bobquokka")
	aRoot, bRoot := filepath.Join(alice.home, "ws", "a"), filepath.Join(bob.home, "ws", "b")
	alice.write(t, filepath.Join(aRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"note `+aWord+` for later"}`+"\n")
	bob.write(t, filepath.Join(bRoot, "sessions", "s1.jsonl"), `{"role":"user","content":"note `+bWord+` for later"}`+"\n")
	stateDir := filepath.Join(base, "state")
	pol, _, bin, p := wsDaemon(t, base, "", "--state-dir", stateDir)
	recallAs := func(u tenant, word string) string {
		out, _ := u.command(bin, "recall", "--policy", pol, "--all", "--json", word).CombinedOutput()
		return string(out)
	}
	waitUntil(t, 15*time.Second, func() bool {
		return strings.Contains(recallAs(alice, aWord), aWord) && strings.Contains(recallAs(bob, bWord), bWord)
	})
	// Both clear their logs: the lines are only in memwatch's spool now.
	os.Truncate(filepath.Join(aRoot, "sessions", "s1.jsonl"), 0)
	os.Truncate(filepath.Join(bRoot, "sessions", "s1.jsonl"), 0)
	time.Sleep(500 * time.Millisecond)
	got := recallAs(alice, aWord)
	if !strings.Contains(got, aWord) {
		t.Errorf("alice's recall of her cleared line:\n%s", got)
	}
	if got := recallAs(alice, bWord); strings.Contains(got, bWord) {
		t.Errorf("alice recalled bob's cleared line:\n%s", got)
	}
	if got := recallAs(bob, aWord); strings.Contains(got, aWord) {
		t.Errorf("bob recalled alice's cleared line:\n%s", got)
	}
	if out, err := alice.command(bin, "show", "--policy", pol, "--dir", aRoot, "sessions/s1.jsonl#L1").CombinedOutput(); err != nil || !strings.Contains(string(out), aWord) {
		t.Errorf("alice's show of her cleared line: %v\n%s", err, out)
	}
	if out, err := alice.command(bin, "show", "--policy", pol, "--dir", bRoot, "sessions/s1.jsonl#L1").CombinedOutput(); err == nil || strings.Contains(string(out), bWord) {
		t.Errorf("alice's show of bob's cleared line: %v\n%s", err, out)
	}
	if out, err := alice.command(bin, "log", "--policy", pol, "--json").CombinedOutput(); err != nil || strings.Contains(string(out), bob.home) {
		t.Errorf("alice's journal: %v\n%s", err, out)
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// init, as root, on alice's home: what Crush's projects.json (hers to
	// write) lists of bob's and of root's is left out.
	mine := filepath.Join(alice.home, "src", "app", ".crush")
	alice.write(t, filepath.Join(mine, "crush.db"), "x")
	theirs := filepath.Join(bob.home, "proj", ".crush")
	bob.write(t, filepath.Join(theirs, "crush.db"), "x")
	rootOnly := filepath.Join(base, "rootonly", ".crush")
	os.MkdirAll(rootOnly, 0o700)
	os.WriteFile(filepath.Join(rootOnly, "crush.db"), []byte("x"), 0o600)
	alice.write(t, filepath.Join(alice.home, ".local", "share", "crush", "projects.json"),
		fmt.Sprintf(`{"projects":[{"data_dir":%q},{"data_dir":%q},{"data_dir":%q}]}`, mine, theirs, rootOnly))
	out, err := exec.Command(memwatchFast, "init", "--home", alice.home).CombinedOutput()
	if err != nil {
		t.Fatalf("memwatch init: %v\n%s", err, out)
	}
	policyText := string(out)
	if i := strings.Index(policyText, "version: 1"); i >= 0 {
		policyText = policyText[i:]
	}
	if !strings.Contains(policyText, filepath.Join(alice.home, "*", ".crush")) || strings.Contains(policyText, bob.home) || strings.Contains(policyText, rootOnly) {
		t.Errorf("init names roots outside alice's home:\n%s", out)
	}
	for _, left := range []string{theirs, rootOnly} {
		if !strings.Contains(string(out), "left out "+left) {
			t.Errorf("init does not say it left out %s:\n%s", left, out)
		}
	}
}

// TestIdentitySocketDirectory: a socket directory another user owns (and
// may write to) is refused at start, with the fix; the daemon serves
// nothing there.
func TestIdentitySocketDirectory(t *testing.T) {
	base, alice, _ := tenants(t)
	dir := filepath.Join(base, "shared")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	os.Chown(dir, alice.uid, alice.gid)
	pol := writePolicy(t, base, fmt.Sprintf("control:\n  socket: %s\nstores: []\n", filepath.Join(dir, "memwatch.sock")))
	out, err := exec.Command(memwatchFast, "run", "--policy", pol, "--state-dir", filepath.Join(base, "state")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another user could replace the control socket") {
		t.Errorf("memwatch run with its socket in alice's directory: %v\n%s", err, out)
	}
	if _, err := os.Lstat(filepath.Join(dir, "memwatch.sock")); err == nil {
		t.Error("a socket was made in alice's directory")
	}
}

// wsDaemon runs the daemon, as root, over every user's ~/ws/* (a
// memory-history store, no consolidation) with a socket the users share
// (base/run), top added to the policy's top level; bin is a copy of
// memwatch the users may run.
func wsDaemon(t *testing.T, base, top string, args ...string) (pol, sock, bin string, p *proc) {
	t.Helper()
	sock = filepath.Join(base, "run", "memwatch.sock")
	pol = writePolicy(t, base, fmt.Sprintf("%scontrol:\n  socket: %s\nstores:\n  - name: mh\n    layout: memory-history\n    paths: [%q]\n    settle: 30ms\n    consolidate: false\n",
		top, sock, filepath.Join(base, "*", "ws", "*")))
	os.Chmod(pol, 0o644)
	bin = filepath.Join(base, "memwatch")
	copyFile(t, memwatchFast, bin, 0o755)
	p = startBin(t, memwatchFast, append([]string{"--policy", pol}, args...)...)
	p.waitLog("ready", 10*time.Second)
	return pol, sock, bin, p
}

// TestIdentityOwnSecrets: under a daemon run by root, whose state a user
// cannot read, memwatch secrets lists the user's credentials the spool
// alone holds now (the daemon reads them for the user's roots), and none
// of another user's.
func TestIdentityOwnSecrets(t *testing.T) {
	t.Parallel()
	base, alice, bob := tenants(t)
	aRoot, bRoot := filepath.Join(alice.home, "ws", "a"), filepath.Join(bob.home, "ws", "b")
	key := func(n int) string {
		return fmt.Sprintf(`{"role":"assistant","content":"Set it: export OPENAI_KEY=sk-proj-Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxT3BlbkFJXk3Rv9QmZ2Tn8Wb5Y%03d"}`, n) + "\n"
	}
	alice.write(t, filepath.Join(aRoot, "sessions", "s1.jsonl"), key(1))
	bob.write(t, filepath.Join(bRoot, "sessions", "s1.jsonl"), key(2))
	stateDir := filepath.Join(base, "state")
	pol, _, bin, p := wsDaemon(t, base, "", "--state-dir", stateDir)
	p.waitLog("counted the credentials in the agents' memory", 30*time.Second)
	secretsAs := func(u tenant) (string, int) {
		out, err := u.command(bin, "secrets", "--policy", pol, "--json").Output()
		return string(out), exitCode(err)
	}
	// Both clear their logs: the lines are only in memwatch's spool now.
	os.Truncate(filepath.Join(aRoot, "sessions", "s1.jsonl"), 0)
	os.Truncate(filepath.Join(bRoot, "sessions", "s1.jsonl"), 0)
	waitUntil(t, 15*time.Second, func() bool {
		out, _ := secretsAs(alice)
		return strings.Contains(out, aRoot+"/sessions/s1.jsonl@")
	})
	out, code := secretsAs(alice)
	if code != 1 || !strings.Contains(out, aRoot+"/sessions/s1.jsonl@") {
		t.Errorf("alice's secrets (exit %d) do not list her credential the spool alone holds:\n%s", code, out)
	}
	if strings.Contains(out, bRoot) || strings.Contains(out, bob.home) {
		t.Errorf("alice's secrets list bob's:\n%s", out)
	}
	if out, _ := secretsAs(bob); !strings.Contains(out, bRoot+"/sessions/s1.jsonl@") || strings.Contains(out, aRoot) {
		t.Errorf("bob's secrets:\n%s", out)
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
