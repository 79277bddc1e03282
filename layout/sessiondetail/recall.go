package sessiondetail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/session"
)

// Result is one recall hit, with seed 003's SearchResult fields.
type Result struct {
	Source     string `json:"source"`              // detail | messages
	FilePath   string `json:"file_path,omitempty"` // for detail hits
	LineNumber int64  `json:"line_number"`
	Text       string `json:"text"`
	Citation   string `json:"citation"`
	Session    string `json:"session,omitempty"` // with --all: the session directory

	mtime int64 // newest first
}

// Query is a parsed recall query: every term must appear in a line
// (case-insensitively); a query in double quotes is one exact phrase.
type Query struct {
	Text  string
	terms [][]byte // lowercased
	// anchor is the longest ASCII letter/digit run of the terms: candidates
	// are found by it, so misses cost no per-line work, and it survives the
	// JSON escaping of messages.jsonl.
	anchor []byte
}

// ParseQuery parses a recall query.
func ParseQuery(q string) (Query, error) {
	q = strings.TrimSpace(q)
	out := Query{Text: q}
	if len(q) >= 2 && strings.HasPrefix(q, `"`) && strings.HasSuffix(q, `"`) {
		out.terms = [][]byte{[]byte(strings.ToLower(q[1 : len(q)-1]))}
	} else {
		for _, f := range strings.Fields(q) {
			out.terms = append(out.terms, []byte(strings.ToLower(f)))
		}
	}
	if len(out.terms) == 0 || len(out.terms[0]) == 0 {
		return out, errors.New("recall: empty query")
	}
	for _, t := range out.terms {
		for _, run := range asciiRuns(t) {
			if len(run) > len(out.anchor) {
				out.anchor = run
			}
		}
	}
	return out, nil
}

func asciiRuns(b []byte) [][]byte {
	var out [][]byte
	start := -1
	for i := 0; i <= len(b); i++ {
		alnum := i < len(b) && (b[i] >= 'a' && b[i] <= 'z' || b[i] >= '0' && b[i] <= '9')
		switch {
		case alnum && start < 0:
			start = i
		case !alnum && start >= 0:
			out = append(out, b[start:i])
			start = -1
		}
	}
	return out
}

// matches reports whether every term is in text, case-insensitively, and
// where the first term is.
func (q Query) matches(text []byte) (int, bool) {
	at := -1
	for i, t := range q.terms {
		j := indexFold(text, t)
		if j < 0 {
			return -1, false
		}
		if i == 0 {
			at = j
		}
	}
	return at, true
}

// indexFold finds sub (lowercase) in s ignoring case. For an ASCII needle
// it searches, with vectorised byte scans, for the needle's rarest byte in
// both cases and verifies the needle around each hit.
func indexFold(s, sub []byte) int {
	if len(sub) == 0 {
		return 0
	}
	if !isASCII(sub) {
		return bytes.Index(bytes.ToLower(s), sub) // rare: non-ASCII terms
	}
	off := rarest(sub)
	lo := sub[off]
	up := lo
	if lo >= 'a' && lo <= 'z' {
		up = lo - 32
	}
	nl, nu := -2, -2 // next positions of lo and up at or after i; -2 unknown, -1 none
	for i := off; i < len(s); {
		if nl != -1 && nl < i {
			if nl = bytes.IndexByte(s[i:], lo); nl >= 0 {
				nl += i
			}
		}
		if up == lo {
			nu = nl
		} else if nu != -1 && nu < i {
			if nu = bytes.IndexByte(s[i:], up); nu >= 0 {
				nu += i
			}
		}
		j := nl
		if j < 0 || nu >= 0 && nu < j {
			j = nu
		}
		if j < 0 {
			return -1
		}
		start := j - off
		if start+len(sub) > len(s) {
			return -1
		}
		if equalFoldASCII(s[start:start+len(sub)], sub) {
			return start
		}
		i = j + 1
	}
	return -1
}

