package memoryhistory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// OpenClaw 2026.7.2 and later keep each agent's transcripts in SQLite,
// agents/<agent>/agent/openclaw-agent.sqlite, table transcript_events:
// (session_id, seq, event_json | event_zstd, created_at, ...), one row per
// event, seq counting from 0 within a session; event_json holds what a line
// of the JSONL transcripts of earlier versions held ({"type":"message",
// "id", "parentId", "message": {...}}), event_zstd the same compressed
// (zstd, no dictionary) once a session goes cold. session_windows names
// each session's key (agent:<agent>:main, ...:cron:<job>, ...).
//
// Each session becomes a spool log of its own (DB#<session id>), its
// events lines numbered seq+1 (line 1 is the first event, as in a JSONL
// transcript), captured by row: the cursor is the last seq captured.
//
// The database is the agent's: memwatch opens it read-only (mode=ro,
// query_only) as its owner, reads in short transactions of at most
// transcriptBatch rows (in WAL mode a reader never blocks the agent's
// writer), waits at most 100 ms for a lock, and never holds one between
// reads. A database it cannot read (locked, corrupt, another schema) is
// logged and tried again on the next change.

// transcriptBatch bounds the rows one read returns...
const transcriptBatch = 500

// ...and transcriptBatches the reads per session in one evaluation; the
// rest follows on the next.
const transcriptBatches = 20

// maxEvent bounds an event decompressed (OpenClaw's own bound: 4 MiB).
const maxEvent = 4 << 20

// internalSession reports an OpenClaw session the agent runs for itself
// (scheduled jobs, heartbeats, Dreaming), left out like nanobot's.
func internalSession(key string) bool {
	for _, p := range []string{":cron:", ":heartbeat", ":dream", ":dreaming"} {
		if strings.Contains(key, p) {
			return true
		}
	}
	return false
}

// captureTranscripts copies the new events of the root's transcript
// databases into the spool.
func captureTranscripts(ctx context.Context, env *layout.Env, root *confine.Root) {
	glob := OptionsOf(env.Store).TranscriptsDB
	if glob == "" || env.Spool == nil {
		return
	}
	dbs, _ := root.Glob(glob)
	for _, rel := range dbs {
		if !plainPath(root, rel) {
			continue // a symlink on the way or a directory: no agent database in this root
		}
		n := 0
		err := root.Do(func() error {
			var err error
			n, err = readTranscripts(ctx, env, root, rel)
			return err
		})
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

// readTranscripts runs as the database's owner (Root.Do).
func readTranscripts(ctx context.Context, env *layout.Env, root *confine.Root, rel string) (int, error) {
	path := root.Join(rel)
	pool, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(100)&_pragma=query_only(1)")
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", rel, err)
	}
	defer pool.Close()
	pool.SetMaxOpenConns(1)
	var n int
	if err := pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='transcript_events'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read %s: %w", rel, err)
	}
	if n == 0 {
		return 0, nil // not yet, or not OpenClaw's
	}
	keys := sessionKeys(ctx, pool)
	ids, err := sessionIDs(ctx, pool)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", rel, err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxEvent), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return 0, err
	}
	defer dec.Close()
	total := 0
	for _, id := range ids {
		if internalSession(keys[id]) {
			continue
		}
		log := spool.RecordLog(rel, id)
		for range transcriptBatches {
			cursor, err := env.Spool.RecordCursor(ctx, root.Path(), log)
			if err != nil {
				return total, err
			}
			recs, err := readEvents(ctx, pool, dec, id, cursor-1)
			if err != nil {
				return total, fmt.Errorf("read %s session %s: %w", rel, id, err)
			}
			if len(recs) == 0 {
				break
			}
			res, err := env.Spool.CaptureRecords(ctx, root.Path(), log, recs, spool.Options{MaxLine: int(env.Store.MaxLine), IsMessage: session.IsMessage})
			if err != nil {
				return total, err
			}
			total += res.Lines
			if len(recs) < transcriptBatch {
				break
			}
		}
	}
	return total, nil
}

// sessionIDs lists the sessions with events.
func sessionIDs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT session_id FROM transcript_events`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// sessionKeys maps session ids to their keys, where the database says.
func sessionKeys(ctx context.Context, db *sql.DB) map[string]string {
	out := map[string]string{}
	rows, err := db.QueryContext(ctx, `SELECT session_id, session_key FROM session_windows`)
	if err != nil {
		return out // an older schema: no keys, nothing left out
	}
	defer rows.Close()
	for rows.Next() {
		var id, key string
		if rows.Scan(&id, &key) == nil {
			out[id] = key
		}
	}
	return out
}

// readEvents reads the events of a session after seq after, in order, as
// records keyed seq+1.
func readEvents(ctx context.Context, db *sql.DB, dec *zstd.Decoder, id string, after int64) ([]spool.Record, error) {
	rows, err := db.QueryContext(ctx, `SELECT seq, event_json, event_zstd FROM transcript_events WHERE session_id=? AND seq>? ORDER BY seq LIMIT ?`, id, after, transcriptBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spool.Record
	for rows.Next() {
		var seq int64
		var js sql.NullString
		var z []byte
		if err := rows.Scan(&seq, &js, &z); err != nil {
			return nil, err
		}
		data := []byte(js.String)
		if !js.Valid && len(z) > 0 {
			if data, err = dec.DecodeAll(z, nil); err != nil {
				// Kept as it is, never dropped: the line says what it was.
				data = fmt.Appendf(nil, `{"type":"memwatch_unreadable","seq":%d,"error":%q}`, seq, err.Error())
			}
		}
		out = append(out, spool.Record{Key: seq + 1, Data: data})
	}
	if err := rows.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return out, nil
}
