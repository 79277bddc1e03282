package main

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

// TestInitNamesCrushProjects: Crush keeps a database in each project it
// runs in; init names the ones its projects.json lists outside the
// preset's glob (escaped: a [ in a directory name is not a pattern), and
// skips those that hold no database or are gone.
func TestInitNamesCrushProjects(t *testing.T) {
	home := t.TempDir()
	shallow := filepath.Join(home, "app", ".crush")
	deep := filepath.Join(home, "src", "work[1]", "api", ".crush")
	empty := filepath.Join(home, "src", "empty", ".crush")
	for _, d := range []string{shallow, deep, empty} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{shallow, deep} {
		os.WriteFile(filepath.Join(d, "crush.db"), []byte("x"), 0o644)
	}
	type project struct {
		Path    string `json:"path"`
		DataDir string `json:"data_dir"`
	}
	list := map[string][]project{"projects": {
		{filepath.Dir(shallow), shallow}, {filepath.Dir(deep), deep}, {filepath.Dir(empty), empty},
		{"/gone", "/gone/.crush"}, {"rel", "rel/.crush"},
	}}
	if os.Geteuid() == 0 {
		// As root, on an agent's home (uid 4243): what its own file lists
		// may point anywhere: through a symbolic link in the home to
		// another tree, at a directory of another user's.
		other := t.TempDir()
		os.MkdirAll(filepath.Join(other, "p", ".crush"), 0o755)
		os.WriteFile(filepath.Join(other, "p", ".crush", "crush.db"), []byte("x"), 0o644)
		os.Chown(filepath.Join(other, "p", ".crush"), 4244, 4244)
		os.Symlink(other, filepath.Join(home, "link"))
		list["projects"] = append(list["projects"], project{filepath.Join(home, "link", "p"), filepath.Join(home, "link", "p", ".crush")},
			project{filepath.Join(other, "p"), filepath.Join(other, "p", ".crush")})
		// The home's owner reaches it, and its projects.json is the
		// owner's: init reads it as the owner.
		os.Chmod(filepath.Dir(home), 0o755)
		b, _ := json.Marshal(list)
		os.MkdirAll(filepath.Join(home, ".local", "share", "crush"), 0o755)
		os.WriteFile(filepath.Join(home, ".local", "share", "crush", "projects.json"), b, 0o600)
		filepath.WalkDir(home, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				os.Lchown(p, 4243, 4243)
			}
			return nil
		})
	}
	if os.Geteuid() != 0 {
		b, _ := json.Marshal(list)
		os.MkdirAll(filepath.Join(home, ".local", "share", "crush"), 0o755)
		os.WriteFile(filepath.Join(home, ".local", "share", "crush", "projects.json"), b, 0o600)
	}

	var crush agentFind
	for _, a := range agentFinds {
		if a.preset == "crush" {
			crush = a
		}
	}
	var said strings.Builder
	f, ok := findAgent(home, crush, &said)
	if !ok {
		t.Fatal("crush not found")
	}
	if os.Geteuid() == 0 && (!strings.Contains(said.String(), "link/p/.crush") || !strings.Contains(said.String(), "symbolic link")) {
		t.Errorf("init did not say it left out the root behind a symbolic link:\n%s", said.String())
	}
	if os.Geteuid() == 0 && !strings.Contains(said.String(), "belongs to uid 4244") {
		t.Errorf("init did not say it left out another user's directory:\n%s", said.String())
	}
	if f.roots != 2 {
		t.Errorf("roots: got %d, want 2", f.roots)
	}
	want := []string{filepath.Join(home, "*", ".crush"), filepath.Join(home, "src", `work\[1]`, "api", ".crush")}
	if strings.Join(f.paths, "|") != strings.Join(want, "|") {
		t.Errorf("paths: got %q, want %q", f.paths, want)
	}
	text := initPolicy(home, []found{f})
	pol, err := policy.Parse("init", []byte(text), registry.Specs())
	if err != nil {
		t.Fatalf("the policy does not load: %v\n%s", err, text)
	}
	got := pol.Stores[0].Roots()
	if len(got) != 2 || got[0] != shallow && got[1] != shallow || got[0] != deep && got[1] != deep {
		t.Errorf("roots of the policy: got %q, want %q and %q", got, shallow, deep)
	}
}

// TestInitSaysTheServiceKeeps: init, run by a user while the machine's
// service maintains roots in that user's home, says so (a second daemon
// would rewrite the same files); roots elsewhere are not mentioned.
func TestInitSaysTheServiceKeeps(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	sock := filepath.Join(dir, "memwatch.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(control.Status{Stores: []control.StoreStatus{
			{Name: "claude-code", Roots: []string{filepath.Join(home, ".claude", "projects", "-work-billing"), "/home/other/.claude/projects/-x"}},
		}})
	})}
	go srv.Serve(ln)
	defer srv.Close()

	for _, tc := range []struct {
		home, want string
	}{
		{home, "already maintains 1 root(s) here (" + filepath.Join(home, ".claude", "projects", "-work-billing") + ")"},
		{filepath.Join(dir, "elsewhere"), ""},
	} {
		var b strings.Builder
		sayServiceKeeps(context.Background(), &b, tc.home, sock)
		if got := b.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("home %s: said %q, want %q", tc.home, got, tc.want)
		}
	}
	var b strings.Builder
	sayServiceKeeps(context.Background(), &b, home, filepath.Join(dir, "none.sock"))
	if b.Len() != 0 {
		t.Errorf("no service: said %q", b.String())
	}
}

// TestInitFindsEachAgentBySessions: a home holding one session of an
// agent, where the agent itself wrote it (the recordings' paths in
// session/testdata/agents), and nothing else of it: init finds that
// agent and counts the one session. OpenClaw's run trace beside it is no
// session (its glob once counted only the traces: "*[!y]" is no negation
// to Go's matcher).
func TestInitFindsEachAgentBySessions(t *testing.T) {
	wheres, _ := filepath.Glob(filepath.Join("..", "..", "session", "testdata", "agents", "*", "where"))
	if len(wheres) < 12 {
		t.Fatalf("%d recordings, want the agents' where files", len(wheres))
	}
	for _, w := range wheres {
		b, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimSpace(string(b))
		name := filepath.Base(filepath.Dir(w))
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			path := filepath.Join(home, rel)
			os.MkdirAll(filepath.Dir(path), 0o755)
			os.WriteFile(path, []byte("{}\n"), 0o644)
			if strings.HasPrefix(rel, ".openclaw/") && strings.HasSuffix(rel, ".jsonl") {
				// A trace beside it, as OpenClaw writes one per session.
				os.WriteFile(strings.TrimSuffix(path, ".jsonl")+".trajectory.jsonl", []byte("{}\n{}\n"), 0o644)
			}
			var logs int
			var size int64
			var agents []string
			for _, a := range agentFinds {
				if f, ok := findAgent(home, a, io.Discard); ok {
					logs, size = logs+f.logs, size+f.logBytes
					agents = append(agents, a.preset)
				}
			}
			if len(agents) != 1 || logs != 1 || size != 3 {
				t.Errorf("init over a home of %s: agents %v, %d session log(s) of %d bytes; want one agent, its one log of 3 bytes", rel, agents, logs, size)
			}
		})
	}
}
