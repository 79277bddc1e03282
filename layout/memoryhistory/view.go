package memoryhistory

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/markdown"
)

// historyView is what the mirror and move rules know of a root's
// HISTORY.md and monthly files, kept between evaluations (layout.Memo)
// with the hash state of each file as parsed (filesum). When the files
// are what was parsed, or what was parsed plus what memwatch appended
// (its consolidations append an entry to HISTORY.md and to the month's
// file), only the bytes appended are parsed: an evaluation after an entry
// costs the entry, not the history. Any other change (an agent's write, a
// restart) parses every file again, as the rules did before.
type historyView struct {
	hist   filesum.State
	open   bool      // HISTORY.md ends inside a code fence: appended headings may not be entries
	first  time.Time // the oldest entry with a timestamp (zero: none)
	months map[string]*monthView
}

// monthView is one monthly file as parsed, and the entries of HISTORY.md
// of its month that it lacks (by key hash).
type monthView struct {
	st      filesum.State
	exists  bool
	open    bool
	keys    map[uint64]bool
	missing map[uint64]bool
}

const viewKey = "memory-history/view"

func keyHash(e Entry) uint64 { return xxhash.Sum64String(e.Key()) }

// parseEntries is ParseHistory, and whether src ends inside a code fence.
func parseEntries(src []byte) (preamble []byte, entries []Entry, openFence bool) {
	pre, es := ParseHistory(src)
	return pre, es, markdown.Parse(src).OpenFence
}

// readFrom reads f from off to size.
func readFrom(f io.ReaderAt, off, size int64) ([]byte, error) {
	b := make([]byte, size-off)
	n, err := f.ReadAt(b, off)
	if n < len(b) {
		return nil, err
	}
	return b, nil
}

// historyView brings the root's view up to date and returns it with the
// entries of HISTORY.md not seen before (every entry when it was read
// whole).
func (f files) view(ctx context.Context, env *layout.Env, root *confine.Root) (*historyView, []Entry, error) {
	hf, fi, err := root.OpenRead(f.history())
	if err != nil {
		return nil, nil, err
	}
	defer hf.Close()
	cur, err := env.Sums.Sum(hf)
	if err != nil {
		return nil, nil, err
	}
	v, _ := env.Memo.Get(root.Path(), viewKey).(*historyView)
	if v != nil && !f.monthsUnchanged(root, env, v) {
		v = nil
	}
	var fresh []Entry
	switch {
	case v != nil && v.hist.Sum == cur.Sum && v.hist.Size == cur.Size:
		return v, nil, nil
	case v != nil && !v.open && cur.Size > v.hist.Size && known(env, fi, v.hist):
		tail, err := readFrom(hf, v.hist.Size, cur.Size)
		if err != nil {
			return nil, nil, err
		}
		pre, es, open := parseEntries(tail)
		if len(bytes.TrimSpace(pre)) > 0 {
			v = nil // the last entry grew: parse it all again
			break
		}
		fresh, v.open = es, open
	default:
		v = nil
	}
	if v == nil {
		src, err := readFrom(hf, 0, cur.Size)
		if err != nil {
			return nil, nil, err
		}
		v = &historyView{months: map[string]*monthView{}}
		_, fresh, v.open = parseEntries(src)
	}
	v.hist = cur
	for _, e := range fresh {
		if !e.OK {
			continue
		}
		if v.first.IsZero() || e.Time.Before(v.first) {
			v.first = e.Time
		}
		mv := v.months[f.month(e)]
		if mv == nil {
			mv = f.readMonth(root, env, f.month(e))
			v.months[f.month(e)] = mv
		}
		if k := keyHash(e); !mv.keys[k] {
			mv.missing[k] = true
		}
	}
	env.Memo.Put(root.Path(), viewKey, v)
	return v, fresh, nil
}

// known reports whether st is a state of the file fi describes that
// memwatch knows is a prefix of it now.
func known(env *layout.Env, fi fs.FileInfo, st filesum.State) bool {
	_, ok := env.Sums.Prefix(fi, st.Size, st.Sum)
	return ok
}

// monthsUnchanged brings the view's monthly files up to date: one
// memwatch appended to is parsed from where it was; it reports false when
// one changed otherwise (then everything is parsed again).
func (f files) monthsUnchanged(root *confine.Root, env *layout.Env, v *historyView) bool {
	for path, mv := range v.months {
		mf, fi, err := root.OpenRead(path)
		if err != nil {
			if !mv.exists {
				continue // still missing
			}
			return false
		}
		st, ok := env.Sums.Known(fi)
		switch {
		case !mv.exists || !ok:
			mf.Close()
			return false
		case st.Sum == mv.st.Sum && st.Size == mv.st.Size:
		case !mv.open && st.Size > mv.st.Size:
			if _, ok := env.Sums.Prefix(fi, mv.st.Size, mv.st.Sum); !ok {
				mf.Close()
				return false
			}
			tail, err := readFrom(mf, mv.st.Size, st.Size)
			if err != nil {
				mf.Close()
				return false
			}
			pre, es, open := parseEntries(tail)
			if len(bytes.TrimSpace(pre)) > 0 {
				mf.Close()
				return false
			}
			for _, e := range es {
				k := keyHash(e)
				mv.keys[k] = true
				delete(mv.missing, k)
			}
			mv.st, mv.open = st, open
		default:
			mf.Close()
			return false
		}
		mf.Close()
	}
	return true
}

// readMonth parses a monthly file whole.
func (f files) readMonth(root *confine.Root, env *layout.Env, path string) *monthView {
	mv := &monthView{keys: map[uint64]bool{}, missing: map[uint64]bool{}}
	mf, _, err := root.OpenRead(path)
	if err != nil {
		return mv
	}
	defer mf.Close()
	st, err := env.Sums.Sum(mf)
	if err != nil {
		return mv // not known: the next evaluation parses everything again
	}
	src, err := readFrom(mf, 0, st.Size)
	if err != nil {
		return mv
	}
	mv.st, mv.exists = st, true
	var es []Entry
	_, es, mv.open = parseEntries(src)
	for _, e := range es {
		mv.keys[keyHash(e)] = true
	}
	return mv
}
