package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/memwatch/memwatch/control"
)

// announce writes the discovery file (0600 in a 0700 directory); it is
// removed at stop. A failure only costs discovery, so it is logged.
func (d *Daemon) announce() func() {
	path := control.DiscoveryPath()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil && p != "" {
			return a
		}
		return p
	}
	b, _ := json.Marshal(control.Discovery{PID: os.Getpid(), StateDir: abs(d.cfg.StateDir), Socket: abs(d.cfg.Socket), Policy: abs(d.cfg.PolicyPath)})
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil || !control.Trusted(filepath.Dir(path)) {
		d.log.Debug("announce the daemon: no private directory for it", "path", path, "err", err)
		return func() {}
	}
	// Another daemon that runs (the machine's service, as root) keeps its
	// announcement: this one is found by its state directory.
	if cur, ok := control.Discover(); ok && cur.PID != os.Getpid() && cur.StateDir != abs(d.cfg.StateDir) {
		d.log.Info("another memwatch daemon is announced here; clients find this one with --state-dir", "announcement", path, "pid", cur.PID, "its_state_dir", cur.StateDir, "state_dir", abs(d.cfg.StateDir))
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
		if cur, ok := control.Discover(); ok && cur.PID == os.Getpid() {
			os.Remove(path)
		}
	}
}
