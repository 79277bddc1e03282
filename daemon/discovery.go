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

// Discover reads the announcement of a daemon that is still running.
func Discover() (Discovery, bool) {
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
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		d.log.Debug("announce the daemon", "err", err)
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
