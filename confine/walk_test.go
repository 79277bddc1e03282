package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpenRefusesASymlinkedParent: a root whose parent (below the glob's
// fixed part) is a symbolic link is refused, wherever the link leads; the
// same path reached through real directories opens, and its ID is the
// directory opened.
func TestOpenRefusesASymlinkedParent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: below a directory of another user's, memwatch follows no link (in its own user's, it follows them: that user is the only agent)")
	}
	base := sharedTempDir(t)
	home := filepath.Join(base, "home")
	write(t, filepath.Join(home, "alice", "proj.real", "p1", "memory.md"), "alice")
	write(t, filepath.Join(home, "bob", "proj", "p1", "memory.md"), "bob")
	chownTree(t, filepath.Join(home, "alice"), 4246)
	chownTree(t, filepath.Join(home, "bob"), 4247)
	if err := os.Symlink(filepath.Join(home, "bob", "proj"), filepath.Join(home, "alice", "proj")); err != nil {
		t.Fatal(err)
	}
	os.Lchown(filepath.Join(home, "alice", "proj"), 4246, 4246)
	within := []string{home}
	p := filepath.Join(home, "alice", "proj", "p1")
	if r, err := Open(p, Options{Within: within}); !errors.Is(err, ErrSymlinkParent) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("Open through a symlinked parent: %v, want ErrSymlinkParent", err)
	}
	if _, err := Stat(p, within); !errors.Is(err, ErrSymlinkParent) {
		t.Errorf("Stat through a symlinked parent: %v, want ErrSymlinkParent", err)
	}
	// alice puts back a real directory: it opens, as itself.
	os.Remove(filepath.Join(home, "alice", "proj"))
	os.Rename(filepath.Join(home, "alice", "proj.real"), filepath.Join(home, "alice", "proj"))
	r := mustOpen(t, p, Options{Within: within})
	if b, err := r.ReadFile("memory.md"); err != nil || string(b) != "alice" {
		t.Errorf("alice's memory.md: %q, %v", b, err)
	}
	id := r.ID()
	if want, _ := Stat(p, within); id != want || id.Path != p || id.Ino == 0 {
		t.Errorf("ID %+v, Stat %+v", id, want)
	}
	// A link only root may change (the administrator's) is followed.
	os.Symlink(home, filepath.Join(base, "h"))
	if r, err := Open(filepath.Join(base, "h", "alice", "proj", "p1"), Options{Within: []string{filepath.Join(base, "h")}}); err != nil {
		t.Errorf("a link in the glob's fixed part: %v", err)
	} else {
		r.Close()
	}
}

// TestGlobRootsRefusesLinks: discovery finds the real directories a glob
// matches and refuses a link at the root's level or above it, never
// listing what the link leads to.
func TestGlobRootsRefusesLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the users' directories must be other users'")
	}
	base := sharedTempDir(t)
	for _, d := range []string{"alice/proj/p1", "alice/proj/p2", "bob/proj/p1", "carol/real/p1"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	os.Symlink(filepath.Join(base, "carol", "real"), filepath.Join(base, "carol", "proj")) // a parent
	os.Symlink(filepath.Join(base, "bob", "proj", "p1"), filepath.Join(base, "alice", "proj", "p3"))
	write(t, filepath.Join(base, "alice", "proj", "file"), "not a directory")
	for i, u := range []string{"alice", "bob", "carol"} {
		chownTree(t, filepath.Join(base, u), 4248+i)
	}
	found, refused := GlobRoots(filepath.Join(base, "*", "proj", "*"), false)
	var got []string
	for _, id := range found {
		got = append(got, id.Path)
		if st, err := Stat(id.Path, []string{base}); err != nil || !st.SameDir(id) {
			t.Errorf("%s: discovery's ID %+v, Stat %+v %v", id.Path, id, st, err)
		}
	}
	want := []string{filepath.Join(base, "alice/proj/p1"), filepath.Join(base, "alice/proj/p2"), filepath.Join(base, "bob/proj/p1")}
	if len(got) != len(want) {
		t.Fatalf("found %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("found %q, want %q", got, want)
		}
	}
	reasons := map[string]error{}
	for _, r := range refused {
		reasons[r.Path] = r.Err
	}
	if !errors.Is(reasons[filepath.Join(base, "carol", "proj")], ErrSymlinkParent) {
		t.Errorf("carol's linked proj: %v, want ErrSymlinkParent", reasons)
	}
	if !errors.Is(reasons[filepath.Join(base, "alice", "proj", "p3")], ErrSymlinkRoot) {
		t.Errorf("alice's linked p3: %v, want ErrSymlinkRoot", reasons)
	}
	// A file root's ID is its directory's, with the file's owner.
	write(t, filepath.Join(base, "alice", "app.db"), "x")
	files, _ := GlobRoots(filepath.Join(base, "*", "app.db"), true)
	dir, _ := Stat(filepath.Join(base, "alice"), []string{base})
	if len(files) != 1 || !files[0].SameDir(dir) {
		t.Errorf("file roots: %+v, want the directory %+v", files, dir)
	}
}

