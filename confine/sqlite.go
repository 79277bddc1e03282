package confine

import (
	"fmt"
	"path/filepath"
	"strings"
)

// RealPath is the path of rel in the root with every symbolic link
// resolved, as memwatch resolved them when it opened the root: the glob's
// fixed part as the administrator's links lead, then the names it walked
// (none a link). A driver that opens files by path and resolves links
// itself (SQLite does) must report having opened this path; any other
// means a directory on the way was swapped for a link meanwhile. The
// driver still opens as the caller's thread is (Do: as the owner), so the
// kernel refuses what the owner could not reach.
func (r *Root) RealPath(rel string) (string, error) {
	rel, err := clean(rel)
	if err != nil {
		return "", err
	}
	return filepath.Join(r.real, rel), nil
}

// SQLiteURI is the file: URI SQLite opens path with, followed by the
// query params (without its ?): the path escaped, so a ?, # or % in a
// directory's name is part of the name and never starts parameters of
// the agent's choosing (mode=rw, vfs=...).
func SQLiteURI(path, params string) string {
	var b strings.Builder
	b.WriteString("file:")
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '?', '#', '%':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	if params != "" {
		b.WriteByte('?')
		b.WriteString(params)
	}
	return b.String()
}
