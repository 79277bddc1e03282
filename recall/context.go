package recall

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall/query"
	"github.com/memwatch/memwatch/session"
)

// The turns around a result (recall -C N, the page's turn before a hit, an
// agent expanding a hit): read from the file the result was found in, as
// it is now. A log's metadata lines are passed over, so N turns are N
// messages; a note's blank lines are too. A result found only in the
// spool (a line its agent has since cleared) gets none: memwatch show
// reads it there.

// maxContextRead bounds the bytes read to find a result's surroundings.
const maxContextRead = 256 << 20

// AddContext gives each result the n turns before and after it, from the
// files of the roots o searched.
func AddContext(ctx context.Context, o Options, rs []Result, n int) {
	if n <= 0 {
		return
	}
	n = min(n, 50)
	for i := range rs {
		if ctx.Err() != nil {
			return
		}
		rs[i].Before, rs[i].After = around(o, rs[i], n)
	}
}

// around finds a result's root and file from its citation, and reads the
// turns around its line, while the file is the version cited.
func around(o Options, r Result, n int) ([]Turn, []Turn) {
	root, src, rel, ok := locate(o, r)
	if !ok || r.LineNumber < 1 {
		return nil, nil
	}
	gen := int64(1)
	if c := citedFile(r.Citation); strings.LastIndexByte(c, '@') > strings.LastIndexByte(c, '/') {
		fmt.Sscanf(c[strings.LastIndexByte(c, '@')+1:], "%d", &gen)
	}
	if src.Kind == Log && o.Generation != nil {
		if live := o.Generation(root.Root, rel); live > 0 && live != gen || live == 0 && gen > 1 {
			return nil, nil // an earlier version of the log: the spool has it (memwatch show)
		}
	}
	f, _, err := root.Root.OpenRead(rel)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	return readAround(f, src.Kind, r.LineNumber, n)
}

// locate finds the root and file a result's citation names.
func locate(o Options, r Result) (Root, Source, string, bool) {
	cite := citedFile(r.Citation)
	if i := strings.LastIndexByte(cite, '@'); i >= 0 && !strings.ContainsRune(cite[i:], '/') {
		cite = cite[:i] // a generation: path@3
	}
	if r.Host != "" {
		cite = strings.TrimPrefix(cite, r.Host+":")
	}
	for _, root := range o.Roots {
		if r.Host != root.Host {
			continue
		}
		rel := cite
		if r.Root != "" || path.IsAbs(cite) {
			shown := filepath.ToSlash(root.shown())
			if !strings.HasPrefix(cite, shown+"/") {
				continue
			}
			rel = strings.TrimPrefix(cite, shown+"/")
		}
		for _, src := range root.Sources {
			if src.Label != r.Source {
				continue
			}
			for _, p := range []string{src.Strip + rel, rel} {
				if confine.Match(src.Glob, src.Exclude, p) || src.Glob == "" {
					return root, src, p, true
				}
			}
		}
	}
	return Root{}, Source{}, "", false
}

// readAround reads the n turns before and after line of a file.
func readAround(rd io.Reader, k Kind, line int64, n int) ([]Turn, []Turn) {
	sc := bufio.NewScanner(io.LimitReader(rd, maxContextRead))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var before, after []Turn
	var no int64
	for sc.Scan() {
		no++
		if no == line {
			continue
		}
		t, ok := turnOf(k, no, sc.Bytes())
		if !ok {
			continue
		}
		if no < line {
			before = append(before, t)
			if len(before) > n {
				before = before[1:]
			}
			continue
		}
		after = append(after, t)
		if len(after) == n {
			break
		}
	}
	return before, after
}

// turnOf is a line as a turn: a log's message decoded (its role, its
// text, its time), a note's line as written; ok is false for what is
// not one (a log's metadata, a blank line).
func turnOf(k Kind, no int64, raw []byte) (Turn, bool) {
	raw = trimCR(raw)
	if k == Text {
		if len(strings.TrimSpace(string(raw))) == 0 {
			return Turn{}, false
		}
		return Turn{Line: no, Text: query.Snippet(raw, 0)}, true
	}
	m := session.Decode(raw)
	if m.Meta {
		return Turn{}, false
	}
	role := m.Role
	if m.Raw {
		role = "raw"
	}
	return Turn{Line: no, Role: role, Text: query.Snippet([]byte(m.Text), 0), Time: m.Time}, true
}
