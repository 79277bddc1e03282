package control

import (
	"io/fs"
	"time"
)

// Writers of a version.
const (
	ByAgent    = "agent"
	ByMemwatch = "memwatch"
)

// Version is one version of a memory file (GET /v1/versions?path=FILE
// answers them, oldest first).
type Version struct {
	Root    string    `json:"root"`
	Path    string    `json:"path"`
	N       int64     `json:"n"`
	Time    time.Time `json:"time"`
	SHA     string    `json:"sha,omitempty"`
	Size    int64     `json:"size"` // -1: the file was deleted
	Lines   int64     `json:"lines"`
	Added   int64     `json:"added"`
	Removed int64     `json:"removed"`
	Writer  string    `json:"writer"`
	Record  int64     `json:"record,omitempty"`
	// Mode is the file's permission bits when it was captured (0: not
	// recorded, a version older than this field); a restore gives the
	// file back this mode.
	Mode fs.FileMode `json:"mode,omitempty"`
}

// Deleted reports whether the version is a deletion.
func (v Version) Deleted() bool { return v.Size < 0 }
