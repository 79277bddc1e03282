package memoryhistory

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/memwatch/memwatch/confine"
)

// History formats (Options.HistoryFormat).
const (
	FormatMarkdown = "markdown"
	FormatJSONL    = "jsonl"
	FormatDaily    = "daily"
	FormatAuto     = "auto"
)

// HistoryJSONL is nanobot's record log of history entries, in memory_dir.
const HistoryJSONL = "history.jsonl"

// DailyDir holds OpenClaw's daily notes, under memory_dir.
const DailyDir = "memory"

// format resolves auto for one root: nanobot versions that keep
// history.jsonl read it, older ones HISTORY.md.
func (f files) format(root *confine.Root, format string) string {
	if format != FormatAuto {
		return format
	}
	if fi, err := root.Lstat(filepath.Join(f.dir, HistoryJSONL)); err == nil && fi.Mode().IsRegular() {
		return FormatJSONL
	}
	return FormatMarkdown
}

// jsonlRecord is one line of nanobot's history.jsonl: a cursor increasing
// by one per record, the local time to the minute as nanobot writes it
// ("2006-01-02 15:04"), and the entry's text. Memwatch adds its marker in
// a field of its own, which nanobot ignores.
type jsonlRecord struct {
	Cursor    int64  `json:"cursor"`
	Timestamp string `json:"timestamp"`
	Content   string `json:"content"`
	// SessionKey is the conversation's key: nanobot 0.3 shows a session
	// the history records of its own key (and of none).
	SessionKey string `json:"session_key,omitempty"`
	Memwatch   string `json:"memwatch,omitempty"`
}

// LastCursor returns the highest cursor among history.jsonl's records; a
// line that is not a record (cut, foreign, invalid UTF-8) is skipped.
func LastCursor(data []byte) int64 {
	var high int64
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r struct {
			Cursor json.Number `json:"cursor"`
		}
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		if n, err := r.Cursor.Int64(); err == nil && n > high {
			high = n
		}
	}
	return high
}

// jsonlEntry is the bytes that append one record to a history.jsonl whose
// end (its last records; all of it when short) is end: the record after
// the last cursor there, on a line of its own. Cursors only grow, so the
// last records hold the highest.
func jsonlEntry(end []byte, when time.Time, text, key, marker string) ([]byte, error) {
	line, err := json.Marshal(jsonlRecord{Cursor: LastCursor(end) + 1, Timestamp: when.Local().Format("2006-01-02 15:04"), Content: strings.TrimSpace(text), SessionKey: key, Memwatch: marker})
	if err != nil {
		return nil, err
	}
	var out []byte
	if len(end) > 0 && end[len(end)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(append(out, line...), '\n'), nil
}

// dailyFile is the daily note of when, in the conversation's own zone.
func (f files) dailyFile(when time.Time) string {
	return filepath.Join(f.dir, DailyDir, when.Format(time.DateOnly)+".md")
}

// sessionKey is the nanobot session key of the log rel: the "key" of its
// metadata line (SessionManager.save writes it first), else the key its
// file name encodes (base64url in 0.3, ':' written as '_' before).
func sessionKey(root *confine.Root, rel string) string {
	if f, _, err := root.OpenRead(rel); err == nil {
		head := make([]byte, 64<<10)
		n, _ := io.ReadFull(f, head)
		f.Close()
		first, _, _ := bytes.Cut(head[:n], []byte("\n"))
		var meta struct {
			Type string `json:"_type"`
			Key  string `json:"key"`
		}
		if json.Unmarshal(first, &meta) == nil && meta.Type == "metadata" && meta.Key != "" && utf8.ValidString(meta.Key) {
			return meta.Key
		}
	}
	stem := strings.TrimSuffix(filepath.Base(rel), ".jsonl")
	if b, err := base64.RawURLEncoding.DecodeString(stem); err == nil && utf8.Valid(b) && bytes.IndexByte(b, ':') > 0 {
		return string(b)
	}
	if ch, id, ok := strings.Cut(stem, "_"); ok {
		return ch + ":" + id
	}
	return stem
}
