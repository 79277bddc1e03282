package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

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

// sayTwoDaemons warns when the system's service maintains roots this
// daemon (a user's) maintains too: two daemons would both rewrite the same
// memory files, each its own way. The service answers a user only about
// that user's roots.
func (d *Daemon) sayTwoDaemons(ctx context.Context) {
	if os.Geteuid() == 0 || d.cfg.Socket == control.SystemSocket {
		return
	}
	if fi, err := os.Stat(control.SystemSocket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := control.NewClient(control.SystemSocket).Status(ctx)
	if err != nil {
		return
	}
	mine, err := d.watch.Roots(ctx)
	if err != nil {
		return
	}
	both := sharedRoots(st, mine)
	if len(both) == 0 {
		return
	}
	d.log.Warn("the system's memwatch service maintains roots this daemon maintains too: both would rewrite the same memory files; stop this one (the service serves you: memwatch recall, memwatch mcp), or leave the roots out of one policy",
		"roots", len(both), "first", both[:min(len(both), 3)], "service_pid", st.PID)
}

// sharedRoots lists the roots of mine (by store) that another daemon's
// status names too, sorted.
func sharedRoots(theirs control.Status, mine map[string][]string) []string {
	named := map[string]bool{}
	for _, s := range theirs.Stores {
		for _, r := range s.Roots {
			named[filepath.Clean(r)] = true
		}
	}
	var both []string
	for _, roots := range mine {
		for _, r := range roots {
			if named[filepath.Clean(r)] {
				both = append(both, r)
			}
		}
	}
	sort.Strings(both)
	return both
}
