package answer

import (
	"os"
	"path/filepath"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// FleetRoots are the roots of the hosts' copies that caller reaches
// (host "": every host), for a search; done closes them.
func FleetRoots(stateDir string, caller *access.Caller, host string) (roots []recall.Root, done func()) {
	roots, done, _ = mirror.FleetRoots(stateDir, func(h string, uid int) bool {
		return (host == "" || h == host) && caller.ReachesHostRoot(h, uid)
	})
	return roots, done
}

// StateDisk is what a state directory holds: its databases with their
// write-ahead logs, and the recall index.
func StateDisk(dir string) control.Disk { return StateDiskWith(dir, IndexBytes(dir)) }

// StateDiskWith is StateDisk with the index's bytes given (IndexBytes
// lists the index, a file or two per log: a caller that knows it did not
// change keeps them).
func StateDiskWith(dir string, index int64) control.Disk {
	return control.Disk{Journal: fileBytes(filepath.Join(dir, state.FileName)), Spool: fileBytes(filepath.Join(dir, spool.FileName)),
		Index: index, Versions: fileBytes(filepath.Join(dir, versions.FileName))}
}

// IndexBytes is the size of the recall index of the state directory dir.
func IndexBytes(dir string) int64 { return dirBytes(filepath.Join(dir, recall.IndexDir)) }

// fileBytes is a file's size with its SQLite WAL, 0 when missing.
func fileBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// dirBytes sums the files of a directory (not recursive).
func dirBytes(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}
