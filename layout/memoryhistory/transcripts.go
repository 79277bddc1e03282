package memoryhistory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/transcripts"
)

// Agents that keep their conversations in SQLite (OpenClaw from 2026.7.2,
// opencode) are read through the transcripts package, a format per agent.
// Each session becomes a spool log of its own (DB#<session id>), captured
// by record: the cursor is the last record captured.
//
// The database is the agent's: memwatch opens it read-only as its owner,
// reads at most transcripts.Batch records at a time, and never holds a
// lock between reads. A database it cannot read (locked, corrupt, another
// schema) is logged and tried again on the next change.

// transcriptBatches bounds the reads per session in one evaluation; the
// rest follows on the next.
const transcriptBatches = 20

// captureTranscripts copies the new events of the root's transcript
// databases into the spool.
func captureTranscripts(ctx context.Context, env *layout.Env, root *confine.Root) {
	captureDocuments(ctx, env, root)
	glob := OptionsOf(env.Store).TranscriptsDB
	if glob == "" || env.Spool == nil {
		return
	}
	dbs, _ := root.Glob(glob)
	for _, rel := range dbs {
		if !plainPath(root, rel) {
			// A symlink on the way, or not a regular file: no database of
			// the agent's in this root. Said once.
			if fi, err := root.Lstat(rel); err == nil && !fi.IsDir() {
				env.Bound(root, rel, "transcripts_db", "a symbolic link (or one on the way), not the agent's database: not read")
			}
			continue
		}
		env.Unbound(root, rel, "transcripts_db")
		n, cut := 0, 0
		var longest int64
		err := root.Do(func() error {
			var err error
			n, cut, longest, err = readTranscripts(ctx, env, root, rel)
			return err
		})
		if cut > 0 {
			env.Bound(root, rel, "max_line", fmt.Sprintf("%d value(s) over %d bytes read in part (the longest %d bytes): each is a message with its start searchable and cited", cut, env.Store.MaxLine, longest))
		}
		if err != nil && ctx.Err() == nil {
			env.Log.Warn("transcript database not read; tried again on the next change", "root", root.Path(), "db", rel, "err", err)
			continue
		}
		if n > 0 {
			env.Log.Debug("captured transcript events", "root", root.Path(), "db", rel, "events", n)
		}
	}
}

// plainPath reports that rel is a regular file reached through no
// symlink: SQLite opens by path, so the path must stay in the root (and
// it opens as the owner, so the kernel refuses what the owner could not
// read should the path be swapped meanwhile).
func plainPath(root *confine.Root, rel string) bool {
	for p := rel; p != "." && p != "/" && p != ""; p = filepath.Dir(p) {
		fi, err := root.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return false
		}
		if p == rel && !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// readTranscripts runs as the database's owner (Root.Do). It returns the
// records captured, how many of them were read in part (transcripts.Bounds:
// the store's max_line) and the longest of those.
func readTranscripts(ctx context.Context, env *layout.Env, root *confine.Root, rel string) (total, cut int, longest int64, err error) {
	path, err := root.RealPath(rel)
	if err != nil {
		return 0, 0, 0, err
	}
	pool, err := transcripts.Open(ctx, path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer pool.Close()
	format, err := transcripts.Detect(ctx, pool)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read %s: %w", rel, err)
	}
	if format == nil {
		return 0, 0, 0, nil // not yet, or no agent's memwatch reads
	}
	sessions, err := format.Sessions(ctx, pool)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read %s: %w", rel, err)
	}
	bounds := transcripts.Bounds{MaxValue: int64(env.Store.MaxLine)}
	for _, s := range sessions {
		if s.Internal {
			continue
		}
		log := spool.RecordLog(rel, s.ID)
		for range transcriptBatches {
			cursor, err := env.Spool.RecordCursor(ctx, root.ID(), log)
			if err != nil {
				return total, cut, longest, err
			}
			recs, err := format.Records(ctx, pool, s.ID, cursor, bounds)
			if err != nil {
				return total, cut, longest, fmt.Errorf("read %s session %s: %w", rel, s.ID, err)
			}
			if len(recs) == 0 {
				break
			}
			res, err := env.Spool.CaptureRecords(ctx, root.ID(), log, recs, spool.Options{MaxLine: int(env.Store.MaxLine), IsMessage: session.IsMessage})
			if err != nil {
				return total, cut, longest, err
			}
			total, cut, longest = total+res.Lines, cut+res.Cut, max(longest, res.Longest)
			// A batch may be short for its bytes (transcripts.Bounds): read
			// on until one comes back empty.
		}
	}
	return total, cut, longest, nil
}

