package confine

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mustOpen(t *testing.T, dir string, o Options) *Root {
	t.Helper()
	r, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesSymlinkAndOutsideRoots(t *testing.T) {
	base := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(base, "ws", "real", "memory.md"), "x")
	os.Symlink(outside, filepath.Join(base, "ws", "evil"))
	os.MkdirAll(filepath.Join(base, "other", "x"), 0o755)
	tests := []struct {
		name   string
		path   string
		within []string
		want   error
	}{
		{"real directory", filepath.Join(base, "ws", "real"), []string{filepath.Join(base, "ws")}, nil},
		{"symlinked root", filepath.Join(base, "ws", "evil"), []string{filepath.Join(base, "ws")}, ErrSymlinkRoot},
		{"outside the glob's directory", filepath.Join(base, "other", "x"), []string{filepath.Join(base, "ws")}, ErrOutside},
		{"no check asked", filepath.Join(base, "other", "x"), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open(tt.path, Options{Within: tt.within})
			if r != nil {
				r.Close()
			}
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Open(%s) = %v, want %v", tt.path, err, tt.want)
			}
		})
	}
}

func TestNamesStayInside(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "hunter2")
	write(t, filepath.Join(dir, "facts", "user.md"), "name")
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-link.md"))
	os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "rel-link.md"))
	os.Symlink(outside, filepath.Join(dir, "dirlink"))
	os.Symlink("facts/user.md", filepath.Join(dir, "inside.md"))
	r := mustOpen(t, dir, Options{})
	tests := []struct {
		name string
		want error
	}{
		{"facts/user.md", nil},
		{"inside.md", nil},
		{"../x", ErrOutside},
		{"/etc/passwd", ErrOutside},
		{"abs-link.md", ErrOutside},
		{"rel-link.md", ErrOutside},
		{"dirlink/secret", ErrOutside},
		{"facts/../../x", ErrOutside},
	}
	for _, tt := range tests {
		_, err := r.ReadFile(tt.name)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("ReadFile(%q) = %v, want %v", tt.name, err, tt.want)
		}
		// A View of the name's directory answers the same.
		v, err := r.View(filepath.Dir(tt.name))
		if err != nil {
			if tt.want == nil || !errors.Is(err, tt.want) {
				t.Errorf("View(%q) = %v", filepath.Dir(tt.name), err)
			}
			continue
		}
		f, _, err := v.OpenRead(filepath.Base(tt.name))
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("View(%q).OpenRead(%q) = %v, want %v", filepath.Dir(tt.name), filepath.Base(tt.name), err, tt.want)
		}
		if f != nil {
			f.Close()
		}
		fi, err := v.Stat(filepath.Base(tt.name))
		if tt.want == nil && (err != nil || !fi.Mode().IsRegular()) || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("View(%q).Stat(%q) = %v, %v, want %v", filepath.Dir(tt.name), filepath.Base(tt.name), fi, err, tt.want)
		}
		v.Close()
	}
	if got, err := r.Resolve("inside.md"); err != nil || got != "facts/user.md" {
		t.Errorf("Resolve(inside.md) = %q, %v", got, err)
	}
	if _, err := r.Resolve("abs-link.md"); !errors.Is(err, ErrOutside) {
		t.Errorf("Resolve(abs-link.md) = %v, want ErrOutside", err)
	}
	ms, err := r.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	// Glob lists names; reading them is what refuses.
	if strings.Join(ms, ",") != "abs-link.md,inside.md,rel-link.md" {
		t.Errorf("Glob = %v", ms)
	}
}

