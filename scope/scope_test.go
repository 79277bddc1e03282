package scope

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
)

func TestOf(t *testing.T) {
	home := t.TempDir()
	proj := filepath.Join(home, "src", "billing")
	os.MkdirAll(filepath.Join(proj, "deep"), 0o755)
	claude := filepath.Join(home, ".claude", "projects", nonAlnum.ReplaceAllString(proj, "-"))
	other := filepath.Join(home, ".claude", "projects", "-elsewhere")
	codex := filepath.Join(home, ".codex")
	pi := filepath.Join(home, ".pi", "agent")
	crush := filepath.Join(proj, ".crush")
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(s), 0o644)
	}
	write(filepath.Join(claude, "a.jsonl"), "{}\n")
	write(filepath.Join(other, "b.jsonl"), "{}\n")
	write(filepath.Join(codex, "sessions", "2026", "11", "20", "rollout-1.jsonl"), `{"type":"session_meta","payload":{"id":"x","cwd":"`+proj+`","instructions":"long"}}`+"\n")
	write(filepath.Join(codex, "sessions", "2026", "11", "21", "rollout-2.jsonl"), `{"type":"session_meta","payload":{"cwd":"/elsewhere"}}`+"\n")
	write(filepath.Join(pi, "sessions", "--"+filepath.ToSlash(proj[1:])+"--", "1.jsonl"), "{}\n")
	write(filepath.Join(pi, "sessions", "--elsewhere--", "2.jsonl"), "{}\n")
	os.MkdirAll(crush, 0o755)
	// Pi names its directory with / as -.
	os.Rename(filepath.Join(pi, "sessions", "--"+filepath.ToSlash(proj[1:])+"--"), filepath.Join(pi, "sessions", "--"+nonAlnumSlash(proj[1:])+"--"))
	text := "version: 1\nstores:\n" +
		"  - {name: cc, preset: claude-code, paths: [" + filepath.Join(home, ".claude", "projects", "*") + "]}\n" +
		"  - {name: codex, preset: codex, paths: [" + codex + "]}\n" +
		"  - {name: pi, preset: pi, paths: [" + pi + "]}\n" +
		"  - {name: crush, preset: crush, paths: [" + filepath.Join(home, "*", "*", ".crush") + "]}\n"
	p, err := policy.Parse("test", []byte(text), registry.Specs())
	if err != nil {
		t.Fatal(err)
	}
	var cands []Candidate
	for _, s := range p.Stores {
		for _, id := range s.RootIDs() {
			cands = append(cands, Candidate{Store: s, ID: id})
		}
	}
	open := func(c Candidate) (*confine.Root, error) { return confine.Open(c.ID.Path, confine.Options{}) }
	roots := func(s Scope) []string {
		var out []string
		for _, r := range s.Roots {
			out = append(out, r.ID.Path+"|"+filepath.Join(r.Files...))
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		dir  string
		kind string
		want []string
	}{
		{proj, Project, []string{claude + "|", codex + "|" + filepath.Join("sessions", "2026", "11", "20", "rollout-1.jsonl"), crush + "|", pi + "|" + filepath.Join("sessions", "--"+nonAlnumSlash(proj[1:])+"--", "1.jsonl")}},
		{claude, InRoot, []string{claude + "|"}},
		{filepath.Join(codex, "sessions"), InRoot, []string{codex + "|"}},
		{home, All, nil},
		// Deeper in the project, as git finds its repository: the project.
		{filepath.Join(proj, "render", "pdf"), Project, []string{claude + "|", codex + "|" + filepath.Join("sessions", "2026", "11", "20", "rollout-1.jsonl"), crush + "|", pi + "|" + filepath.Join("sessions", "--"+nonAlnumSlash(proj[1:])+"--", "1.jsonl")}},
	} {
		s := Of(cands, tc.dir, open, &Cache{})
		if s.Kind != tc.kind {
			t.Errorf("%s: %s, want %s (%s)", tc.dir, s.Kind, tc.kind, s)
			continue
		}
		if tc.kind == All {
			if len(s.Roots) != len(cands) {
				t.Errorf("%s: %d roots, want every one (%d)", tc.dir, len(s.Roots), len(cands))
			}
			continue
		}
		slices.Sort(tc.want)
		if got := roots(s); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %s\ngot  %q\nwant %q", tc.dir, s, got, tc.want)
		}
	}
}

func nonAlnumSlash(p string) string { return strings.ReplaceAll(p, "/", "-") }

func TestName(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{"src/my-app", "src/web", ".config/agent"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	projects := t.TempDir()
	enc := func(p string) string {
		root := filepath.Join(projects, nonAlnum.ReplaceAllString(p, "-"))
		os.MkdirAll(root, 0o755)
		return root
	}
	cases := []struct{ root, want string }{
		{enc(filepath.Join(home, "src", "my-app")), "my-app"},
		{enc(filepath.Join(home, "src", "web")), "web"},
		{enc(filepath.Join(home, ".config", "agent")), "agent"},
		{"/x/-home-nobody-src-gone", "src-gone"},
		{"/home/a/.codex", "codex"},
	}
	if os.Geteuid() == 0 {
		// A root of nobody's named after a directory only root may see:
		// its raw name, as for one that does not exist (the label never
		// tells its owner what it cannot read).
		hidden := filepath.Join(home, "hidden")
		os.MkdirAll(filepath.Join(hidden, "merger-plans"), 0o755)
		os.Chmod(hidden, 0o700)
		os.Chmod(home, 0o755)
		for _, d := range []string{"merger-plans", "no-such-plans"} {
			root := enc(filepath.Join(hidden, d))
			os.Chown(root, 65534, 65534)
			cases = append(cases, struct{ root, want string }{root, strings.TrimPrefix(filepath.Base(root), "-")})
		}
	}
	var c Cache
	for _, tc := range cases {
		if got := Name(tc.root); got != tc.want {
			t.Errorf("Name(%s) = %q, want %q", tc.root, got, tc.want)
		}
		for range 2 { // found, then remembered
			if got := c.Name(tc.root); got != tc.want {
				t.Errorf("Cache.Name(%s) = %q, want %q", tc.root, got, tc.want)
			}
		}
	}
	// Remembered for nameFor: a directory made since is not looked up
	// again until then.
	late := enc(filepath.Join(home, "src", "late-app"))
	before := c.Name(late)
	if before == "late-app" {
		t.Fatalf("Cache.Name(%s) = %q before its directory was made", late, before)
	}
	os.MkdirAll(filepath.Join(home, "src", "late-app"), 0o755)
	if got := c.Name(late); got != before {
		t.Errorf("Cache.Name(%s) = %q at once, want %q (remembered)", late, got, before)
	}
	c.names[late] = named{c.names[late].name, time.Now().Add(-nameFor)}
	if got := c.Name(late); got != "late-app" {
		t.Errorf("Cache.Name(%s) after nameFor = %q, want late-app", late, got)
	}
}