// Agents that keep a conversation as a JSON document written whole on
// every change (Continue CLI) are read through the transcripts package's
// Document formats: each document becomes a spool log of its own
// (FILE#<session id>), its messages captured after the longest prefix
// already captured (the state, a hash a message, in the state database;
// the document may shrink when the agent compacts it). A document is read
// again only when its size, time or inode changed: read whole, as the
// agent wrote it whole.
const docStateNS = "document-transcript"

// docStamp is what says a document changed since it was last read.
type docStamp struct {
	size, mtime int64
	ino         uint64
}

func captureDocuments(ctx context.Context, env *layout.Env, root *confine.Root) {
	glob := OptionsOf(env.Store).TranscriptsJSON
	if glob == "" || env.Spool == nil {
		return
	}
	docs, _ := root.Glob(glob)
	for _, rel := range docs {
		fi, err := root.Lstat(rel)
		if err != nil || !fi.Mode().IsRegular() || confine.IsTemp(rel) {
			continue
		}
		stamp := docStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			stamp.ino = st.Ino
		}
		memo := "document:" + rel
		if s, ok := env.Memo.Get(root.Path(), memo).(docStamp); ok && s == stamp {
			continue
		}
		n, done, err := readDocument(ctx, env, root, rel, fi.ModTime())
		var skip skipped
		if errors.As(err, &skip) {
			// Skipped for a bound: said once, read again when it changes.
			env.Bound(root, rel, skip.key, skip.why)
			env.Memo.Put(root.Path(), memo, stamp)
			continue
		}
		if err != nil && ctx.Err() == nil {
			env.Log.Warn("transcript document not read; tried again on the next change", "root", root.Path(), "file", rel, "err", err)
			continue
		}
		if done {
			env.Memo.Put(root.Path(), memo, stamp)
			env.Unbound(root, rel, "max_file_size")
			env.Unbound(root, rel, "json_depth")
		}
		if n > 0 {
			env.Log.Debug("captured transcript messages", "root", root.Path(), "file", rel, "messages", n)
		}
	}
}

// readDocument captures a document's new messages; done is false when it
// could not be parsed (half written: the agent rewrites it in place) and
// is to be read again.
func readDocument(ctx context.Context, env *layout.Env, root *confine.Root, rel string, written time.Time) (n int, done bool, err error) {
	limit := min(root.MaxFileSize(), transcripts.MaxDocument)
	if fi, err := root.Stat(rel); err == nil && fi.Size() > limit {
		return 0, true, skipped{"max_file_size", fmt.Sprintf("a conversation document of %d bytes, over the %d memwatch parses (max_file_size, at most %d for a document): not read", fi.Size(), limit, int64(transcripts.MaxDocument))}
	}
	doc, err := root.ReadFile(rel)
	if errors.Is(err, confine.ErrTooLarge) {
		return 0, true, skipped{"max_file_size", err.Error()}
	}
	if err != nil {
		return 0, false, err
	}
	if int64(len(doc)) > limit {
		return 0, true, skipped{"max_file_size", fmt.Sprintf("a conversation document of %d bytes, over the %d memwatch parses: not read", len(doc), limit)}
	}
	if d := transcripts.Depth(doc); d > transcripts.MaxDepth {
		return 0, true, skipped{"json_depth", fmt.Sprintf("a conversation document nested more than %d levels deep: not read", transcripts.MaxDepth)}
	}
	f, id, msgs := transcripts.ParseDocument(doc)
	if f == nil {
		return 0, !json.Valid(doc), nil // another file, or one being written
	}
	log := spool.RecordLog(rel, id)
	key := root.ID().Key() + "\x00" + log
	var st transcripts.DocState
	if b, ok, err := env.DB.Get(ctx, docStateNS, key); err != nil {
		return 0, false, err
	} else if ok && st.UnmarshalBinary(b) != nil {
		st = transcripts.DocState{} // not ours: captured whole again, each message under its id
	}
	cursor, err := env.Spool.RecordCursor(ctx, root.ID(), log)
	if err != nil {
		return 0, false, err
	}
	recs, next := st.Changes(id, msgs, cursor, written)
	if len(recs) > 0 {
		res, err := env.Spool.CaptureRecords(ctx, root.ID(), log, recs, spool.Options{MaxLine: int(env.Store.MaxLine), IsMessage: session.IsMessage})
		if err != nil {
			return 0, false, err
		}
		n = res.Lines
	}
	b, _ := next.MarshalBinary()
	return n, true, env.DB.Put(ctx, docStateNS, key, b)
}

// skipped is an input left out for a bound: the policy key and why.
type skipped struct{ key, why string }

func (s skipped) Error() string { return s.why }
