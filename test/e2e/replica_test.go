package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/versions"
)

// s3Server is a real S3-compatible server: versitygw, pinned in
// test/s3server (a module of its own: not a dependency of memwatch),
// serving the directories under dir as buckets.
type s3Server struct {
	t    *testing.T
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
	log  strings.Builder
}

const s3Key, s3Secret = "memwatch-test", "memwatch-test-secret-0123456789"

// versitygw builds the server once per go.sum of test/s3server, in the
// user's cache directory.
func versitygw(t *testing.T) string {
	t.Helper()
	sum, err := os.ReadFile(filepath.Join("..", "..", "test", "s3server", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(sum)
	bin := filepath.Join(os.Getenv(testCacheEnv), "versitygw-"+hex.EncodeToString(h[:6]))
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	// Built to a name of its own: two tests may build it at once.
	tmp, err := os.CreateTemp(filepath.Dir(bin), "versitygw-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-o", tmp.Name(), "github.com/versity/versitygw/cmd/versitygw")
	cmd.Dir = filepath.Join("..", "..", "test", "s3server")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build versitygw (test/s3server): %v\n%s", err, out)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

func newS3Server(t *testing.T, bucket string) *s3Server {
	t.Helper()
	s := &s3Server{t: t, bin: versitygw(t), dir: t.TempDir(), addr: freeAddr(t)}
	if err := os.MkdirAll(filepath.Join(s.dir, bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *s3Server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", s.addr, "posix", s.dir)
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s3Key, "ROOT_SECRET_KEY="+s3Secret)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	waitUntil(s.t, 10*time.Second, func() bool { return answersTCP(s.addr) })
	if !answersTCP(s.addr) {
		s.t.Fatalf("versitygw did not listen on %s:\n%s", s.addr, s.log.String())
	}
}

func (s *s3Server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

func answersTCP(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// replicaStatus is the daemon's replica status (memwatch status --json).
func replicaStatus(t *testing.T, pol, stateDir string) control.Status {
	t.Helper()
	out, err := exec.Command(memwatchFast, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
	var st control.Status
	if err != nil || json.Unmarshal(out, &st) != nil {
		return st
	}
	return st
}

// TestReplicaRestoresAHost: the real daemon replicates its state to a real
// S3 server while an agent writes five memory files a hundred times each
// and 500 session lines, the server stopped for 30 s in the middle. Then
// the host dies (SIGKILL, its state and the agent's files deleted): a new
// state restored from the bucket and restore --missing bring back every
// file as it was, every version, and every line with its citation.
func TestReplicaRestoresAHost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a minute with a real S3 server")
	}
	t.Parallel() // mostly waits (an outage of 30 s): beside the other such tests
	srv := newS3Server(t, "memwatch")
	dir := t.TempDir()
	// The credentials in files (the _file keys): no environment to share
	// with the tests running beside it.
	os.WriteFile(filepath.Join(dir, "s3-key"), []byte(s3Key), 0o600)
	os.WriteFile(filepath.Join(dir, "s3-secret"), []byte(s3Secret), 0o600)
	notes := filepath.Join(dir, "agents", "notes")
	talk := filepath.Join(dir, "agents", "talk")
	// Five agents' memory.md (now-history: small, so memwatch leaves
	// them as written) and a session log.
	mem := func(f int) string { return filepath.Join(notes, fmt.Sprintf("n%d", f), "memory.md") }
	for f := range 5 {
		os.MkdirAll(filepath.Dir(mem(f)), 0o755)
	}
	os.MkdirAll(filepath.Join(talk, "sessions"), 0o755)
	pol := writePolicy(t, dir, fmt.Sprintf(`replicate:
  url: s3://memwatch/host-1
  endpoint: http://%s
  access_key_file: %s
  secret_key_file: %s
  force_path_style: true
stores:
  - name: notes
    layout: now-history
    paths: [%q]
    settle: 100ms
  - name: talk
    layout: memory-history
    paths: [%q]
    settle: 100ms
    consolidate: false
`, srv.addr, filepath.Join(dir, "s3-key"), filepath.Join(dir, "s3-secret"), filepath.Join(notes, "*"), talk))
	state1 := filepath.Join(dir, "state-1")
	p := start(t, "--policy", pol, "--state-dir", state1)
	p.waitLog("replicating the state", 10*time.Second)

	const files, saves, lines = 5, 100, 500
	fact := func(f, i int) string {
		return fmt.Sprintf("# now\n\n## State | agent %d\n- the walrus-%d ledger deploys on day %d\n- save %d\n\n# History\n", f, f, i%28+1, i)
	}
	session := filepath.Join(talk, "sessions", "chat.jsonl")
	// write runs the agent: saves [from, to) of each file, one every
	// gap, and session lines [lfrom, lto) in the same time.
	write := func(from, to, lfrom, lto int, gap time.Duration) {
		var wg sync.WaitGroup
		for f := range files {
			wg.Go(func() {
				for i := from; i < to; i++ {
					os.WriteFile(mem(f), []byte(fact(f, i)), 0o644)
					time.Sleep(gap)
				}
			})
		}
		wg.Go(func() {
			per := gap * time.Duration(to-from) / time.Duration(lto-lfrom)
			for i := lfrom; i < lto; i++ {
				fd, err := os.OpenFile(session, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Fprintf(fd, `{"role":"user","content":"quokkaline tok%04d asks about the ledger","timestamp":"2026-11-25T10:00:00Z"}`+"\n", i)
				fd.Close()
				time.Sleep(per)
			}
		})
		wg.Wait()
	}
	inSync := func(within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < within+5*time.Second {
			if r := replicaStatus(t, pol, state1).Replica; r != nil && r.Outage == "" && !r.Pending && r.Lag == 0 && !r.LastSync.Before(start) {
				return time.Since(start)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the bucket was not in sync within %v: %+v", within+5*time.Second, replicaStatus(t, pol, state1).Replica)
		return 0
	}

	// Half of it with the server up: in the bucket within 2 s.
	write(0, saves/2, 0, lines/2, 200*time.Millisecond)
	if took := inSync(2 * time.Second); took > 2*time.Second {
		t.Errorf("the bucket held the writes %v after the last, want within 2s", took)
	} else {
		t.Logf("in the bucket %v after the last write", took.Round(10*time.Millisecond))
	}

	// The server stops for 30 s; the agent keeps writing; memwatch keeps
	// working and says so once.
	srv.stop()
	outage := time.Now()
	write(saves/2, saves, lines/2, lines, 30*time.Second/time.Duration(saves/2))
	if d := time.Since(outage); d < 30*time.Second {
		time.Sleep(30*time.Second - d)
	}
	srv.start()
	back := time.Now()
	took := inSync(5 * time.Second)
	if took > 5*time.Second {
		t.Errorf("caught up %v after the server came back, want within 5s", took)
	}
	t.Logf("caught up %v after the server came back (%v down)", took.Round(10*time.Millisecond), back.Sub(outage).Round(time.Second))
	warns := 0
	p.mu.Lock()
	for _, l := range p.lines {
		if l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "replication") {
			warns++
		}
		if strings.Contains(fmt.Sprint(l), s3Secret) {
			t.Errorf("a log line holds the secret: %v", l)
		}
	}
	p.mu.Unlock()
	if warns != 1 {
		t.Errorf("replication WARN lines: got %d, want 1 for the one outage", warns)
	}
	// The files as the host leaves them: once memwatch is done with the
	// last saves (its summary lines) and the bucket has all of it.
	var last map[string][]byte
	read := func() map[string][]byte {
		out := map[string][]byte{}
		for f := range files {
			path := mem(f)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out[path] = b
		}
		return out
	}
	quiet := time.Now().Add(20 * time.Second)
	for time.Now().Before(quiet) {
		before := read()
		st := replicaStatus(t, pol, state1)
		if len(st.Jobs.Queued) == 0 && len(st.Jobs.Running) == 0 && st.Replica != nil && !st.Replica.Pending && st.Replica.Outage == "" {
			time.Sleep(1500 * time.Millisecond) // a settle and a sync interval: nothing more comes
			st = replicaStatus(t, pol, state1)
			if after := read(); fmt.Sprint(after) == fmt.Sprint(before) && len(st.Jobs.Queued) == 0 && len(st.Jobs.Running) == 0 && st.Replica != nil && !st.Replica.Pending {
				last = after
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if last == nil {
		t.Fatal("memwatch did not go quiet after the writes")
	}
	sessionBytes, _ := os.ReadFile(session)
	// The versions the first host kept: the restored state must hold
	// every one of them. (A save overwritten before its settle time ran
	// out is not a version of its own, so a loaded machine may keep a
	// few less than the saves; that is the version capture's business,
	// tested with it, not replication's.)
	kept := map[string][]string{}
	for path := range last {
		byAgent := 0
		for _, v := range listVersions(t, pol, state1, path) {
			kept[path] = append(kept[path], versionKey(v))
			if v.Writer == versions.ByAgent && !v.Deleted() {
				byAgent++
			}
		}
		// A sanity check that versioning ran: on a loaded machine a save
		// overwritten within its settle time is not a version of its own.
		if byAgent < saves/2 {
			t.Errorf("%s: %d versions by the agent on the first host, want about %d", path, byAgent, saves)
		}
	}

	// The host dies.
	p.cmd.Process.Kill()
	<-p.done
	for _, d := range []string{state1, notes, talk} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	for f := range files {
		os.MkdirAll(filepath.Dir(mem(f)), 0o755)
	}
	os.MkdirAll(talk, 0o755)

	// A new host: the state from the bucket, then the files.
	state2 := filepath.Join(dir, "state-2")
	if out, err := exec.Command(memwatchFast, "state", "restore", "--policy", pol, "--state-dir", state2).CombinedOutput(); err != nil {
		t.Fatalf("memwatch state restore: %v\n%s", err, out)
	}
	if out, err := exec.Command(memwatchFast, "state", "restore", "--policy", pol, "--state-dir", state2).CombinedOutput(); err == nil || !strings.Contains(string(out), "not empty") {
		t.Errorf("a second restore into the same directory: %v\n%s, want it refused", err, out)
	}
	p2 := start(t, "--policy", pol, "--state-dir", state2)
	p2.waitLog("ready", 10*time.Second)
	for f := range files {
		if out, err := exec.Command(memwatchFast, "restore", "--missing", filepath.Dir(mem(f)), "--policy", pol, "--state-dir", state2).CombinedOutput(); err != nil {
			t.Fatalf("memwatch restore --missing: %v\n%s", err, out)
		}
	}
	for path, want := range last {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s after the restore: %q (%v), want %q", path, got, err, want)
		}
		restored := map[string]bool{}
		for _, v := range listVersions(t, pol, state2, path) {
			restored[versionKey(v)] = true
		}
		missing := 0
		for _, k := range kept[path] {
			if !restored[k] {
				missing++
			}
		}
		if missing > 0 || len(kept[path]) == 0 {
			t.Errorf("%s: %d of the first host's %d versions missing after the restore", path, missing, len(kept[path]))
		}
	}
	// Every session line, from the restored spool, with its citation.
	out, err := exec.Command(memwatchFast, "recall", "--policy", pol, "--state-dir", state2, "--all", "--scope", "messages", "--limit", "2000", "--json", "quokkaline").Output()
	if err != nil {
		t.Fatalf("recall: %v", err)
	}
	var res []struct{ Text, Citation string }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("recall --json: %v\n%s", err, out)
	}
	found := map[string]bool{}
	for _, r := range res {
		if i := strings.Index(r.Text, "tok"); i >= 0 && len(r.Text) >= i+7 && strings.Contains(r.Citation, "chat.jsonl") {
			found[r.Text[i:i+7]] = true
		}
	}
	missing := 0
	for i := range lines {
		if !found[fmt.Sprintf("tok%04d", i)] {
			missing++
		}
	}
	if missing > 0 || strings.Count(string(sessionBytes), "\n") != lines {
		t.Errorf("recall after the restore: %d of %d session lines missing (%d results; the session had %d lines)", missing, lines, len(res), strings.Count(string(sessionBytes), "\n"))
	}
}

// versionKey names a version across hosts: its number, writer and content.
func versionKey(v versions.Version) string {
	return fmt.Sprintf("%d %s %s", v.N, v.Writer, v.SHA)
}

// TestReplicaEncrypted: with age_recipients_file, every object the daemon
// puts in a real S3 server is an age file holding neither a marker word of
// a session nor a credential in it, through snapshots and compactions;
// state restore with age_identity_file brings the state back (recall
// finds the marker), and without it fails saying why.
func TestReplicaEncrypted(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a real S3 server")
	}
	t.Parallel()
	srv := newS3Server(t, "memwatch")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "s3-key"), []byte(s3Key), 0o600)
	os.WriteFile(filepath.Join(dir, "s3-secret"), []byte(s3Secret), 0o600)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "recipients.txt"), []byte("# the operator's key\n"+id.Recipient().String()+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "identity.txt"), []byte(id.String()+"\n"), 0o600)
	talk := filepath.Join(dir, "agents", "talk")
	os.MkdirAll(filepath.Join(talk, "sessions"), 0o755)
	const marker, secret = "zorblefrutz", "AKIAIOSFODNN7ZQXWVUT"
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, `{"role":"user","content":"the %s ledger, line %d: aws_access_key_id = %s","timestamp":"2026-11-25T10:00:00Z"}`+"\n", marker, i, secret)
	}
	os.WriteFile(filepath.Join(talk, "sessions", "chat.jsonl"), []byte(b.String()), 0o644)
	policyFor := func(identity bool) string {
		body := fmt.Sprintf(`replicate:
  url: s3://memwatch/host-1
  endpoint: http://%s
  access_key_file: %s
  secret_key_file: %s
  force_path_style: true
  snapshot_interval: 1m
  age_recipients_file: %s
`, srv.addr, filepath.Join(dir, "s3-key"), filepath.Join(dir, "s3-secret"), filepath.Join(dir, "recipients.txt"))
		if identity {
			body += fmt.Sprintf("  age_identity_file: %s\n", filepath.Join(dir, "identity.txt"))
		}
		body += fmt.Sprintf("stores:\n  - name: talk\n    layout: memory-history\n    paths: [%q]\n    settle: 50ms\n    consolidate: false\n", talk)
		p := filepath.Join(dir, fmt.Sprintf("policy-%t.yaml", identity))
		os.WriteFile(p, []byte("version: 1\n"+body), 0o644)
		return p
	}
	pol := policyFor(false)
	state1 := filepath.Join(dir, "state-1")
	p := start(t, "--policy", pol, "--state-dir", state1)
	p.waitLog("replicating the state", 10*time.Second)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 20*time.Second)
	// More writes, so that there are several files and levels.
	for i := range 20 {
		f, _ := os.OpenFile(filepath.Join(talk, "sessions", "chat.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		fmt.Fprintf(f, `{"role":"assistant","content":"the %s reply %d","timestamp":"2026-11-25T10:01:00Z"}`+"\n", marker, i)
		f.Close()
		time.Sleep(50 * time.Millisecond)
	}
	waitUntil(t, 20*time.Second, func() bool {
		r := replicaStatus(t, pol, state1).Replica
		return r != nil && r.Outage == "" && !r.Pending && r.Lag == 0
	})
	p.stop(10 * time.Second)

	var objects int
	filepath.WalkDir(filepath.Join(srv.dir, "memwatch"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(path)
		objects++
		if !strings.HasPrefix(string(data), "age-encryption.org/v1\n") {
			t.Errorf("%s is not an age file: %.40q", path, data)
		}
		for _, w := range []string{marker, secret, "quokka", "SQLite format"} {
			if strings.Contains(string(data), w) {
				t.Errorf("%s holds %q in the clear", path, w)
			}
		}
		return nil
	})
	if objects == 0 {
		t.Fatal("the bucket holds no object")
	}
	t.Logf("%d objects in the bucket, every one an age file", objects)

	// Without the identity: refused, saying why.
	state2 := filepath.Join(dir, "state-2")
	out, err := exec.Command(memwatchFast, "state", "restore", "--policy", pol, "--state-dir", state2).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "age_identity_file") {
		t.Errorf("state restore without age_identity_file: %v\n%s\nwant a refusal that names age_identity_file", err, out)
	}
	os.RemoveAll(state2)
	withID := policyFor(true)
	if out, err := exec.Command(memwatchFast, "state", "restore", "--policy", withID, "--state-dir", state2).CombinedOutput(); err != nil {
		t.Fatalf("state restore with age_identity_file: %v\n%s", err, out)
	}
	// A new host whose agent's session is gone: the spool has its lines.
	os.Remove(filepath.Join(talk, "sessions", "chat.jsonl"))
	p2 := start(t, "--policy", withID, "--state-dir", state2)
	p2.waitLog("caught up: every root evaluated, its logs captured and indexed", 20*time.Second)
	out, err = exec.Command(memwatchFast, "recall", "--all", "--policy", withID, "--state-dir", state2, marker).CombinedOutput()
	if err != nil || !strings.Contains(string(out), marker) {
		t.Errorf("recall %s on the restored state: %v\n%s", marker, err, out)
	}
}
