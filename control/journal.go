package control

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Record is one action memwatch took, or decided not to take.
type Record struct {
	ID         int64         `json:"id"`
	Time       time.Time     `json:"time"`
	Store      string        `json:"store"`
	Root       string        `json:"root"`
	Rule       string        `json:"rule"`
	Target     string        `json:"target"`
	Archive    string        `json:"archive,omitempty"`
	BeforeSHA  string        `json:"before_sha256,omitempty"`
	BeforeSize int64         `json:"before_size"`
	AfterSHA   string        `json:"after_sha256,omitempty"`
	AfterSize  int64         `json:"after_size"`
	Tokens     int64         `json:"tokens"`
	Duration   time.Duration `json:"duration_ns"`
	Outcome    string        `json:"outcome"`
	Reason     string        `json:"reason,omitempty"`
	Data       []byte        `json:"data,omitempty"`
	// RootDev and RootIno identify the root directory the action was made
	// in: undo and recovery act only on that directory (0: not recorded).
	RootDev int64 `json:"root_dev,omitempty"`
	RootIno int64 `json:"root_ino,omitempty"`
	// Trigger is what started the action: change (an agent wrote), poll,
	// schedule, tick (the session-idle check), sweep, manual (a command or
	// the API), restore_deleted, retry.
	Trigger string `json:"trigger,omitempty"`
	// Key identifies the change for the rule that made it (a consolidated
	// range), so the rule can ask whether it was made (DoneKey) without
	// reading the file it went into.
	Key string `json:"key,omitempty"`
}

// Format says how FormatJournal lays records out.
type Format struct {
	// Filtered: the records were selected by a filter, so an empty list
	// means "no record matches" rather than "nothing happened yet".
	Filtered bool
	// Width wraps each record's reason to this many columns (0: one line).
	Width int
	// Size prints a size (nil: a count of bytes).
	Size func(int64) string
	// Mark colours a part of a record ("id", "done", "failed", "rejected",
	// "skipped", "dim"); nil leaves it plain.
	Mark func(part, s string) string
}

// FormatJournal renders records as memwatch log prints them, in the order
// given, as git log does: a header line per record (id, time, outcome,
// rule, the file, the sizes, what started it), then its reason and
// archive indented below, wrapped to the width.
//
//	12  2026-11-27 14:03:11  done  compress  billing/MEMORY.md  15 KiB → 8.2 KiB  (change)
//	    MEMORY.md 247 lines, over memory_max_lines 200
//	    archive: /var/lib/memwatch/archive/…
func FormatJournal(recs []Record, f Format) string {
	if len(recs) == 0 {
		if f.Filtered {
			return "no journal record matches\n"
		}
		return "journal is empty: memwatch has not changed anything yet\n"
	}
	size := f.Size
	if size == nil {
		size = func(n int64) string { return fmt.Sprintf("%d B", n) }
	}
	mark := f.Mark
	if mark == nil {
		mark = func(_, s string) string { return s }
	}
	var b strings.Builder
	for _, r := range recs {
		target := filepath.Join(filepath.Base(r.Root), r.Target)
		if r.Target == "" {
			target = filepath.Base(r.Root)
		}
		type part struct{ kind, text string }
		head := []part{{"id", fmt.Sprintf("%d", r.ID)}, {"", r.Time.Local().Format(time.DateTime)}, {r.Outcome, r.Outcome}, {"", r.Rule}, {"", target}}
		var tail []part // what the header gives up, last first, to fit
		if r.BeforeSize != 0 || r.AfterSize != 0 {
			tail = append(tail, part{"", size(r.BeforeSize) + " → " + size(r.AfterSize)})
		}
		var about []string
		if r.Store != "" {
			about = append(about, "store "+r.Store)
		}
		if r.Trigger != "" {
			about = append(about, "by "+r.Trigger)
		}
		if r.Tokens > 0 {
			about = append(about, fmt.Sprintf("%d LLM tokens", r.Tokens))
		}
		if len(about) > 0 {
			tail = append(tail, part{"dim", "(" + strings.Join(about, ", ") + ")"})
		}
		width := func(ps []part) int {
			n := 0
			for _, p := range ps {
				n += utf8.RuneCountInString(p.text) + 2
			}
			return n - 2
		}
		fits := len(tail)
		for f.Width > 0 && fits > 0 && width(append(head[:len(head):len(head)], tail[:fits]...)) > f.Width {
			fits--
		}
		var line []string
		for _, p := range append(head, tail[:fits]...) {
			if p.kind != "" {
				line = append(line, mark(p.kind, p.text))
			} else {
				line = append(line, p.text)
			}
		}
		b.WriteString(strings.Join(line, "  "))
		b.WriteByte('\n')
		if fits < len(tail) {
			var rest []string
			for _, p := range tail[fits:] {
				rest = append(rest, p.text)
			}
			wrapTo(&b, strings.Join(rest, "  "), f.Width)
		}
		if reason := oneLine(r.Reason); reason != "" {
			wrapTo(&b, reason, f.Width)
		}
		if r.Archive != "" {
			wrapTo(&b, "archive: "+r.Archive, f.Width)
		}
	}
	return b.String()
}

// wrapTo writes s indented by four spaces, broken at spaces to fit width
// columns (a word longer than the line stays whole).
func wrapTo(b *strings.Builder, s string, width int) {
	const indent = "    "
	room := width - len(indent)
	if width <= 0 || room < 20 {
		b.WriteString(indent + s + "\n")
		return
	}
	line, n := "", 0
	for _, w := range strings.Fields(s) {
		wn := utf8.RuneCountInString(w)
		if n > 0 && n+1+wn > room {
			b.WriteString(indent + line + "\n")
			line, n = "", 0
		}
		if n > 0 {
			line += " "
			n++
		}
		line += w
		n += wn
	}
	if n > 0 {
		b.WriteString(indent + line + "\n")
	}
}

// oneLine keeps a reason on its own lines.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// JournalQuery selects journal records, as memwatch log asks for them
// (GET /v1/journal, newest first).
type JournalQuery struct {
	Store, Root, Rule string
	// Since and Until bound the records' times (zero: unbounded).
	Since, Until time.Time
	// AfterID: only records journaled after this one (log -f); BeforeID:
	// only those before it (the next page of a long answer).
	AfterID, BeforeID int64
	Limit             int
}

// MaxJournalPage bounds the records of one journal answer; a client asks
// for more a page at a time (BeforeID: the last record it has).
const MaxJournalPage = 1000

// Values is the query as the daemon reads it.
func (q JournalQuery) Values() url.Values {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	for k, val := range map[string]string{"store": q.Store, "root": q.Root, "rule": q.Rule} {
		if val != "" {
			v.Set(k, val)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.AfterID > 0 {
		v.Set("after", strconv.FormatInt(q.AfterID, 10))
	}
	if q.BeforeID > 0 {
		v.Set("before", strconv.FormatInt(q.BeforeID, 10))
	}
	return v
}

// JournalCount answers GET /v1/journal/count: how many records the query
// selects.
type JournalCount struct {
	Count int `json:"count"`
}

// RuleKept is the rule of a kept copy's record: an agent's version met
// during a rewrite, kept as a backup.
const RuleKept = "kept"