func TestFIFOAndSizeLimit(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "big.md"), strings.Repeat("x", 2000))
	r := mustOpen(t, dir, Options{MaxFileSize: 1000})
	done := make(chan error, 1)
	go func() { _, err := r.ReadFile("fifo.md"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if _, err := r.ReadFile("big.md"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("big file: %v, want ErrTooLarge", err)
	}
}

func TestDirOperationsNeverReplace(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a"), "A")
	write(t, filepath.Join(dir, "b"), "B")
	r := mustOpen(t, dir, Options{})
	d, err := r.Dir(".")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Exchange("a", "b"); err != nil && !errors.Is(err, ErrExchangeUnsupported) {
		t.Fatal(err)
	} else if err == nil {
		if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "B" {
			t.Errorf("after exchange a = %q", b)
		}
		d.Exchange("a", "b")
	}
	if err := d.Link("a", d, "b"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Link over an existing name: %v, want ErrExist", err)
	}
	if err := d.Move("a", d, "b"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Move over an existing name: %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "b")); string(b) != "B" {
		t.Errorf("b = %q, want B", b)
	}
	for _, bad := range []string{"../x", "x/y", "", ".."} {
		if _, err := d.Open(bad, os.O_RDONLY); !errors.Is(err, ErrOutside) {
			t.Errorf("Open(%q) = %v, want ErrOutside", bad, err)
		}
	}
	os.Symlink("a", filepath.Join(dir, "l"))
	if _, err := d.Open("l", os.O_RDONLY); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Dir.Open of a symlink = %v, want ErrNotRegular (never followed)", err)
	}
}

func TestHeldForWriting(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "x")
	ro, _ := os.Open(p)
	defer ro.Close()
	root, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if held, ok := root.HeldForWriting(ro); !ok {
		t.Skip("no file leases here")
	} else if held {
		t.Fatal("held with no writer")
	}
	// A writer in another process holds it open.
	cmd := exec.Command("sh", "-c", "exec 3>>"+p+"; sleep 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if held, _ := root.HeldForWriting(ro); held {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("a process holding the file open for writing was not seen")
}

// TestOwnershipAsRoot: as root, what memwatch creates in a root belongs to
// the root's owner, and files the owner may not read are refused.
func TestOwnershipAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create files of other users")
	}
	const uid, gid = 4242, 4242
	dir := filepath.Join(sharedTempDir(t), "root")
	os.Mkdir(dir, 0o750)
	os.Chmod(dir, 0o750)
	os.Chown(dir, uid, gid)
	write(t, filepath.Join(dir, "mine.md"), "ok")
	os.Chown(filepath.Join(dir, "mine.md"), uid, gid)
	write(t, filepath.Join(dir, "rootonly.md"), "secret")
	os.Chmod(filepath.Join(dir, "rootonly.md"), 0o600)
	r := mustOpen(t, dir, Options{})
	if r.Owner().UID != uid {
		t.Fatalf("owner = %d, want %d", r.Owner().UID, uid)
	}
	if _, err := r.ReadFile("mine.md"); err != nil {
		t.Errorf("owner's file: %v", err)
	}
	if _, err := r.ReadFile("rootonly.md"); !errors.Is(err, ErrDenied) {
		t.Errorf("root-only file: %v, want ErrDenied", err)
	}
	d, err := r.MkdirAll("memory/run")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, p := range []string{"memory", "memory/run"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o750 {
			t.Errorf("%s: %d:%d %v, want %d:%d 0750", p, st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
		}
	}
}

