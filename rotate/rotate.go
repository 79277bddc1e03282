// Package rotate owns archives and rotated files: their names (names.go:
// layouts ask for them, never format one), and the disk memwatch holds —
// the archives of what it removed from hot files, kept logrotate-like per
// store (archive_keep, archive_max_age, archive_max_bytes, compress_after),
// and the journal itself (journal.go: journal_max_age, journal_max_bytes).
//
// Every archive memwatch makes is named by a journal record (its Archive),
// so the journal is the list of archives: rotate never guesses from file
// names, and never touches a file an agent wrote. For each archived file
// the newest archive is never removed (it is what an undo of the latest
// change needs); the others go when they are over the count, the age or
// the root's byte budget, oldest first. Compression writes ARCHIVE.gz
// (gzip: the agent reads it with zcat) beside it, with its owner and mode,
// and removes the original only once the .gz is durable. Every removal and
// compression is journaled (name, size, hash) as archive-prune and
// archive-compress, so an undo whose pre-image was pruned says so, and one
// whose archive was compressed reads the .gz.
package rotate

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// Journal rules of retention.
const (
	RulePrune    = "archive-prune"
	RuleCompress = "archive-compress"
)

// Retention is a store's archive policy; zero values keep everything.
type Retention struct {
	Keep          int           // archives per file, beyond the newest (0: no count limit)
	MaxAge        time.Duration // archives older than this go (0: none)
	MaxBytes      int64         // archive bytes per root (0: no limit)
	CompressAfter time.Duration // compress archives older than this (0: never)
}

// Active reports whether the retention can remove or compress anything.
func (r Retention) Active() bool {
	return r.Keep > 0 || r.MaxAge > 0 || r.MaxBytes > 0 || r.CompressAfter > 0
}

// Archive is one archive of a root, as the journal knows it.
type Archive struct {
	Path       string    // root-relative, as it is now (ARCHIVE.gz once compressed)
	Original   string    // the name the journal record gave it
	Target     string    // the file it preserves
	Record     int64     // the journal record that made it
	Time       time.Time // when it was made
	Size       int64     // bytes on disk
	Compressed bool
	// SHA is the hash of what memwatch wrote there: retention removes or
	// compresses only that, never a file someone changed since.
	SHA string
	// Kept marks a copy memwatch kept instead of deleting it (rewrite's
	// RuleKept: an agent's version met during a rewrite, a leftover after
	// a kill); Reason says why.
	Kept   bool
	Reason string
}

