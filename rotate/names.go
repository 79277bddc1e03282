package rotate

import (
	"fmt"
	"path/filepath"
	"time"
)

// The names of archives and rotated files. Layouts ask for them here and
// never format one themselves, so every archive a layout makes has one of
// these shapes, sorted by time as names.

// StampFormat is the seeds' YYYY-MM-DD-HHmm, to the minute (a second
// archive of the same file within the minute is numbered by rewrite).
const StampFormat = "2006-01-02-1504"

// Stamped names an archive made at now in dir: dir/YYYY-MM-DD-HHmm.md, or
// dir/BASE-YYYY-MM-DD-HHmm.md when base is set (MEMORY, HISTORY).
func Stamped(dir, base string, now time.Time) string {
	name := now.Format(StampFormat) + ".md"
	if base != "" {
		name = base + "-" + name
	}
	return filepath.Join(dir, name)
}

// Beside names an archive of the file rel made at now under dir, keeping
// its path: dir/REL.YYYYMMDD-HHMMSS (to the second: facts change often).
func Beside(dir, rel string, now time.Time) string {
	return filepath.Join(dir, rel+"."+now.Format("20060102-150405"))
}

// Precise names an archive of a monthly file made at now, to the second:
// dir/BASE-YYYYMMDD-HHMMSS.md (episodes/archive/2026-03-20260401-120000.md).
func Precise(dir, base string, now time.Time) string {
	return filepath.Join(dir, base+"-"+now.Format("20060102-150405")+".md")
}

// Monthly names the monthly file of t: BASE-YYYY-MM.md (HISTORY-2026-02.md),
// in t's own zone, so an ISO timestamp ending in Z is filed by its UTC month.
func Monthly(base string, t time.Time) string {
	return base + "-" + t.Format("2006-01") + ".md"
}

// Weekly names the ISO-week file of t within a month's name space:
// dir/YYYY-MM-Www.md.
func Weekly(dir string, t time.Time) string {
	_, w := t.ISOWeek()
	return fmt.Sprintf("%s/%s-W%02d.md", dir, t.Format("2006-01"), w)
}