// byteFreq approximates how often a byte (either case, for letters) occurs
// in English text and JSON logs; lower is rarer. 'T' and 'Z' count extra
// because every ISO timestamp has them.
func byteFreq(c byte) float64 {
	const letters = "etaoinshrdlcumwfgypbvkjxqz"
	freqs := [...]float64{12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07}
	switch {
	case c >= 'a' && c <= 'z':
		f := freqs[strings.IndexByte(letters, c)] * 1.1 // plus the capital
		if c == 't' || c == 'z' {
			f += 5
		}
		return f
	case c >= '0' && c <= '9':
		return 4
	case c == ' ':
		return 15
	case c == '"' || c == ':' || c == ',':
		return 8
	}
	return 2
}

// rarest is the offset of the needle byte least likely to occur.
func rarest(sub []byte) int {
	best := 0
	for i := range sub {
		if byteFreq(sub[i]) < byteFreq(sub[best]) {
			best = i
		}
	}
	return best
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func equalFoldASCII(a, lower []byte) bool {
	for i, c := range a {
		if c >= 'A' && c <= 'Z' {
			c += 32
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// snippetLen is seed 003's snippet size.
const snippetLen = 300

// snippet cuts text to snippetLen characters around byte offset at, on one line.
func snippet(text []byte, at int) string {
	s := strings.ToValidUTF8(string(text), "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= snippetLen {
		return s
	}
	// Find the match again in the normalised text to centre the window.
	pos := 0
	if at >= 0 {
		if i := indexFold([]byte(s), []byte(strings.ToLower(string(text[at:min(at+16, len(text))])))); i >= 0 {
			pos = utf8.RuneCountInString(s[:i])
		}
	}
	start := max(0, min(pos-snippetLen/2, len(r)-snippetLen))
	return string(r[start : start+snippetLen])
}

// file is one file to search.
type file struct {
	root                 *confine.Root
	path                 string // root-relative
	source, session, rel string
	mtime                int64
}

// Options selects what Recall searches.
type Options struct {
	Roots   []string // session directories
	Scope   string   // all, detail, messages
	Limit   int
	Session bool // cite the session directory (searches over several roots)
}

// Recall searches the sessions' detail/ files and raw logs for q. Results
// come detail first, then messages, newest first within each.
func Recall(q Query, o Options) ([]Result, error) {
	var files []file
	for _, dir := range o.Roots {
		root, err := confine.Open(dir, confine.Options{})
		if err != nil {
			return nil, fmt.Errorf("recall: %w", err)
		}
		defer root.Close()
		session := ""
		if o.Session {
			session = filepath.Base(dir)
		}
		if o.Scope == "all" || o.Scope == "detail" {
			ms, _ := root.Glob(DetailDir + "/*.md")
			for _, m := range ms {
				files = append(files, file{root: root, path: m, source: "detail", session: session, rel: "detail/" + filepath.Base(m)})
			}
		}
		if o.Scope == "all" || o.Scope == "messages" {
			if _, err := root.Stat(MessagesFile); err == nil {
				files = append(files, file{root: root, path: MessagesFile, source: "messages", session: session, rel: MessagesFile})
			}
		}
	}
	for i := range files {
		if fi, err := files[i].root.Stat(files[i].path); err == nil {
			files[i].mtime = fi.ModTime().UnixNano()
		}
	}
	var mu sync.Mutex
	var results []Result
	var firstErr error
	work := make(chan file)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(files), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte // reused across this worker's files
			for f := range work {
				var rs []Result
				var err error
				rs, buf, err = searchFile(q, f, buf)
				mu.Lock()
				results = append(results, rs...)
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("recall %s: %w", f.root.Join(f.path), err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, f := range files {
		work <- f
	}
	close(work)
	wg.Wait()
	sort.SliceStable(results, func(i, j int) bool {
		a, b := results[i], results[j]
		if a.Source != b.Source {
			return a.Source == "detail"
		}
		if a.mtime != b.mtime {
			return a.mtime > b.mtime
		}
		if a.Source == "messages" {
			return a.LineNumber > b.LineNumber
		}
		return a.FilePath < b.FilePath || a.FilePath == b.FilePath && a.LineNumber < b.LineNumber
	})
	if o.Limit > 0 && len(results) > o.Limit {
		results = results[:o.Limit]
	}
	return results, firstErr
}

// chunk is the read size: large, so the byte searches run at memory speed.
const chunk = 4 << 20

// searchFile streams one file through buf (grown as needed and returned
// for reuse). Lines are only looked at where the anchor occurs, so a miss
// costs no allocation and no per-line work.
func searchFile(q Query, f file, buf []byte) ([]Result, []byte, error) {
	fh, fi, err := f.root.OpenRead(f.path)
	if err != nil {
		return nil, buf, err
	}
	defer fh.Close()
	size := int64(chunk)
	if fi.Size() < size {
		size = fi.Size() + 1 // a small file fits in one read
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, 0, size)
	}
	buf = buf[:0]
	var out []Result
	var line int64 // lines before buf[0]
	for eof := false; !eof; {
		// Keep at least half a chunk free past any carried partial line.
		if free := cap(buf) - len(buf); free < chunk/2 && int64(cap(buf)) >= chunk || free == 0 {
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			buf = nb
		}
		n, err := io.ReadFull(fh, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			eof = true
		} else if err != nil {
			return out, buf, err
		}
		end := bytes.LastIndexByte(buf, '\n') + 1
		if eof {
			end = len(buf) // a last line without newline still counts
		}
		region := buf[:end]
		counted, seen := 0, int64(0) // newlines in region[:counted]
		for pos := 0; pos < len(region); {
			i := pos // no ASCII anchor: look at every line
			if len(q.anchor) > 0 {
				if i = indexFold(region[pos:], q.anchor); i < 0 {
					break
				}
				i += pos
			}
			ls := bytes.LastIndexByte(region[:i], '\n') + 1
			le := len(region)
			if j := bytes.IndexByte(region[i:], '\n'); j >= 0 {
				le = i + j
			}
			seen += int64(bytes.Count(region[counted:ls], []byte{'\n'}))
			counted = ls
			if r, ok := match(q, f, region[ls:le], line+seen+1); ok {
				out = append(out, r)
			}
			pos = le + 1
		}
		line += seen + int64(bytes.Count(region[counted:], []byte{'\n'}))
		buf = append(buf[:0], buf[end:]...)
	}
	return out, buf, nil
}

// match checks one candidate line and builds its result.
func match(q Query, f file, raw []byte, line int64) (Result, bool) {
	raw = bytes.TrimRight(raw, "\r")
	var text []byte
	if f.source == "messages" {
		// Cheap prefilter on the raw JSON, then the real test on the decoded text.
		for _, t := range q.terms {
			for _, run := range asciiRuns(t) {
				if indexFold(raw, run) < 0 {
					return Result{}, false
				}
			}
		}
		m := session.Decode(raw)
		role := m.Role
		switch {
		case m.Raw:
			role = "raw"
		case m.Meta:
			role = "meta"
		}
		text = []byte(role + ": " + m.Text)
	} else {
		text = raw
	}
	at, ok := q.matches(text)
	if !ok {
		return Result{}, false
	}
	prefix := ""
	if f.session != "" {
		prefix = f.session + "/"
	}
	r := Result{Source: f.source, LineNumber: line, Text: snippet(text, at), Session: f.session, mtime: f.mtime}
	if f.source == "detail" {
		r.FilePath = prefix + f.rel
		r.Citation = fmt.Sprintf("%s%s#L%d", prefix, f.rel, line)
	} else {
		r.Citation = fmt.Sprintf("%s%s#L%d", prefix, MessagesFile, line)
	}
	return r, true
}

// Format renders results as seed 003's recall_memory output (5.2).
func Format(q Query, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d result(s) for: %q\n", len(results), strings.Trim(q.Text, `"`))
	for i, r := range results {
		fmt.Fprintf(&b, "\n[%d] Source: %s\n", i+1, r.Source)
		if r.Source == "detail" {
			fmt.Fprintf(&b, "    File: %s:%d\n", r.FilePath, r.LineNumber)
		} else {
			fmt.Fprintf(&b, "    Line: %d\n", r.LineNumber)
		}
		fmt.Fprintf(&b, "    Content: %s\n    Citation: %s\n", r.Text, r.Citation)
	}
	return b.String()
}
