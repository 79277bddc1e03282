// Package recall answers recall queries over an agent's memory with
// citations: the notes it wrote (markdown, searched line by line) and its
// raw session logs (JSONL, searched in the decoded text of each message,
// tool calls and tool results included).
//
// One search, two speeds. The scan reads the files themselves: notes from
// the top, logs from their end backwards in large chunks, so results come
// in their final order (notes first, newest file first; then messages,
// newest first) and a search with a limit stops as soon as it has them.
// Only returned lines are decoded and cut into snippets, and memory stays
// bounded whatever the number of hits. The index (Indexer, kept by the
// daemon in the state directory) records, for every block of about 128 KiB
// of a file, which trigrams its text holds; a search then reads only the
// blocks that can hold every trigram of the query, plus the part of the
// file written since the last complete block. The index never decides a
// match: it only skips blocks that cannot match, and the same code checks
// every line either way, so the index and the scan return the same
// results, in the same order, with the same citations.
//
// What the scan costs per byte: one copy out of the page cache (pread in
// 256 KiB chunks of whole lines, small enough that the bytes are still in
// the CPU's cache for what follows: 72 ms for 370 MiB here against 85 ms
// in 4 MiB chunks; mmap is no cheaper on a VM, where a page fault costs
// more than the copy), a count of its newlines (line numbers) and one or
// two vectorised byte scans (bytes.IndexByte, 0.03 to 0.06 ns a byte) for
// the anchor's byte that costs least in these very files: the anchor is
// the query's longest run of bytes JSON writers never escape, and its byte
// is chosen from a 64 KiB sample of the data (a letter needs a pass per
// case; each occurrence costs a verification and a restart). JSON is
// decoded only for lines that hold the anchor. A log of more than 1 MiB is
// read by one goroutine per CPU (at most 4), each reading, counting and
// scanning its own chunks while the results are taken in order, newest
// first, as one reader would: copy and scans divide, and a rare word in
// 370 MiB takes about 45 ms in the process on 2 CPUs.
// Messages the spool holds beyond the live files (Options.Held) are
// searched after the files.
package recall

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/recall/query"
)

// Kind is how a file is searched.
type Kind int

const (
	// Text files (markdown notes) are searched line by line as written.
	Text Kind = iota
	// Log files (JSONL session logs) are searched in the decoded text of
	// each line: role, message, tool calls with their input, tool results.
	Log
	// Records are transcripts an agent keeps in a database (OpenClaw's
	// transcript_events): the database is never scanned as a file; its
	// conversations, captured into the spool, are searched as logs
	// through Options.Held.
	Records
)

// Source is a kind of file a layout makes searchable in a root.
type Source struct {
	Glob string // relative to the root (path.Match syntax, {a,b} alternatives)
	// Exclude leaves out the files whose base name matches it (OpenClaw's
	// *.trajectory.jsonl beside its transcripts).
	Exclude string
	Kind    Kind
	Label   string // the result's source: "detail", "messages", "history", ...
	// Strip is a prefix of the path left out of citations (session-detail cites
	// working-memory/detail/auth.md as detail/auth.md).
	Strip string
	// Moved marks files memwatch moved memory into (Result.Moved: "moved"
	// for facts a compression took out of the file the agent loads,
	// "archived" for an earlier version kept aside). A name ending .gz is
	// read decompressed (retention compresses old archives).
	Moved string
}

// holds reports whether a log (or a database's conversation, DB#ID) the
// spool holds is one of this source's. A source without a glob holds
// every one: a Detached root's, whose files are on another host.
func (s Source) holds(name string) bool {
	return s.Glob == "" || confine.Match(s.Glob, s.Exclude, name)
}

// cite is the path a citation shows for rel.
func (s Source) cite(rel string) string {
	rel = filepath.ToSlash(rel)
	return strings.TrimPrefix(rel, s.Strip)
}

// Result is one recall hit (control.Result: what the daemon answers).
type Result = control.Result

// Query is a parsed query for words and phrases (recall/query).
type Query = query.Query

// ParseQuery parses a recall query.
func ParseQuery(q string) (Query, error) { return query.ParseQuery(q) }

// ErrEmptyQuery is returned for a query with no term.
var ErrEmptyQuery = query.ErrEmptyQuery

// MaxQuery bounds a query's length.
const MaxQuery = query.MaxQuery

// Turn is a message or line around a result.
type Turn = control.Turn

// searchTextID is the text of a raw line that queries match (the line
// for text files, the decoded message, role first, for logs) with the
// message's id, when the agent gives its messages one (Gemini CLI appends
// a message again each time it changes: one id, several lines).
func searchTextID(k Kind, raw []byte) ([]byte, string) {
	lt := decodeLineText(k, raw)
	return lt.search, lt.id
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}

// Format renders results as session-detail's recall_memory output (5.2).
func Format(q Query, results []Result) string { return format(q, results, false) }

func format(q Query, results []Result, explain bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d result(s) for: %q\n", len(results), strings.Trim(q.Text, `"`))
	for i, r := range results {
		fmt.Fprintf(&b, "\n[%d] Source: %s\n", i+1, r.Source)
		if r.Root != "" {
			where := r.Root
			if r.Host != "" {
				where = r.Host + ":" + where
			}
			if r.Store != "" {
				where += " (store " + r.Store + ")"
			}
			fmt.Fprintf(&b, "    Root: %s\n", where)
		}
		if r.Source != "messages" {
			fmt.Fprintf(&b, "    File: %s:%d\n", r.FilePath, r.LineNumber)
		} else {
			fmt.Fprintf(&b, "    Line: %d\n", r.LineNumber)
		}
		if !r.Time.IsZero() {
			fmt.Fprintf(&b, "    Date: %s\n", Date(r.Time))
		}
		if r.Project != "" {
			fmt.Fprintf(&b, "    Project: %s\n", r.Project)
		}
		fmt.Fprintf(&b, "    Content: %s\n    Citation: %s\n", r.Text, r.Citation)
		if r.Copies > 0 {
			fmt.Fprintf(&b, "    Copies: %s\n", Copies(r))
		}
		if explain && r.Why != "" {
			fmt.Fprintf(&b, "    Score: %.3f: %s\n", r.Score, r.Why)
		}
	}
	return b.String()
}

// Date is how results give their time: in UTC, to the minute.
func Date(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// Copies says how many times more a result's text was found, and where.
func Copies(r Result) string {
	s := fmt.Sprintf("%d more of the same text", r.Copies)
	if len(r.Folded) > 0 {
		s += ": " + strings.Join(r.Folded, ", ")
		if r.Copies > len(r.Folded) {
			s += fmt.Sprintf(", and %d more", r.Copies-len(r.Folded))
		}
	}
	return s
}

// IndexDir is the directory of the daemon's recall index in its state
// directory.
const IndexDir = "index"

// ReadableIndex is the recall index of a state directory when this
// process can read it ("" when not: a search then scans).
func ReadableIndex(stateDir string) string {
	dir := filepath.Join(stateDir, IndexDir)
	f, err := os.Open(dir)
	if err != nil {
		return ""
	}
	f.Close()
	return dir
}
