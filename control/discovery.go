package control

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Trusted reports whether the announcement's directory can be believed
// (see trusted).
func Trusted(dir string) bool { return trusted(dir) }

// Discovery is what a running daemon announces, so the client commands
// (status, log, undo, trigger, recall, ...) find it when it was started
// with a --state-dir or policy they were not given.
type Discovery struct {
	PID      int    `json:"pid"`
	StateDir string `json:"state_dir"`
	Socket   string `json:"socket"`
	Policy   string `json:"policy"`
}

// DiscoveryPath is where the daemon of this user announces itself:
// $XDG_RUNTIME_DIR/memwatch/daemon.json, else /run/memwatch/daemon.json as
// root, else a per-user file in the temporary directory. Root takes its
// $XDG_RUNTIME_DIR only when only root can change it (CheckOwned): root's
// environment may be a user's (su without -, sudo -E), whose runtime
// directory is hers; root then looks in /run/memwatch alone.
func DiscoveryPath() string {
	x := os.Getenv("XDG_RUNTIME_DIR")
	if os.Geteuid() == 0 && (x == "" || CheckOwned(x) != nil) {
		return "/run/memwatch/daemon.json"
	}
	if x != "" {
		return filepath.Join(x, "memwatch", "daemon.json")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("memwatch-%d", os.Geteuid()), "daemon.json")
}

// trusted reports whether the announcement's directory can be believed:
// a real directory that belongs to this user or root and that no one else
// may write (CheckOwned); in the shared temporary directory, where another
// user could have made it first, it must be this user's and 0700.
func trusted(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || CheckOwned(dir) != nil {
		return false
	}
	if os.Geteuid() == 0 || os.Getenv("XDG_RUNTIME_DIR") != "" {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid() && fi.Mode().Perm()&0o077 == 0
}

// Discover reads the announcement of a daemon that is still running, when
// it and the state directory it names can be believed (trusted,
// CheckOwned).
func Discover() (Discovery, bool) {
	path := DiscoveryPath()
	if !trusted(filepath.Dir(path)) {
		return Discovery{}, false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Discovery{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 64<<10 || ownedBy(path, fi, os.Geteuid(), true) != nil {
		return Discovery{}, false
	}
	b := make([]byte, fi.Size())
	n, _ := io.ReadFull(f, b)
	var d Discovery
	if json.Unmarshal(b[:n], &d) != nil || d.PID <= 0 || d.StateDir == "" || CheckOwned(d.StateDir) != nil {
		return Discovery{}, false
	}
	if err := syscall.Kill(d.PID, 0); err != nil && err != syscall.EPERM {
		return Discovery{}, false // it died without removing the file
	}
	return d, true
}

// PolicyHeader names the policy a daemon runs on every answer it gives,
// so a client talks to the daemon of its own policy, never to another.
const PolicyHeader = "Memwatch-Policy"

// PolicyID is how a policy path is compared: absolute, with its links
// resolved when it exists.
func PolicyID(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		p = a
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return filepath.Clean(p)
}

// PolicyStampHeader gives, on every answer, the stamp of the policy files
// as the daemon last loaded them (PolicyStamp): a client whose files
// differ (edited since, perhaps broken) lets memwatchd load them and say
// what is wrong before it asks.
const PolicyStampHeader = "Memwatch-Policy-Stamp"

// PolicyStamp identifies the policy files at path as they are now: each
// file's name, inode, size and modification time (for a directory, of
// its *.yaml and *.yml files), hashed. Any edit, rename or new file
// changes it; "" when there is nothing there.
func PolicyStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	h := fnv.New64a()
	add := func(name string, fi os.FileInfo) {
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = uint64(st.Ino)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\n", name, ino, fi.Size(), fi.ModTime().UnixNano())
	}
	if !fi.IsDir() {
		add(filepath.Base(path), fi) // however the path was spelled
		return fmt.Sprintf("%016x", h.Sum64())
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return ""
	}
	for _, e := range ents { // in name order
		if !IsPolicyFile(e) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(path, e.Name())); err == nil {
			add(e.Name(), fi)
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// IsPolicyFile says whether an entry of a policy directory is one of its
// files: *.yaml and *.yml, not hidden, not a directory. The loader
// (policy.Load) and the stamp read the same set.
func IsPolicyFile(e os.DirEntry) bool {
	n := e.Name()
	return !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml"))
}