// sharedTempDir is a temporary directory every user may search (t.TempDir
// is root's alone when the tests run as root, and the kernel then keeps an
// unprivileged owner out of its own root).
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "confine-shared")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestTheKernelDecidesAsTheOwner: as root, memwatch reaches in a root only
// what its owner could: not a file in a root-only directory inside the
// root, not a file of its own in a directory it cannot search, not a root
// outside its reach; and what it creates is the owner's.
func TestTheKernelDecidesAsTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it checks that memwatch, as root, acts with the root owner's rights")
	}
	const uid = 4243
	base := sharedTempDir(t)
	dir := filepath.Join(base, "agent")
	os.MkdirAll(filepath.Join(dir, "notes"), 0o755)
	write(t, filepath.Join(dir, "notes", "a.md"), "mine")
	// A root-only directory inside the agent's tree, world-readable files
	// inside: the mode checks of the files alone would let them through.
	os.MkdirAll(filepath.Join(dir, "locked"), 0o755)
	write(t, filepath.Join(dir, "locked", "facts.md"), "ROOT FACTS")
	for _, p := range []string{dir, filepath.Join(dir, "notes"), filepath.Join(dir, "notes", "a.md")} {
		os.Chown(p, uid, uid)
	}
	os.Chmod(filepath.Join(dir, "locked"), 0o700) // root's, 0700
	r := mustOpen(t, dir, Options{})
	if _, err := r.ReadFile("notes/a.md"); err != nil {
		t.Errorf("the owner's own file: %v", err)
	}
	if b, err := r.ReadFile("locked/facts.md"); !errors.Is(err, ErrDenied) {
		t.Errorf("a file in a root-only directory: %q, %v; want ErrDenied", b, err)
	}
	if _, err := r.ReadDir("locked"); !errors.Is(err, ErrDenied) {
		t.Errorf("listing a root-only directory: %v; want ErrDenied", err)
	}
	if _, err := r.Stat("locked/facts.md"); !errors.Is(err, ErrDenied) {
		t.Errorf("stat through a root-only directory: %v; want ErrDenied", err)
	}
	if _, err := r.MkdirAll("locked/sub"); err == nil {
		t.Errorf("created a directory inside a root-only directory")
	}
	if ms, _ := r.Glob("*/*.md"); len(ms) != 1 || ms[0] != "notes/a.md" {
		t.Errorf("Glob = %v, want only notes/a.md", ms)
	}
	d, err := r.Dir(".")
	if err != nil {
		t.Fatal(err)
	}
	f, name, err := d.CreateTemp("x", "t")
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()
	d.Unlink(name)
	d.Close()
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
		t.Errorf("a file memwatch created belongs to uid %d, want the owner %d", st.Uid, uid)
	}
	// A root the owner cannot reach (its parent is root's, 0700) is refused.
	hidden := filepath.Join(base, "hidden")
	os.MkdirAll(filepath.Join(hidden, "agent2"), 0o755)
	os.Chown(filepath.Join(hidden, "agent2"), uid, uid)
	os.Chmod(hidden, 0o700)
	if _, err := Open(filepath.Join(hidden, "agent2"), Options{}); !errors.Is(err, ErrDenied) {
		t.Errorf("a root its owner cannot reach: %v; want ErrDenied", err)
	}
	// So it is in a batch of opens that walked the trusted part before.
	pre := new(Prefixes)
	os.MkdirAll(filepath.Join(hidden, "agent3"), 0o755)
	os.Chown(filepath.Join(hidden, "agent3"), 0, 0)
	if _, err := Open(filepath.Join(hidden, "agent3"), Options{Prefixes: pre}); err != nil {
		t.Errorf("root's own root beside it: %v", err)
	}
	if _, err := Open(filepath.Join(hidden, "agent2"), Options{Prefixes: pre}); !errors.Is(err, ErrDenied) {
		t.Errorf("a root its owner cannot reach, in a batch: %v; want ErrDenied", err)
	}
	// The thread memwatch acted on is root again: root-only files read.
	if b, err := os.ReadFile(filepath.Join(dir, "locked", "facts.md")); err != nil || string(b) != "ROOT FACTS" {
		t.Errorf("after acting as the owner, memwatch itself: %q, %v", b, err)
	}
}

func TestAlternatives(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		want    []string
	}{
		{"sessions/*.jsonl", []string{"sessions/*.jsonl"}},
		{"{workspace/sessions,sessions}/*.jsonl", []string{"workspace/sessions/*.jsonl", "sessions/*.jsonl"}},
		{"{a,b}/{c,d}", []string{"a/c", "a/d", "b/c", "b/d"}},
		{"{unclosed", []string{"{unclosed"}},
	} {
		if got := Alternatives(tt.pattern); !slices.Equal(got, tt.want) {
			t.Errorf("Alternatives(%q): got %q, want %q", tt.pattern, got, tt.want)
		}
	}
	for _, tt := range []struct {
		pattern, exclude, rel string
		want                  bool
	}{
		{"agents/*/sessions/*.jsonl", "*.trajectory.jsonl", "agents/main/sessions/7d2e.jsonl", true},
		{"agents/*/sessions/*.jsonl", "*.trajectory.jsonl", "agents/main/sessions/7d2e.trajectory.jsonl", false},
		{"{workspace/sessions,sessions}/*.jsonl", "{ZHJlYW06*,Y3Jvbj[o-r]*}", "workspace/sessions/ZHJlYW06MjAy.jsonl", false},
		{"{workspace/sessions,sessions}/*.jsonl", "{ZHJlYW06*,Y3Jvbj[o-r]*}", "sessions/Y3Jvbjp4.jsonl", false},
		{"{workspace/sessions,sessions}/*.jsonl", "{ZHJlYW06*,Y3Jvbj[o-r]*}", "sessions/dGVsZWdyYW06NDI.jsonl", true},
	} {
		if got := Match(tt.pattern, tt.exclude, tt.rel); got != tt.want {
			t.Errorf("Match(%q, %q, %q): got %v, want %v", tt.pattern, tt.exclude, tt.rel, got, tt.want)
		}
	}
}

