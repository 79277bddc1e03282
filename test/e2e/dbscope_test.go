package e2e

import (
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/test/fixtures/dbrows/rows"
)

// TestRecallScopesDatabaseConversations: opencode keeps every project's
// conversations in one database, each row naming the directory it ran
// in. Asked from a project's directory, recall searches that project's
// conversations only (and says so); from the home, all of them. The
// database is the recorded opencode's, its one conversation written
// twice: once in project billing, once (its words changed) in ledger.
func TestRecallScopesDatabaseConversations(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	billing, ledger := filepath.Join(home, "src", "billing"), filepath.Join(home, "src", "ledger")
	os.MkdirAll(billing, 0o755)
	os.MkdirAll(ledger, 0o755)
	writeConversations(t, home, []conversation{{billing, "", "eu-west-2"}, {ledger, "L", "ap-south-9"}})

	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	state := filepath.Join(home, "state")
	env := append(os.Environ(), "HOME="+home)
	recallAt := func(dir string, args ...string) (string, string, int) {
		cmd := exec.Command(memwatchFast, append([]string{"recall", "--policy", pol, "--state-dir", state, "--color", "never"}, args...)...)
		cmd.Dir, cmd.Env = dir, env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), exitCode(err)
	}
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 60*time.Second)
	waitUntil(t, 20*time.Second, func() bool {
		out, _, _ := recallAt(home, "ap-south-9")
		return strings.Contains(out, "ap-south-9")
	})
	for _, c := range []struct {
		name, dir, word string
		want            int
		says            string
	}{
		{"billing's word from billing", billing, "eu-west-2", 0, "the memory of project " + billing + ": 1 conversation(s) of "},
		{"ledger's word from billing", billing, "ap-south-9", 1, "the memory of project " + billing},
		{"ledger's word from ledger", ledger, "ap-south-9", 0, "the memory of project " + ledger},
		{"billing's word from the home", home, "eu-west-2", 0, "every root"},
		{"ledger's word from the home", home, "ap-south-9", 0, "every root"},
	} {
		out, stderr, code := recallAt(c.dir, c.word)
		if code != c.want || !strings.Contains(stderr, c.says) {
			t.Errorf("%s: exit %d, want %d; stderr %q, want it to say %q\n%s", c.name, code, c.want, stderr, c.says, out)
		}
		if c.want == 0 && !strings.Contains(out, c.word) {
			t.Errorf("%s: %q not in the results:\n%s", c.name, c.word, out)
		}
	}
	// A question (ranked) from billing finds billing's conversation, never
	// ledger's.
	out, stderr, code := recallAt(billing, "does billing deploy through ap-south-9 at night?")
	if code != 0 || !strings.Contains(out, "eu-west-2") || strings.Contains(out, "ap-south-9") {
		t.Errorf("a question from billing: exit %d\n%s\n%s", code, out, stderr)
	}
}

// conversation is the recorded opencode's conversation as another
// project's: its directory, a suffix making its ids its own (their order
// kept), and what stands for its region (eu-west-2).
type conversation struct{ proj, suffix, word string }

// writeConversations writes the recorded opencode's schema (when the
// database is new) and its one conversation as each of convs into the
// database opencode keeps in home.
func writeConversations(t *testing.T, home string, convs []conversation) {
	t.Helper()
	dir := filepath.Join("..", "..", "session", "testdata", "agents", "opencode-1.18.33")
	dbPath := filepath.Join(home, ".local", "share", "opencode", "opencode.db")
	_, err := os.Stat(dbPath)
	fresh := err != nil
	os.MkdirAll(filepath.Dir(dbPath), 0o755)
	db, err := sql.Open("sqlite", "file:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if fresh {
		if _, err := db.Exec(readFile(t, filepath.Join(dir, "schema.sql"))); err != nil {
			t.Fatal(err)
		}
	}
	recorded, err := rows.Turn(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range convs {
		for _, r := range recorded {
			row := rows.Row{Table: r.Table, Row: map[string]json.RawMessage{}}
			for c, v := range r.Row {
				s := string(v)
				if c == "directory" {
					s = `"` + p.proj + `"`
				}
				s = strings.NewReplacer("ses_", "ses"+p.suffix+"_", "msg_", "msg"+p.suffix+"_", "prt_", "prt"+p.suffix+"_", "eu-west-2", p.word).Replace(s)
				row.Row[c] = json.RawMessage(s)
			}
			if err := row.Insert(db); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestStatusCountsADatabaseConversation: opencode's conversations are
// rows of its database, held by the spool, not lines of a file: one that
// goes on with a credential is counted by status within a minute, as a
// session file's is.
func TestStatusCountsADatabaseConversation(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	billing := filepath.Join(home, "src", "billing")
	os.MkdirAll(billing, 0o755)
	writeConversations(t, home, []conversation{{billing, "", "eu-west-2"}})
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if out, err := exec.Command(memwatchFast, "init", "--home", home, "--write", pol).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	state := filepath.Join(home, "state")
	found := func() int { t.Helper(); return statusFound(t, pol, state) }
	p := start(t, "--policy", pol, "--state-dir", state)
	p.waitLog("counted the credentials in the agents' memory", 60*time.Second)
	before := found()
	writeConversations(t, home, []conversation{{billing, "K", "OPENAI_KEY=sk-proj-Xk3Rv9QmZ2Tn8Wb5Yc4JvR7kLpQxT3BlbkFJXk3Rv9QmZ2Tn8Wb5Yc4J"}})
	waitUntil(t, 90*time.Second, func() bool { return found() > before })
	if got := found(); got <= before {
		t.Errorf("status counts %d credentials 90 s after a conversation holding one went on in opencode's database, want more than %d", got, before)
	}
}
