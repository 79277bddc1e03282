// Package factsepisodes is the facts-episodes layout (docs/layouts.md): a
// data/memory/ root with facts/*.md and episodes/YYYY-MM.md, each with a
// file-level "> Summary:" line. The directory structure is the index;
// memwatch keeps the summary lines that make the listing useful, can write
// the listing to a file an agent reads with no code, and splits oversize
// episode months by week.
package factsepisodes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/rotate"
)

// Directories of the layout, relative to the root.
const (
	FactsDir    = "facts"
	EpisodesDir = "episodes"
	summaryTag  = "> Summary:"
)

// Doc is a parsed fact or episode file.
type Doc struct {
	Src     []byte
	Summary string // the file-level summary, "" when missing
	// summaryLine is the byte range of the "> Summary:" line, -1 if missing.
	summaryStart, summaryEnd int
	// insertAt is where a missing summary line goes: after the "# " title.
	insertAt int
	Entries  []EntryInfo
}

// EntryInfo is one "## " entry (episodes) or fact line (facts).
type EntryInfo struct {
	Title   string // "## " heading text, or the fact's key
	Summary string // "- Summary:" value (episodes)
	Date    string // "- Date:" value (episodes)
	Raw     []byte // the entry's bytes as written
	Start   int    // byte offset of the entry in the file
}

// Parse reads a fact or episode file. A file-level summary is a
// "> Summary:" line before the first "## " entry.
func Parse(src []byte, episodes bool) *Doc {
	d := &Doc{Src: src, summaryStart: -1}
	md := markdown.Parse(src)
	firstEntry := len(src)
	for _, h := range md.Headings {
		if h.Level == 2 {
			firstEntry = h.Start
			break
		}
	}
	// The title line ends where a missing summary line is inserted.
	for _, h := range md.Headings {
		if h.Level == 1 && h.Start < firstEntry {
			if i := bytes.IndexByte(src[h.Start:], '\n'); i >= 0 {
				d.insertAt = h.Start + i + 1
			} else {
				d.insertAt = len(src)
			}
			break
		}
	}
	for off := 0; off < firstEntry; {
		end := bytes.IndexByte(src[off:], '\n')
		next := firstEntry
		if end >= 0 && off+end+1 < firstEntry {
			next = off + end + 1
		}
		line := strings.TrimRight(string(src[off:next]), "\r\n")
		if strings.HasPrefix(strings.TrimSpace(line), summaryTag) {
			d.Summary = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), summaryTag))
			d.summaryStart, d.summaryEnd = off, next
			break
		}
		if end < 0 {
			break
		}
		off = next
	}
	if episodes {
		for _, h := range md.Headings {
			if h.Level != 2 {
				continue
			}
			e := EntryInfo{Title: h.Text, Raw: src[h.Start:h.End], Start: h.Start}
			for _, l := range strings.Split(string(e.Raw), "\n") {
				t := strings.TrimSpace(l)
				switch {
				case strings.HasPrefix(t, "- Summary:"):
					e.Summary = strings.TrimSpace(strings.TrimPrefix(t, "- Summary:"))
				case strings.HasPrefix(t, "- Date:"):
					e.Date = strings.TrimSpace(strings.TrimPrefix(t, "- Date:"))
				}
			}
			d.Entries = append(d.Entries, e)
		}
		return d
	}
	// Facts: "## " sections when the file has them, else its list items,
	// each identified by its key ("Name" of "- Name: Zhang San").
	for _, h := range md.Headings {
		if h.Level == 2 {
			d.Entries = append(d.Entries, EntryInfo{Title: h.Text, Raw: src[h.Start:h.End], Start: h.Start})
		}
	}
	if len(d.Entries) > 0 {
		return d
	}
	for _, l := range strings.Split(string(src), "\n") {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "- ") && !strings.HasPrefix(t, "* ") {
			continue
		}
		item := strings.TrimSpace(t[2:])
		key := item
		if i := strings.Index(item, ":"); i > 0 && i < 40 {
			key = item[:i]
		} else if f := strings.Fields(item); len(f) > 4 {
			key = strings.Join(f[:4], " ")
		}
		d.Entries = append(d.Entries, EntryInfo{Title: key, Raw: []byte(l)})
	}
	return d
}

// Signature identifies the set of entries a summary summarizes.
func (d *Doc) Signature() string {
	keys := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		keys[i] = strings.ToLower(e.Title) + "\x00" + e.Summary
	}
	sort.Strings(keys)
	h := sha256.Sum256([]byte(strings.Join(keys, "\x01")))
	return hex.EncodeToString(h[:8])
}

// HeuristicSummary joins the entries' own summaries (or titles) and cuts
// the result to words words.
func (d *Doc) HeuristicSummary(words int, episodes bool) string {
	var phrases []string
	for _, e := range d.Entries {
		p := e.Title
		if episodes && e.Summary != "" {
			p = e.Summary
		}
		if !episodes {
			p = strings.ToLower(p)
		}
		if p = phrase(p); p != "" {
			phrases = append(phrases, p)
		}
	}
	return fitPhrases(phrases, words)
}