// Archives lists the archives of root that still exist, newest first.
func Archives(ctx context.Context, db *state.DB, root *confine.Root) ([]Archive, error) {
	recs, err := db.ArchiveRecords(ctx, root.Path(), RuleCompress, RulePrune)
	if err != nil {
		return nil, err
	}
	var out []Archive
	seen := map[string]bool{}
	for _, r := range recs { // newest first
		if seen[r.Archive] {
			continue
		}
		seen[r.Archive] = true
		a := Archive{Path: r.Archive, Original: r.Archive, Target: r.Target, Record: r.ID, Time: r.Time, SHA: r.BeforeSHA,
			Kept: r.Rule == rewrite.RuleKept, Reason: r.Reason}
		if r.CompressedTo != "" {
			a.Path, a.Compressed, a.SHA = r.CompressedTo, true, r.CompressedSHA
		}
		fi, err := root.Lstat(a.Path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // gone (removed by hand, or pruned before the journal said so)
		}
		a.Size = fi.Size()
		out = append(out, a)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	return out, nil
}

// Action is what retention does to one archive.
type Action struct {
	Archive Archive
	Op      string // RulePrune or RuleCompress
	Reason  string
	// At is when Plan decided it: the time its journal record carries.
	At time.Time `json:"-"`
}

// Plan decides what retention does now. It never removes the newest
// archive of a file.
func Plan(archives []Archive, r Retention, now time.Time) []Action {
	var out []Action
	byTarget := map[string]int{} // archives seen so far per target, newest first
	removed := map[string]bool{}
	var kept []Archive // candidates for the byte budget, in order newest first
	for _, a := range archives {
		n := byTarget[a.Target]
		byTarget[a.Target]++
		if n == 0 {
			kept = append(kept, a) // the newest: never removed
			continue
		}
		switch {
		case r.Keep > 0 && n > r.Keep:
			out = append(out, Action{a, RulePrune, fmt.Sprintf("archive_keep %d: %d newer archives of %s", r.Keep, n, a.Target), now})
			removed[a.Path] = true
		case r.MaxAge > 0 && now.Sub(a.Time) > r.MaxAge:
			out = append(out, Action{a, RulePrune, fmt.Sprintf("archive_max_age %s: made %s", r.MaxAge, a.Time.Format(time.DateTime)), now})
			removed[a.Path] = true
		default:
			kept = append(kept, a)
		}
	}
	if r.MaxBytes > 0 {
		var total int64
		for _, a := range kept {
			total += a.Size
		}
		// Oldest first, never the newest of a file.
		newest := map[string]string{}
		for _, a := range archives {
			if _, ok := newest[a.Target]; !ok {
				newest[a.Target] = a.Path
			}
		}
		for i := len(kept) - 1; i >= 0 && total > r.MaxBytes; i-- {
			a := kept[i]
			if newest[a.Target] == a.Path {
				continue
			}
			out = append(out, Action{a, RulePrune, fmt.Sprintf("archive_max_bytes %d: archives of this root hold %d bytes", r.MaxBytes, total), now})
			removed[a.Path] = true
			total -= a.Size
		}
	}
	if r.CompressAfter > 0 {
		for _, a := range archives {
			if !removed[a.Path] && !a.Compressed && now.Sub(a.Time) > r.CompressAfter {
				out = append(out, Action{a, RuleCompress, fmt.Sprintf("compress_after %s", r.CompressAfter), now})
			}
		}
	}
	return out
}

// Result sums what Apply did.
type Result struct {
	Removed, Compressed int
	Freed               int64 // bytes
}

// Apply carries out actions in root, journaling each (as store). A dry run
// only sums what they would free.
func Apply(ctx context.Context, db *state.DB, root *confine.Root, store string, actions []Action, dryRun bool) (Result, error) {
	var res Result
	var errs []error
	for _, a := range actions {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var freed int64
		var err error
		switch a.Op {
		case RulePrune:
			freed = a.Archive.Size
			if !dryRun {
				err = remove(ctx, db, root, store, a)
			}
			if err == nil {
				res.Removed++
			}
		case RuleCompress:
			if dryRun {
				freed = a.Archive.Size * 3 / 4 // an estimate: text compresses about 4:1
			} else {
				freed, err = compress(ctx, db, root, store, a)
			}
			if err == nil {
				res.Compressed++
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", a.Op, a.Archive.Path, err))
			continue
		}
		res.Freed += freed
	}
	return res, errors.Join(errs...)
}

func journal(ctx context.Context, db *state.DB, rec *state.Record, final bool) error {
	if !final {
		_, err := db.Append(ctx, rec)
		return err
	}
	return db.Update(context.WithoutCancel(ctx), rec)
}

// ErrNotOurs means an archive's content is no longer what memwatch wrote:
// retention leaves it alone.
var ErrNotOurs = errors.New("the file changed since memwatch archived it; left alone")

// ours checks that data is the archive memwatch wrote.
func ours(a Archive, data []byte) error {
	if a.SHA != "" && rewrite.Hash(data) != a.SHA {
		return ErrNotOurs
	}
	return nil
}

// remove deletes an archive: journaled first (pending, with its hash), then
// unlinked through the root's confined handle.
func remove(ctx context.Context, db *state.DB, root *confine.Root, store string, a Action) error {
	dir, err := root.Dir(filepath.Dir(a.Archive.Path))
	if err != nil {
		return err
	}
	defer dir.Close()
	name := filepath.Base(a.Archive.Path)
	data, _, err := dir.ReadFile(name)
	if err != nil {
		return err
	}
	if err := ours(a.Archive, data); err != nil {
		return err
	}
	rec := &state.Record{Time: a.At, Store: store, Root: root.Path(), Rule: RulePrune, Target: a.Archive.Path, Outcome: state.Pending,
		BeforeSHA: rewrite.Hash(data), BeforeSize: int64(len(data)), AfterSHA: rewrite.RemovedSHA,
		Reason: fmt.Sprintf("%s (archive of %s, journal record %d)", a.Reason, a.Archive.Target, a.Archive.Record)}
	if err := journal(ctx, db, rec, false); err != nil {
		return err
	}
	err = errors.Join(dir.Unlink(name), dir.Sync())
	rec.Outcome = state.Done
	if err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
	}
	return errors.Join(err, journal(ctx, db, rec, true))
}

// compress writes ARCHIVE.gz beside an archive, durable and with its owner
// and mode, then removes the original. It returns the bytes freed.
func compress(ctx context.Context, db *state.DB, root *confine.Root, store string, a Action) (int64, error) {
	dir, err := root.Dir(filepath.Dir(a.Archive.Path))
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	name := filepath.Base(a.Archive.Path)
	data, fi, err := dir.ReadFile(name)
	if err != nil {
		return 0, err
	}
	if err := ours(a.Archive, data); err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Name = name
	if _, err := zw.Write(data); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	gz := name + ".gz"
	rec := &state.Record{Time: a.At, Store: store, Root: root.Path(), Rule: RuleCompress, Target: a.Archive.Path, Archive: filepath.Join(filepath.Dir(a.Archive.Path), gz),
		Outcome: state.Pending, BeforeSHA: rewrite.Hash(data), BeforeSize: int64(len(data)), AfterSHA: rewrite.Hash(buf.Bytes()), AfterSize: int64(buf.Len()),
		Reason: fmt.Sprintf("%s (archive of %s, journal record %d)", a.Reason, a.Archive.Target, a.Archive.Record)}
	if err := journal(ctx, db, rec, false); err != nil {
		return 0, err
	}
	err = writeGz(dir, name, gz, buf.Bytes(), fi)
	if err == nil {
		err = errors.Join(dir.Unlink(name), dir.Sync())
	}
	rec.Outcome = state.Done
	if err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
	}
	if jerr := journal(ctx, db, rec, true); jerr != nil {
		return 0, errors.Join(err, jerr)
	}
	if err != nil {
		return 0, err
	}
	return int64(len(data) - buf.Len()), nil
}

// writeGz makes gz in dir hold data, with the owner and mode of fi, and
// durable before it gets its name (which never replaces anything).
func writeGz(dir *confine.Dir, base, gz string, data []byte, fi fs.FileInfo) error {
	f, tmp, err := dir.CreateTemp(base, "gz")
	if err != nil {
		return err
	}
	// The temporary name goes whatever happens: the data has its final
	// name once the link succeeds.
	defer func() { f.Close(); _ = dir.Unlink(tmp) }()
	if _, err := f.Write(data); err != nil {
		return err
	}
	uid, gid := -1, -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	if err := dir.Own(f, fi.Mode().Perm(), uid, gid); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return dir.Link(tmp, dir, gz)
}

// Held sums the archive bytes of a root (memwatch status), kept copies
// included; kept counts those.
func Held(archives []Archive) (n int, bytes int64, kept int) {
	for _, a := range archives {
		n++
		bytes += a.Size
		if a.Kept {
			kept++
		}
	}
	return n, bytes, kept
}