func TestKeys(t *testing.T) {
	id := ID{Path: "/home/a/p", Dev: 2049, Ino: 77, UID: 1001}
	if got, ok := ParseKey(id.Key()); !ok || got != id {
		t.Errorf("ParseKey(Key) = %+v %v, want %+v", got, ok, id)
	}
	if got, ok := ParseKey("/home/a/p"); !ok || got.Path != "/home/a/p" || got.Ino != 0 {
		t.Errorf("a bare path: %+v %v", got, ok)
	}
	if got, ok := ParseKey(id.Unbound()); !ok || got.UID != 1001 || got.Dev != 0 || got.Path != id.Path {
		t.Errorf("unbound: %+v %v", got, ok)
	}
	if _, ok := ParseKey("/p\x00x:y"); ok {
		t.Error("a malformed key parsed")
	}
	if got, _ := ParseKey(id.Key()); got.Path != id.Path {
		t.Errorf("ParseKey(%q).Path = %q, want %q", id.Key(), got.Path, id.Path)
	}
}

func TestSQLiteURI(t *testing.T) {
	for _, tt := range []struct{ path, params, want string }{
		{"/r/q?x=/a.db", "mode=ro", "file:/r/q%3Fx=/a.db?mode=ro"},
		{"/r/50%/#1/a.db", "", "file:/r/50%25/%231/a.db"},
	} {
		if got := SQLiteURI(tt.path, tt.params); got != tt.want {
			t.Errorf("SQLiteURI(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

// chownTree gives dir and everything below it (links too) to uid.
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, uid, uid)
		}
		return nil
	})
}

// TestTrustedPrefix: links are followed only where nobody but root (and
// memwatch's own user) can change them; an agent's directories are walked
// name by name, even in the part of a glob the administrator wrote.
func TestTrustedPrefix(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent's directory must be another user's")
	}
	base := sharedTempDir(t)
	os.MkdirAll(filepath.Join(base, "data", "alice", "ws"), 0o755)
	os.Symlink(filepath.Join(base, "data"), filepath.Join(base, "home")) // root's link: followed
	chownTree(t, filepath.Join(base, "data", "alice"), 4251)
	b, rest, err := trustedPrefix(filepath.Join(base, "home", "alice", "ws"))
	if err != nil || b != filepath.Join(base, "data", "alice") || len(rest) != 1 || rest[0] != "ws" {
		t.Errorf("trustedPrefix = %q %q %v, want %s and [ws]", b, rest, err, filepath.Join(base, "data", "alice"))
	}
	// A sticky directory: others' entries are not trusted, root's are.
	sticky := filepath.Join(base, "tmp")
	os.Mkdir(sticky, 0o777)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	os.Mkdir(filepath.Join(sticky, "rootdir"), 0o755)
	os.Mkdir(filepath.Join(sticky, "theirs"), 0o755)
	os.Chown(filepath.Join(sticky, "theirs"), 4251, 4251)
	if b, rest, _ := trustedPrefix(filepath.Join(sticky, "rootdir")); b != filepath.Join(sticky, "rootdir") || len(rest) != 0 {
		t.Errorf("root's directory in a sticky one: %q %q", b, rest)
	}
	if b, rest, _ := trustedPrefix(filepath.Join(sticky, "theirs")); b != sticky || len(rest) != 1 {
		t.Errorf("another user's directory in a sticky one: %q %q", b, rest)
	}
}

// An agent's own file is read by type: a regular file, reached without a
// link, never a FIFO or a device, up to a bound.
func TestReadAgentFile(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "b", "ok.json"), []byte(`{}`), 0o644)
	os.WriteFile(filepath.Join(dir, "a", "b", "big.json"), make([]byte, 2048), 0o644)
	syscall.Mkfifo(filepath.Join(dir, "a", "b", "fifo.json"), 0o644)
	os.Symlink("/dev/zero", filepath.Join(dir, "a", "b", "zero.json"))
	os.Symlink("ok.json", filepath.Join(dir, "a", "b", "inside.json"))
	os.Symlink("a", filepath.Join(dir, "link"))
	for _, tc := range []struct {
		rel string
		ok  bool
	}{
		{"a/b/ok.json", true},
		{"a/b/big.json", false},
		{"a/b/fifo.json", false},
		{"a/b/zero.json", false},
		{"a/b/inside.json", false},
		{"link/b/ok.json", false},
		{"a/b/none.json", false},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadAgentFile(dir, tc.rel, 1024); done <- err }()
		select {
		case err := <-done:
			if (err == nil) != tc.ok {
				t.Errorf("ReadAgentFile(%s) = %v, want ok %v", tc.rel, err, tc.ok)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadAgentFile(%s) hangs", tc.rel)
		}
	}
}
