package control

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
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
// $XDG_RUNTIME_DIR/memwatch/daemon.json, /run/memwatch/daemon.json as
// root, else a per-user file in the temporary directory.
func DiscoveryPath() string {
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return filepath.Join(x, "memwatch", "daemon.json")
	}
	if os.Geteuid() == 0 {
		return "/run/memwatch/daemon.json"
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("memwatch-%d", os.Geteuid()), "daemon.json")
}

// trusted reports whether the announcement's directory can be believed:
// /run and $XDG_RUNTIME_DIR are the user's own, but in the shared temporary
// directory another user could have made it first (and point clients at
// their own socket), so there it must be ours, a real directory, 0700.
func trusted(dir string) bool {
	if os.Getenv("XDG_RUNTIME_DIR") != "" || os.Geteuid() == 0 {
		return true
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// Discover reads the announcement of a daemon that is still running.
func Discover() (Discovery, bool) {
	if !trusted(filepath.Dir(DiscoveryPath())) {
		return Discovery{}, false
	}
	b, err := os.ReadFile(DiscoveryPath())
	if err != nil {
		return Discovery{}, false
	}
	var d Discovery
	if json.Unmarshal(b, &d) != nil || d.PID <= 0 || d.StateDir == "" {
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
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(path, n)); err == nil {
			add(n, fi)
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
