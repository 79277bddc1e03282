package transcripts

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/memwatch/memwatch/spool"
)

// OpenClaw 2026.7.2 and later keep each agent's transcripts in
// agents/<agent>/agent/openclaw-agent.sqlite, table transcript_events:
// (session_id, seq, event_json | event_zstd, created_at, ...), one row per
// event, seq counting from 0 within a session; event_json holds what a line
// of the JSONL transcripts of earlier versions held ({"type":"message",
// "id", "parentId", "message": {...}}), event_zstd the same compressed
// (zstd, no dictionary) once a session goes cold. session_windows names
// each session's key (agent:<agent>:main, ...:cron:<job>, ...).
//
// A session's records are its events, numbered seq+1 (record 1 is the
// first event, as line 1 is in a JSONL transcript).
var openClaw = &Format{Name: "openclaw", Table: "transcript_events", Sessions: openClawSessions, Records: openClawRecords}

// maxEvent bounds an event decompressed (OpenClaw's own bound: 4 MiB).
const maxEvent = 4 << 20

// openClawInternal reports an OpenClaw session the agent runs for itself
// (scheduled jobs, heartbeats, Dreaming), left out like nanobot's.
func openClawInternal(key string) bool {
	for _, p := range []string{":cron:", ":heartbeat", ":dream", ":dreaming"} {
		if strings.Contains(key, p) {
			return true
		}
	}
	return false
}

func openClawSessions(ctx context.Context, db *sql.DB) ([]Session, error) {
	keys := map[string]string{}
	if rows, err := db.QueryContext(ctx, `SELECT session_id, session_key FROM session_windows`); err == nil {
		for rows.Next() {
			var id, key string
			if rows.Scan(&id, &key) == nil {
				keys[id] = key
			}
		}
		rows.Close()
	} // an older schema: no keys, nothing left out
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT session_id FROM transcript_events`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, Session{ID: id, Internal: openClawInternal(keys[id])})
	}
	return out, rows.Err()
}

func openClawRecords(ctx context.Context, db *sql.DB, id string, after int64) ([]spool.Record, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxEvent), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	rows, err := db.QueryContext(ctx, `SELECT seq, event_json, event_zstd FROM transcript_events WHERE session_id=? AND seq>? ORDER BY seq LIMIT ?`, id, after-1, Batch)
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
