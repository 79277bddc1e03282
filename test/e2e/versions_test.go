package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/versions"
)

// profile is version i of the memory note the agent rewrites.
func profile(i int) string {
	return fmt.Sprintf("# profile\n\n- the user prefers short answers\n- fact of version %d\n- the user deploys on Fridays\n", i)
}

// TestAgentVersionsAndDeletions: an agent process writes 50 versions of a
// memory note, deletes three notes and cuts one to a line, against the
// real daemon. Every version is listed with a right diff, the three notes
// come back byte-exact, and the cut is reported as a large shrink.
func TestAgentVersionsAndDeletions(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "agents", "a")
	facts := filepath.Join(root, "facts")
	os.MkdirAll(facts, 0o755)
	notes := map[string]string{}
	for i := 1; i <= 4; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "# note %d\n\n", i)
		for j := range 12 {
			fmt.Fprintf(&b, "- note %d fact %d: something the agent learned \x1b[0m and kept\n", i, j)
		}
		notes[fmt.Sprintf("n%d.md", i)] = b.String()
		os.WriteFile(filepath.Join(facts, fmt.Sprintf("n%d.md", i)), []byte(b.String()), 0o644)
	}
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: notes\n    layout: facts-episodes\n    paths: [%q]\n    settle: 20ms\n", filepath.Join(dir, "agents", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	// The notes as memwatch first saw them are versions too.
	waitUntil(t, 10*time.Second, func() bool {
		return len(listVersions(t, pol, stateDir, filepath.Join(facts, "n4.md"))) == 1
	})

	// The agent: a real process writing as agents do.
	var script strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&script, "printf '%s' > %s/profile.tmp && mv %s/profile.tmp %s/profile.md; sleep 0.15\n", strings.ReplaceAll(profile(i), "\n", `\n`), facts, facts, facts)
	}
	saved := filepath.Join(dir, "saved")
	os.MkdirAll(saved, 0o755)
	// What the notes hold when the agent deletes them (memwatch's summary
	// line included) is what must come back.
	fmt.Fprintf(&script, "cp %s/n1.md %s/n2.md %s/n3.md %s/n4.md %s/\n", facts, facts, facts, facts, saved)
	fmt.Fprintf(&script, "rm %s/n1.md %s/n2.md %s/n3.md\nsleep 0.3\nhead -n 1 %s/n4.md > %s/n4.cut && cat %s/n4.cut > %s/n4.md && rm %s/n4.cut\n",
		facts, facts, facts, facts, facts, facts, facts, facts)
	if out, err := exec.Command("sh", "-c", script.String()).CombinedOutput(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	profilePath := filepath.Join(facts, "profile.md")
	var vs []versions.Version
	// The agent's versions, and memwatch's own (its summary line) between
	// them, each attributed.
	agent := func() []versions.Version {
		var out []versions.Version
		for _, v := range vs {
			if v.Writer == versions.ByAgent {
				out = append(out, v)
			} else if v.Writer != versions.ByMemwatch || v.Record == 0 {
				t.Errorf("version %d written by %q (journal %d), want the agent or memwatch with its record", v.N, v.Writer, v.Record)
			}
		}
		return out
	}
	waitUntil(t, 10*time.Second, func() bool {
		vs = listVersions(t, pol, stateDir, profilePath)
		return len(agent()) >= 50
	})
	byAgent := agent()
	if len(byAgent) != 50 {
		t.Fatalf("memwatch versions lists %d versions of profile.md by the agent, want 50 (all: %+v)", len(byAgent), vs)
	}
	t.Logf("profile.md: %d versions, %d by the agent", len(vs), len(byAgent))
	for i, v := range byAgent {
		if v.Size != int64(len(profile(i+1))) {
			t.Errorf("agent version %d: %+v, want %d bytes", i+1, v, len(profile(i+1)))
		}
	}
	for _, i := range []int{0, 17, 48} {
		out, err := exec.Command(memwatchBin, "diff", "--policy", pol, "--state-dir", stateDir, fmt.Sprintf("%s@%d", profilePath, byAgent[i].N), fmt.Sprintf("%s@%d", profilePath, byAgent[i+1].N)).CombinedOutput()
		if err != nil {
			t.Fatalf("memwatch diff @%d @%d: %v\n%s", i, i+1, err, out)
		}
		minus, plus := fmt.Sprintf("\n-- fact of version %d\n", i+1), fmt.Sprintf("\n+- fact of version %d\n", i+2)
		changed := 0
		for _, l := range strings.Split(string(out), "\n") {
			if (strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+")) && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "+++") {
				changed++
			}
		}
		if !strings.Contains(string(out), minus) || !strings.Contains(string(out), plus) || changed != 2 {
			t.Errorf("memwatch diff @%d @%d:\n%s\nwant exactly one line out (%q) and one in (%q)", i, i+1, out, minus, plus)
		}
	}

	// The deletions and the cut are reported.
	var st control.Status
	waitUntil(t, 10*time.Second, func() bool {
		out, err := exec.Command(memwatchBin, "status", "--json", "--policy", pol, "--state-dir", stateDir).Output()
		if err != nil || json.Unmarshal(out, &st) != nil {
			return false
		}
		return len(st.Losses) >= 4
	})
	kinds := map[string]string{}
	for _, l := range st.Losses {
		kinds[l.Path] = l.Kind
	}
	want := map[string]string{"facts/n1.md": "deleted", "facts/n2.md": "deleted", "facts/n3.md": "deleted", "facts/n4.md": "shrunk"}
	for path, kind := range want {
		if kinds[path] != kind {
			t.Errorf("status agent_losses: %s is %q, want %q (all: %+v)", path, kinds[path], kind, st.Losses)
		}
	}
	p.waitLog("an agent removed most of a memory file in one write; the version before is kept", 5*time.Second)

	out, err := exec.Command(memwatchBin, "restore", "--policy", pol, "--state-dir", stateDir, "--deleted", root, "--since", "1h").CombinedOutput()
	if err != nil {
		t.Fatalf("memwatch restore --deleted: %v\n%s", err, out)
	}
	t.Logf("memwatch restore --deleted:\n%s", out)
	for i := 1; i <= 4; i++ {
		b, _ := os.ReadFile(filepath.Join(saved, fmt.Sprintf("n%d.md", i)))
		notes[fmt.Sprintf("n%d.md", i)] = string(b)
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("n%d.md", i)
		got, err := os.ReadFile(filepath.Join(facts, name))
		if err != nil || string(got) != notes[name] {
			t.Errorf("%s after restore --deleted: %q, %v; want it back byte-exact", name, got, err)
		}
	}
	// The cut note goes back to the version before the cut.
	var before int64
	for _, v := range listVersions(t, pol, stateDir, filepath.Join(facts, "n4.md")) {
		if v.Lines > 10 {
			before = v.N
		}
	}
	out, err = exec.Command(memwatchBin, "restore", "--policy", pol, "--state-dir", stateDir, fmt.Sprintf("%s@%d", filepath.Join(facts, "n4.md"), before)).CombinedOutput()
	if err != nil {
		t.Fatalf("memwatch restore n4.md: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(facts, "n4.md")); string(got) != notes["n4.md"] {
		t.Errorf("n4.md after restore = %q, want the version before the cut", got)
	}

	// With no daemon running, restore --missing does the same here: the
	// files gone from disk come back as their newest version, the others
	// stay as they are.
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(filepath.Join(facts, "n3.md"))
	for _, name := range []string{"n1.md", "n2.md"} {
		if err := os.Remove(filepath.Join(facts, name)); err != nil {
			t.Fatal(err)
		}
	}
	out, err = exec.Command(memwatchBin, "restore", "--policy", pol, "--state-dir", stateDir, "--missing", root).CombinedOutput()
	if err != nil {
		t.Fatalf("memwatch restore --missing (no daemon): %v\n%s", err, out)
	}
	for _, name := range []string{"n1.md", "n2.md"} {
		if got, err := os.ReadFile(filepath.Join(facts, name)); err != nil || string(got) != notes[name] {
			t.Errorf("%s after restore --missing: %q, %v; want it back byte-exact", name, got, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(facts, "n3.md")); string(got) != string(kept) || strings.Count(string(out), "restored") > 2 {
		t.Errorf("restore --missing touched a file on disk:\n%s", out)
	}
	out, err = exec.Command(memwatchBin, "restore", "--policy", pol, "--state-dir", stateDir, "--missing", root).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nothing to restore") {
		t.Errorf("a second restore --missing: %v\n%s, want nothing to restore", err, out)
	}
}

func listVersions(t *testing.T, pol, stateDir, path string) []versions.Version {
	t.Helper()
	out, err := exec.Command(memwatchBin, "versions", "--json", "--policy", pol, "--state-dir", stateDir, path).Output()
	if err != nil {
		return nil
	}
	var vs []versions.Version
	if err := json.Unmarshal(out, &vs); err != nil {
		t.Fatalf("memwatch versions --json: %v\n%s", err, out)
	}
	return vs
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRestoreDeletedAtOnce: with restore_deleted, a memory file an agent
// deletes is back a moment later, byte for byte, journaled.
func TestRestoreDeletedAtOnce(t *testing.T) {
	dir := t.TempDir()
	facts := filepath.Join(dir, "agents", "a", "facts")
	os.MkdirAll(facts, 0o755)
	note := filepath.Join(facts, "keep.md")
	os.WriteFile(note, []byte("# keep\n\n- the user's name is Ada\n- prefers tea\n"), 0o644)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: notes\n    layout: facts-episodes\n    paths: [%q]\n    settle: 20ms\n    restore_deleted: true\n", filepath.Join(dir, "agents", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	// Once memwatch has seen the note as it is (its summary line included,
	// if it adds one), that is what must come back.
	var want []byte
	waitUntil(t, 10*time.Second, func() bool {
		vs := listVersions(t, pol, stateDir, note)
		want, _ = os.ReadFile(note)
		return len(vs) > 0 && vs[len(vs)-1].SHA == versions.Hash(want)
	})
	if err := exec.Command("rm", note).Run(); err != nil {
		t.Fatal(err)
	}
	p.waitLog("put back a memory file an agent deleted (restore_deleted)", 10*time.Second)
	if got, err := os.ReadFile(note); err != nil || string(got) != string(want) {
		t.Errorf("keep.md after the agent deleted it: %q, %v; want it back as %q", got, err, want)
	}
}

// TestSavesAreOneVersionEach: an agent saving a memory note 20 times with
// the shell's > (open with O_TRUNC, then write: what most agents' write
// tools do), and another 20 times by temp file and rename, gives 20
// versions each: none empty, and no loss alarm. A real cut to one line and
// a real deletion still warn, once each.
func TestSavesAreOneVersionEach(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "agents", "a")
	facts := filepath.Join(root, "facts")
	os.MkdirAll(facts, 0o755)
	stateDir := filepath.Join(dir, "state")
	pol := writePolicy(t, dir, fmt.Sprintf("stores:\n  - name: notes\n    layout: facts-episodes\n    paths: [%q]\n    settle: 100ms\n", filepath.Join(dir, "agents", "*")))
	p := start(t, "--policy", pol, "--state-dir", stateDir)
	p.waitLog("ready", 10*time.Second)
	note := func(i int) string {
		return fmt.Sprintf(`# user\n\n- prefers short answers\n- deploys on Fridays\n- uses vim\n- lives in Lyon\n- save %d\n`, i)
	}
	var inPlace, renamed strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&inPlace, "printf '%s' > %s/user.md; sleep 0.4\n", note(i), facts)
		fmt.Fprintf(&renamed, "printf '%s' > %s/other.tmp && mv %s/other.tmp %s/other.md; sleep 0.4\n", note(i), facts, facts, facts)
	}
	errs := make(chan error, 2)
	for _, s := range []string{inPlace.String(), renamed.String()} {
		go func() {
			out, err := exec.Command("sh", "-c", s).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	byAgent := func(name string) (n, empty int) {
		for _, v := range listVersions(t, pol, stateDir, filepath.Join(facts, name)) {
			if v.Writer == versions.ByAgent && !v.Deleted() {
				n++
				if v.Size == 0 {
					empty++
				}
			}
		}
		return n, empty
	}
	for _, name := range []string{"user.md", "other.md"} {
		waitUntil(t, 10*time.Second, func() bool { n, _ := byAgent(name); return n >= 20 })
		if n, empty := byAgent(name); n != 20 || empty != 0 {
			t.Errorf("%s: %d versions by the agent, %d empty; want 20 and 0: %+v", name, n, empty, listVersions(t, pol, stateDir, filepath.Join(facts, name)))
		}
	}
	warnings := func(msg string) int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, l := range p.lines {
			if l["level"] == "WARN" && strings.HasPrefix(fmt.Sprint(l["msg"]), msg) {
				n++
			}
		}
		return n
	}
	if n := warnings("an agent removed most of a memory file"); n != 0 {
		t.Errorf("%d shrink warnings for saves that lost nothing, want 0", n)
	}
	// A real cut and a real deletion.
	exec.Command("sh", "-c", fmt.Sprintf("printf '# user\\n' > %s/user.md; rm %s/other.md", facts, facts)).Run()
	waitUntil(t, 10*time.Second, func() bool {
		return warnings("an agent removed most of a memory file") >= 1 && warnings("an agent deleted a memory file") >= 1
	})
	time.Sleep(500 * time.Millisecond)
	if s, d := warnings("an agent removed most of a memory file"), warnings("an agent deleted a memory file"); s != 1 || d != 1 {
		t.Errorf("a cut and a deletion: %d shrink and %d deletion warnings, want 1 and 1", s, d)
	}
}
