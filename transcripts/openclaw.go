package transcripts

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
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

func openClawRecords(ctx context.Context, db *sql.DB, id string, after int64, b Bounds) ([]spool.Record, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxEvent), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	limit := b.value()
	// A compressed event is read whole to be decompressed: one larger
	// than the bound is not read at all (its line says so).
	rows, err := db.QueryContext(ctx, `SELECT seq, `+bounded("event_json", limit)+`, CASE WHEN octet_length(event_zstd) > ? THEN NULL ELSE event_zstd END, coalesce(octet_length(event_zstd), 0)
		FROM transcript_events WHERE session_id=? AND seq>? ORDER BY seq LIMIT ?`, limit, id, after-1, Batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spool.Record
	var total int64
	for rows.Next() {
		var seq, jsize, zsize int64
		var js, z []byte
		if err := rows.Scan(&seq, &js, &jsize, &z, &zsize); err != nil {
			return nil, err
		}
		r := spool.Record{Key: seq + 1, Data: js}
		switch {
		case js == nil && zsize > limit:
			r.Data = fmt.Appendf(nil, `{"type":"memwatch_unreadable","seq":%d,"error":"a compressed event of %d bytes, over the %d memwatch reads"}`, seq, zsize, limit)
			r.Size = int64(len(r.Data)) + zsize
		case js == nil && len(z) > 0:
			dec.Reset(bytes.NewReader(z))
			data, err := io.ReadAll(io.LimitReader(dec, limit+1))
			switch {
			case err != nil:
				// Kept as it is, never dropped: the line says what it was.
				r.Data = fmt.Appendf(nil, `{"type":"memwatch_unreadable","seq":%d,"error":%q}`, seq, err.Error())
			case int64(len(data)) > limit:
				rest, _ := io.Copy(io.Discard, dec) // its size, without holding it
				r = cutEvent(r.Key, data[:limit], int64(len(data))+rest)
			default:
				r.Data = data
			}
		case jsize > int64(len(js)):
			r = cutEvent(r.Key, js, jsize)
		}
		out = append(out, r)
		if total += int64(len(r.Data)); total > b.batch() {
			break // the batch is full: the next read goes on from here
		}
	}
	if err := rows.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return out, nil
}

// cutEvent is the record of an event read in part (its first bytes,
// prefix, of size in all): a message with its role and the start of its
// text.
func cutEvent(key int64, prefix []byte, size int64) spool.Record {
	role, text := salvage(prefix)
	if role == "" {
		role = "unknown"
	}
	data := marshal(map[string]any{"type": "message", "message": map[string]any{"role": role, "content": fitTo(text, len(prefix)) + cutNote(size)}})
	return spool.Record{Key: key, Data: data, Size: int64(len(data)) + size - int64(len(prefix))}
}