// TestCheckGlobNegation: a shell's [!...] is refused with the fix, where
// it would have matched what it meant to leave out; [^...] and a ! that
// does not open a class are globs.
func TestCheckGlobNegation(t *testing.T) {
	for _, p := range []string{"sessions/*[!y].jsonl", "{a,b[!c]}/*"} {
		if err := CheckGlob(p); err == nil || !strings.Contains(err.Error(), "[^...]") {
			t.Errorf("CheckGlob(%q) = %v, want an error saying [^...]", p, err)
		}
	}
	for _, p := range []string{"sessions/*[^y].jsonl", "notes!/*.md", "[a!]*"} {
		if err := CheckGlob(p); err != nil {
			t.Errorf("CheckGlob(%q) = %v, want nil", p, err)
		}
	}
}

func FuzzAlternatives(f *testing.F) {
	for _, s := range []string{"a", "{a,b}/c", "{", "}{", "{a,{b,c}}", "[{]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) > 64 {
			return
		}
		for _, alt := range Alternatives(p) {
			if len(alt) > len(p)*len(p)+1 {
				t.Fatalf("Alternatives(%q) grew to %q", p, alt)
			}
		}
		_ = Match(p, p, "a/b")
	})
}

// TestPrefixesShareOnlyTheTrustedPart: a batch of opens finds the roots
// opens one by one find, before and after a directory of the trusted
// part is replaced by a link (which only root or memwatch's own user can
// do; TestTheKernelDecidesAsTheOwner has a batch refused what the owner
// cannot reach).
func TestPrefixesShareOnlyTheTrustedPart(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	for _, d := range []string{"projects/a", "projects/b", "elsewhere/c"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	pre := new(Prefixes)
	for _, name := range []string{"a", "b"} {
		p := filepath.Join(home, "projects", name)
		alone := mustOpen(t, p, Options{})
		batch := mustOpen(t, p, Options{Prefixes: pre})
		if got, want := batch.ID(), alone.ID(); got != want {
			t.Errorf("%s in a batch: %+v, alone %+v", name, got, want)
		}
	}
	// The directory above them was opened once for the batch.
	if n := len(pre.bases); n != 1 {
		t.Errorf("the batch opened %d base directories for two roots beside each other, want 1", n)
	}
	// Swapped for a link after the batch walked it.
	if err := os.Rename(filepath.Join(home, "projects"), filepath.Join(home, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, "elsewhere"), filepath.Join(home, "projects")); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(home, "projects", "c"), Options{Prefixes: pre})
	_, alone := Open(filepath.Join(home, "projects", "c"), Options{})
	if (err == nil) != (alone == nil) {
		t.Errorf("through a link, in a batch: %v; alone: %v", err, alone)
	}
	// Closed, the batch keeps nothing; the roots it opened are their own.
	pre.Close()
	if len(pre.bases) != 0 || len(pre.old) != 0 {
		t.Errorf("a closed batch keeps %d base directories and %d replaced", len(pre.bases), len(pre.old))
	}
	r := mustOpen(t, filepath.Join(home, "projects", "c"), Options{Prefixes: pre})
	if _, err := r.Stat("."); err != nil {
		t.Errorf("a root opened in a closed batch: %v", err)
	}
}
