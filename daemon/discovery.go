package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

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

// announce writes the discovery file (0600 in a 0700 directory); it is
// removed at stop. A failure only costs discovery, so it is logged.
func (d *Daemon) announce() func() {
	path := DiscoveryPath()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil && p != "" {
			return a
		}
		return p
	}
	b, _ := json.Marshal(Discovery{PID: os.Getpid(), StateDir: abs(d.cfg.StateDir), Socket: abs(d.cfg.Socket), Policy: abs(d.cfg.PolicyPath)})
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil || !trusted(filepath.Dir(path)) {
		d.log.Debug("announce the daemon: no private directory for it", "path", path, "err", err)
		return func() {}
	}
	tmp := path + fmt.Sprintf(".%d", os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil || os.Rename(tmp, path) != nil {
		os.Remove(tmp)
		d.log.Debug("announce the daemon", "path", path)
		return func() {}
	}
	return func() {
		// Only our own announcement: another daemon may have replaced it.
		if cur, ok := Discover(); ok && cur.PID == os.Getpid() {
			os.Remove(path)
		}
	}
}
