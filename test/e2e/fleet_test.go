package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	_ "modernc.org/sqlite"

	"github.com/memwatch/memwatch/control"
)

// TestFleetFollowsEveryHost: three real host daemons replicate to one
// bucket of a real S3 server (versitygw); a central node whose policy has
// only fleet: follows each, read-only. Within 20 s of a write on any
// host, the central node holds that host's new session line; a host
// SIGKILLed with its state wiped stays held, and another host's new line
// still arrives; status lists every host.
func TestFleetFollowsEveryHost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a real S3 server and four daemons")
	}
	t.Parallel()
	srv := newS3Server(t, "memwatch")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "s3-key"), []byte(s3Key), 0o600)
	os.WriteFile(filepath.Join(dir, "s3-secret"), []byte(s3Secret), 0o600)
	creds := fmt.Sprintf("  endpoint: http://%s\n  access_key_file: %s\n  secret_key_file: %s\n  force_path_style: true\n", srv.addr, filepath.Join(dir, "s3-key"), filepath.Join(dir, "s3-secret"))

	type host struct {
		name, state, log string
		p                *proc
	}
	var hosts []*host
	for i := range 3 {
		h := &host{name: fmt.Sprintf("box-%d", i+1)}
		hd := filepath.Join(dir, h.name)
		talk := filepath.Join(hd, "agents", "talk")
		os.MkdirAll(filepath.Join(talk, "sessions"), 0o755)
		h.log = filepath.Join(talk, "sessions", "chat.jsonl")
		os.WriteFile(h.log, []byte(fmt.Sprintf(`{"role":"user","content":"first words on %s"}`+"\n", h.name)), 0o644)
		os.WriteFile(filepath.Join(talk, "MEMORY.md"), []byte(fmt.Sprintf("# Memory\n\n- %s keeps the quokka-%d runbook\n", h.name, i+1)), 0o644)
		os.MkdirAll(hd, 0o755)
		pol := filepath.Join(hd, "policy.yaml")
		os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nreplicate:\n  url: s3://memwatch/fleet/%s\n%sstores:\n  - name: talk\n    layout: memory-history\n    paths: [%q]\n    settle: 100ms\n    consolidate: false\n", h.name, creds, talk)), 0o644)
		h.state = filepath.Join(hd, "state")
		h.p = start(t, "--policy", pol, "--state-dir", h.state)
		h.p.waitLog("replicating the state", 10*time.Second)
		hosts = append(hosts, h)
	}

	// A host whose replica is garbage (a half-written or corrupt upload):
	// skipped with a reason, never stopping the others.
	for _, db := range []string{"memwatch.db", "spool.db", "versions.db"} {
		snap := filepath.Join(srv.dir, "memwatch", "fleet", "broken", db, "ltx", "9", "0000000000000001-0000000000000001.ltx")
		os.MkdirAll(filepath.Dir(snap), 0o755)
		os.WriteFile(snap, []byte("not an LTX file at all"), 0o644)
	}

	central := filepath.Join(dir, "central")
	os.MkdirAll(central, 0o755)
	cpol := filepath.Join(central, "policy.yaml")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	// A token that reaches box-2 alone, to read.
	box2Token := "box-2-reader-" + strings.Repeat("b", 24)
	sum := sha256.Sum256([]byte(box2Token))
	// Tokens for owners within a host: the roots' owner there (this
	// test's uid, as HOST:OWNER), and another (hosts: with owners:).
	me := os.Getuid()
	ownerToken, otherToken := "box-3-owner-"+strings.Repeat("o", 24), "box-3-other-"+strings.Repeat("x", 24)
	osum, xsum := sha256.Sum256([]byte(ownerToken)), sha256.Sum256([]byte(otherToken))
	controlYAML := fmt.Sprintf("control:\n  tcp: %s\n  tokens:\n    - name: box2\n      sha256: %s\n      hosts: [box-2]\n      rights: [read]\n"+
		"    - name: box3-owner\n      sha256: %s\n      hosts: [\"box-3:%d\"]\n      rights: [read]\n    - name: box3-other\n      sha256: %s\n      hosts: [box-3]\n      owners: [\"%d\"]\n      rights: [read]\nui:\n  enabled: true\n",
		addr, hex.EncodeToString(sum[:]), hex.EncodeToString(osum[:]), me, hex.EncodeToString(xsum[:]), me+4242)
	os.WriteFile(cpol, []byte("version: 1\nfleet:\n  url: s3://memwatch/fleet\n"+creds+"  interval: 200ms\n"+controlYAML), 0o644)
	if out, err := exec.Command(memwatchBin, "validate", "--policy", cpol).CombinedOutput(); err != nil || !strings.Contains(string(out), "central node") {
		t.Fatalf("validate the central policy: %v\n%s", err, out)
	}
	cstate := filepath.Join(central, "state")
	c := start(t, "--policy", cpol, "--state-dir", cstate)
	c.waitLog("following the fleet", 10*time.Second)

	// holds reports whether the central node's copy of a host's spool
	// holds a line with text.
	holds := func(h *host, text string) bool {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(cstate, "fleet", h.name, "spool.db")+"?mode=ro")
		if err != nil {
			return false
		}
		defer db.Close()
		var n int
		if db.QueryRow(`SELECT count(*) FROM lines WHERE instr(data, ?) > 0`, text).Scan(&n) != nil {
			return false
		}
		return n > 0
	}
	within := func(what string, d time.Duration, ok func() bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		for !ok() {
			if time.Since(t0) > d {
				t.Fatalf("%s: not within %v", what, d)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(t0)
	}
	for _, h := range hosts {
		within("the central node holds "+h.name+"'s first line", 60*time.Second, func() bool { return holds(h, "first words on "+h.name) })
	}
	// recall --all on the central node finds each host's new line and its
	// memory file, each result naming its host; the citation names it too.
	type hit struct{ Text, Citation, Host, Source string }
	recallAll := func(q string) []hit {
		t.Helper()
		out, err := exec.Command(memwatchFast, "recall", "--policy", cpol, "--state-dir", cstate, "--all", "--json", q).Output()
		var hs []hit
		if exitCode(err) == 1 {
			err = nil // nothing found (yet)
		}
		if err != nil || json.Unmarshal(out, &hs) != nil {
			t.Fatalf("recall %q: %v\n%s", q, err, out)
		}
		return hs
	}
	// A write on each host: found by recall --all at the central node
	// within 20 s of the write.
	for i, h := range hosts {
		line := fmt.Sprintf("the walrus-%d ledger deploys from %s", i, h.name)
		f, _ := os.OpenFile(h.log, os.O_WRONLY|os.O_APPEND, 0)
		fmt.Fprintf(f, `{"role":"assistant","content":%q}`+"\n", line)
		f.Close()
		took := within(h.name+"'s new line recalled at the central node", 20*time.Second, func() bool { return len(recallAll(fmt.Sprintf("walrus-%d", i))) > 0 })
		t.Logf("%s: a new line recalled at the central node %v after the write", h.name, took.Round(10*time.Millisecond))
	}
	for i, h := range hosts {
		for _, c := range []struct{ q, source string }{{fmt.Sprintf("walrus-%d", i), "messages"}, {fmt.Sprintf("quokka-%d", i+1), "memory"}} {
			var hs []hit
			within(h.name+" "+c.q+" recalled at the central node", 20*time.Second, func() bool { hs = recallAll(c.q); return len(hs) > 0 })
			if len(hs) != 1 || hs[0].Host != h.name || hs[0].Source != c.source || !strings.HasPrefix(hs[0].Citation, h.name+":/") {
				t.Errorf("recall %s: %+v; want one %s result of host %s, cited %s:/...", c.q, hs, c.source, h.name, h.name)
				continue
			}
			// The citation, as printed, shows the line on the central node.
			out, err := exec.Command(memwatchFast, "show", "--policy", cpol, "--state-dir", cstate, hs[0].Citation).CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.q) || !strings.Contains(string(out), "from what host "+h.name+" replicated") {
				t.Errorf("show %s: %v\n%s", hs[0].Citation, err, out)
			}
		}
	}
	if hs := recallAll("what did box-2 say about the walrus ledger?"); len(hs) == 0 || hs[0].Host != "box-2" {
		t.Errorf("a question over every host: %+v", hs)
	}

	// A memory file's versions, per host: box-2 changes its MEMORY.md;
	// versions lists both, diff shows the change, the copy has the new one.
	mem2 := filepath.Join(filepath.Dir(filepath.Dir(hosts[1].log)), "MEMORY.md")
	os.WriteFile(mem2, []byte("# Memory\n\n- box-2 keeps the quokka-2 runbook\n- box-2 now also keeps the narwhal pager\n"), 0o644)
	within("box-2's new MEMORY.md recalled at the central node", 20*time.Second, func() bool { return len(recallAll("narwhal")) == 1 })
	out, err := exec.Command(memwatchBin, "versions", "--policy", cpol, "--state-dir", cstate, "box-2:"+mem2).CombinedOutput()
	if err != nil || bytes.Count(out, []byte("\n")) != 3 {
		t.Errorf("versions of box-2's MEMORY.md: %v\n%s", err, out)
	}
	out, err = exec.Command(memwatchBin, "diff", "--policy", cpol, "--state-dir", cstate, "box-2:"+mem2+"@1", "box-2:"+mem2+"@2").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "+- box-2 now also keeps the narwhal pager") {
		t.Errorf("diff of box-2's MEMORY.md @1 @2: %v\n%s", err, out)
	}
	if out2, err := exec.Command(memwatchBin, "diff", "--policy", cpol, "--state-dir", cstate, "--host", "box-2", mem2+"@1", mem2+"@2").CombinedOutput(); err != nil || string(out2) != string(out) {
		t.Errorf("diff --host box-2: %v\n%s\nwant\n%s", err, out2, out)
	}
	if out2, err := exec.Command(memwatchBin, "versions", "--policy", cpol, "--state-dir", cstate, "--host", "box-2", mem2).CombinedOutput(); err != nil || bytes.Count(out2, []byte("\n")) != 3 {
		t.Errorf("versions --host box-2: %v\n%s", err, out2)
	}
	// --host: one host's memory alone.
	out, err = exec.Command(memwatchFast, "recall", "--policy", cpol, "--state-dir", cstate, "--host", "box-3", "--json", "walrus").Output()
	var one []hit
	if err != nil || json.Unmarshal(out, &one) != nil || len(one) != 1 || one[0].Host != "box-3" {
		t.Errorf("recall --host box-3 walrus: %v\n%s", err, out)
	}

	// A token scoped to box-2: its search finds box-2's lines only; box-1's
	// versions and citations are refused; MCP recall_memory and the review
	// page's search answer within the same scope.
	tc := tcpClient{t, addr, box2Token}
	code, body := tc.do("GET", "/v1/recall?q=walrus&limit=20")
	var rr struct{ Results []hit }
	json.Unmarshal([]byte(body), &rr)
	if code != 200 || len(rr.Results) != 1 || rr.Results[0].Host != "box-2" {
		t.Errorf("recall with box-2's token: %d %s; want box-2's line alone", code, body)
	}
	if code, body = tc.do("GET", "/v1/versions?path="+url.QueryEscape("box-1:"+filepath.Join(filepath.Dir(filepath.Dir(hosts[0].log)), "MEMORY.md"))); code != 403 {
		t.Errorf("box-1's versions with box-2's token: %d %s, want 403", code, body)
	}
	var vs []struct{ N int }
	if code, body = tc.do("GET", "/v1/versions?path="+url.QueryEscape("box-2:"+mem2)); code != 200 || json.Unmarshal([]byte(body), &vs) != nil || len(vs) != 2 {
		t.Errorf("box-2's versions with box-2's token: %d %s", code, body)
	}
	if code, body = tc.do("GET", "/ui/search?q=walrus"); code != 200 || !strings.Contains(body, "box-2:") || strings.Contains(body, "box-1:") {
		t.Errorf("the review page's search with box-2's token: %d\n%s", code, body)
	}
	if code, body = tc.do("GET", "/ui/"); code != 200 || !strings.Contains(body, "<h2>Hosts</h2>") || !strings.Contains(body, "<td>box-2</td>") || strings.Contains(body, "<td>box-1</td>") {
		t.Errorf("the review pages' overview with box-2's token: %d\n%s", code, body)
	}
	// Owners within a host: the owner's token finds box-3's line, another
	// owner's nothing of it.
	var scoped struct{ Results []hit }
	if code, body = (tcpClient{t, addr, ownerToken}).do("GET", "/v1/recall?q=walrus&limit=20"); code != 200 || json.Unmarshal([]byte(body), &scoped) != nil || len(scoped.Results) != 1 || scoped.Results[0].Host != "box-3" {
		t.Errorf("recall with box-3's owner's token: %d %s; want box-3's line alone", code, body)
	}
	scoped.Results = nil
	if code, body = (tcpClient{t, addr, otherToken}).do("GET", "/v1/recall?q=walrus&limit=20"); code != 200 || json.Unmarshal([]byte(body), &scoped) != nil || len(scoped.Results) != 0 {
		t.Errorf("recall with another owner's token on box-3: %d %s; want nothing", code, body)
	}
	var tst control.Status
	if code, body = tc.do("GET", "/v1/status"); code != 200 || json.Unmarshal([]byte(body), &tst) != nil || len(tst.Fleet) != 1 || tst.Fleet[0].Host != "box-2" || tst.Fleet[0].Dir != "" {
		t.Errorf("status with box-2's token: %d %s; want box-2 alone, without the state directory", code, body)
	}
	hc := &http.Client{Transport: bearer{box2Token, http.DefaultTransport}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fleet-test"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect to the central node's /mcp: %v", err)
	}
	defer cs.Close()
	if text, isErr := callText(t, cs, "recall_memory", map[string]any{"query": "walrus ledger"}); isErr || !strings.Contains(text, "box-2:") || strings.Contains(text, "box-1:") || strings.Contains(text, "box-3:") {
		t.Errorf("recall_memory with box-2's token: %s", text)
	}
	// The administrator's stdio MCP (memwatch mcp, as root): every host.
	cmd := exec.Command(memwatchBin, "mcp", "--policy", cpol, "--state-dir", cstate)
	admin, err := mcp.NewClient(&mcp.Implementation{Name: "fleet-test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to memwatch mcp: %v", err)
	}
	defer admin.Close()
	if text, isErr := callText(t, admin, "recall_memory", map[string]any{"query": "walrus", "limit": 10}); isErr || !strings.Contains(text, "box-1:") || !strings.Contains(text, "box-3:") {
		t.Errorf("recall_memory over stdio: %s", text)
	}

	// Status lists each host, up to date.
	status := func() control.Status {
		t.Helper()
		var st control.Status
		out, err := exec.Command(memwatchBin, "status", "--policy", cpol, "--state-dir", cstate, "--json").Output()
		if err != nil || json.Unmarshal(out, &st) != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		return st
	}
	st := status()
	if len(st.Fleet) != 4 {
		t.Fatalf("status lists %d hosts, want 4 (box-1 to 3, broken): %+v", len(st.Fleet), st.Fleet)
	}
	for _, h := range st.Fleet {
		if h.Host == "broken" {
			if h.Error == "" || h.Bytes != 0 {
				t.Errorf("status of the broken host: %+v; want a reason and nothing restored", h)
			}
			continue
		}
		if h.Bytes == 0 || h.LastChange.IsZero() || h.Checked.IsZero() || h.Stopped || h.Error != "" {
			t.Errorf("status of %s: %+v", h.Host, h)
		}
	}
	text, _ := exec.Command(memwatchBin, "status", "--policy", cpol, "--state-dir", cstate).Output()
	t.Logf("status of the central node:\n%s", bytes.TrimSpace(text[bytes.LastIndex(text, []byte("fleet:")):]))
	if !bytes.Contains(text, []byte("fleet: 4 host(s) followed")) || !bytes.Contains(text, []byte("box-2: ")) || !bytes.Contains(text, []byte("broken: ")) || !bytes.Contains(text, []byte("skipped: ")) {
		t.Errorf("status text has no fleet section:\n%s", text)
	}

	// box-1 dies: SIGKILL, its state wiped. What the central node holds of
	// it stays; box-2's next line still arrives.
	dead := hosts[0]
	dead.p.cmd.Process.Signal(syscall.SIGKILL)
	<-dead.p.done // the process reaped (by its reader: Wait is its)
	os.RemoveAll(dead.state)
	line := "after box-1 died, box-2 says the otter ledger moved"
	f, _ := os.OpenFile(hosts[1].log, os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintf(f, `{"role":"user","content":%q}`+"\n", line)
	f.Close()
	within("box-2's line after box-1 died", 20*time.Second, func() bool { return len(recallAll("otter")) == 1 })
	if hs := recallAll("walrus-0"); len(hs) != 1 || hs[0].Host != "box-1" {
		t.Errorf("box-1 died: what it had is no longer found at the central node: %+v", hs)
	}
	// The central node is SIGKILLed and started again on its state: what
	// it copied is copied once (no line found twice), and box-3's next
	// line is found.
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	c = start(t, "--policy", cpol, "--state-dir", cstate)
	c.waitLog("following the fleet", 10*time.Second)
	f, _ = os.OpenFile(hosts[2].log, os.O_WRONLY|os.O_APPEND, 0)
	fmt.Fprintf(f, `{"role":"user","content":%q}`+"\n", "box-3 after the central node restarted: the heron ledger")
	f.Close()
	within("box-3's line after the central node restarted", 20*time.Second, func() bool { return len(recallAll("heron")) == 1 })
	for i := range hosts {
		if hs := recallAll(fmt.Sprintf("walrus-%d", i)); len(hs) != 1 {
			t.Errorf("after the central node restarted, walrus-%d is found %d times, want once: %+v", i, len(hs), hs)
		}
	}

	// The central node wrote nothing to the bucket: its objects are the
	// hosts' own.
	var keys []string
	filepath.WalkDir(srv.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "fleet") && !strings.Contains(p, "box-") && !strings.Contains(p, "broken") {
			keys = append(keys, p)
		}
		return nil
	})
	if len(keys) > 0 {
		t.Errorf("objects in the bucket that are no host's: %v", keys)
	}
}