// leadingPhrases keeps the comma-separated phrases of s, in order, that fit
// in the word budget: an over-long model reply loses whole phrases at its
// end, never half of one (unless its first phrase alone is too long).
func leadingPhrases(s string, words int) string {
	var out []string
	used := 0
	for _, p := range strings.Split(s, ",") {
		p = strings.Join(strings.Fields(p), " ")
		n := len(strings.Fields(p))
		if n == 0 {
			continue
		}
		if used+n > words {
			break
		}
		out = append(out, p)
		used += n
	}
	if len(out) == 0 {
		return cutWords(s, words)
	}
	return strings.Join(out, ", ")
}

// phrase is an entry's text up to its first clause break: the short
// phrase a summary lists for it.
func phrase(s string) string {
	if i := strings.IndexAny(s, ":;,(—"); i > 0 {
		s = s[:i]
	}
	return strings.Join(strings.Fields(s), " ")
}

// fitPhrases joins whole phrases within a word budget: all of them in
// their order when they fit, else the newest (last) first, as many as fit.
// A phrase is never cut, unless the newest alone is over the budget.
func fitPhrases(phrases []string, words int) string {
	count := func(s string) int { return len(strings.Fields(s)) }
	total := 0
	for _, p := range phrases {
		total += count(p)
	}
	if total <= words {
		return strings.Join(phrases, ", ")
	}
	var out []string
	used := 0
	for i := len(phrases) - 1; i >= 0; i-- {
		n := count(phrases[i])
		if used+n > words {
			continue // a shorter older phrase may still fit
		}
		out = append(out, phrases[i])
		used += n
	}
	if len(out) == 0 && len(phrases) > 0 {
		return cutWords(phrases[len(phrases)-1], words)
	}
	return strings.Join(out, ", ")
}

func cutWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) <= n {
		return strings.Join(f, " ")
	}
	f = f[:n]
	// Do not end on an arrow or a dash.
	for len(f) > 1 && !strings.ContainsFunc(f[len(f)-1], func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		f = f[:len(f)-1]
	}
	return strings.TrimRight(strings.Join(f, " "), ",;:")
}

// WithSummary returns src with its file-level summary line set to summary,
// touching nothing else.
func (d *Doc) WithSummary(summary string) []byte {
	nl := "\n"
	if bytes.Contains(d.Src, []byte("\r\n")) {
		nl = "\r\n"
	}
	line := summaryTag + " " + summary + nl
	var out []byte
	if d.summaryStart >= 0 {
		out = append(out, d.Src[:d.summaryStart]...)
		out = append(out, line...)
		return append(out, d.Src[d.summaryEnd:]...)
	}
	at := d.insertAt
	out = append(out, d.Src[:at]...)
	if at > 0 && !bytes.HasSuffix(out, []byte(nl+nl)) {
		out = append(out, nl...)
	}
	out = append(out, line...)
	rest := d.Src[at:]
	if len(rest) > 0 && !bytes.HasPrefix(rest, []byte(nl)) {
		out = append(out, nl...)
	}
	return append(out, rest...)
}

// IndexEntry is one line of the memory index (facts-episodes' memory_list).
type IndexEntry struct {
	Path    string `json:"path"`
	Summary string `json:"summary"`
	Size    int64  `json:"size"`
}

// ArchiveDirName is the name of directories that hold archives (episode
// months moved out, split months): memory_list leaves them out.
const ArchiveDirName = "archive"

// Index lists every memory file under root with its summary, sorted by
// path: every *.md at any depth (facts/, episodes/, nested categories,
// top-level files), except the index file itself, hidden files and
// directories (memwatch's .memwatch/ among them), archive directories and
// memwatch's temp files. A symlink is listed only when it stays inside the
// root and names a file the root's owner may read; skipped names are
// returned in skipped.
func Index(root *confine.Root, indexFile string) (entries []IndexEntry, skipped []string, err error) {
	entries = []IndexEntry{}
	err = root.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil // an unreadable subdirectory is simply not listed
		}
		name := d.Name()
		if p != "." && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if name == ArchiveDirName && p != "." {
				return fs.SkipDir
			}
			return nil
		}
		rel := filepath.ToSlash(p)
		if !strings.HasSuffix(name, ".md") || rel == filepath.ToSlash(indexFile) || confine.IsTemp(name) {
			return nil
		}
		b, rerr := root.ReadFile(p)
		if rerr != nil {
			skipped = append(skipped, rel)
			return nil
		}
		doc := Parse(b, strings.HasPrefix(rel, EpisodesDir+"/"))
		entries = append(entries, IndexEntry{Path: rel, Summary: doc.Summary, Size: int64(len(b))})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("index %s: %w", root.Path(), err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	return entries, skipped, nil
}

// indexFooter is the seed's closing line of the injected index.
const indexFooter = "Use memory_read to load relevant files before responding."

// FormatIndex renders the index as the text the seed injects.
func FormatIndex(entries []IndexEntry) string {
	var b strings.Builder
	b.WriteString("Available memory:\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "- %s (%s)", e.Path, HumanSize(e.Size))
		if e.Summary != "" {
			b.WriteString(": " + e.Summary)
		}
		b.WriteByte('\n')
	}
	b.WriteString("\n" + indexFooter + "\n")
	return b.String()
}

// HumanSize renders a size as the seed does: 320B, 1.2KB, 3.4MB.
func HumanSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
}

// weekFile is the ISO-week file of an episode date in a month file's name space.
func weekFile(month string, date string) (string, bool) {
	t, err := time.Parse("2006-01-02", strings.TrimSpace(date))
	if err != nil || t.Format("2006-01") != month {
		return "", false
	}
	return rotate.Weekly(EpisodesDir, t), true
}
