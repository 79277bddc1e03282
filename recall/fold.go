package recall

import (
	"bytes"
	"path"
	"regexp"
)

// Folding: one result per distinct text. The layouts that consolidate
// write each history entry twice when history_mode is mirror (HISTORY.md,
// which the agent reads, and the month's HISTORY-YYYY-MM.md), an agent
// writes the same entry again, repeats the same tool call, copies a
// message into a note word for word, and a session can be copied whole
// into another file: the same text found twice takes two of an agent's
// few slots and tells it nothing more. So a result whose text (a note's
// line, a message's text without its role) is one already found in the
// same root (in another file or in the same one) is folded into it: it is
// left out, its citation listed in the kept result's Folded (the first
// maxFolded; Copies counts them all), and the kept result cites the file
// the agent reads (a name without a date stamp) when one of the copies is
// there. Messages shorter than minFoldMessage bytes ("ok", "yes") are not
// folded: the same short answer twice is two things said.

// maxFolded bounds the copies a result cites.
const maxFolded = 20

// minFoldMessage is the shortest message text folded with another.
const minFoldMessage = 24

// datedName matches a file name holding a date stamp (HISTORY-2026-11.md,
// 2026-11-26.md): a month's or a day's copy, not the file the agent reads.
var datedName = regexp.MustCompile(`(^|[^0-9])(19|20)[0-9]{2}-[01][0-9]`)

// foldKey is the text a result is the same as another by ("": never
// folded).
func foldKey(f file, text []byte) string {
	if f.src.Kind != Text {
		if _, rest, ok := bytes.Cut(text, []byte(": ")); ok {
			text = rest // the role
		}
		text = bytes.TrimSpace(text)
		if len(text) < minFoldMessage {
			return ""
		}
	} else if text = bytes.TrimSpace(text); len(text) == 0 {
		return ""
	}
	return f.root.Root.Path() + "\x00" + string(text)
}

// fold folds r (of f, holding text) into the result already found with
// the same text, and reports whether it did.
func (s *searcher) fold(f file, text []byte, r Result) bool {
	key := foldKey(f, text)
	if key == "" {
		return false
	}
	at, ok := s.folds[key]
	if !ok {
		if s.folds == nil {
			s.folds = map[string]foldAt{}
		}
		s.folds[key] = foldAt{i: len(s.results), file: f.rel}
		return false
	}
	kept := &s.results[at.i]
	if prefer(r, *kept) {
		// Cite the file the agent reads, at the kept result's rank.
		folded, copies := kept.Folded, kept.Copies
		score, why := kept.Score, kept.Why
		old := kept.Citation
		*kept = r
		kept.Folded, kept.Copies, kept.Score, kept.Why = folded, copies, score, why
		r.Citation = old
	}
	kept.Copies++
	if len(kept.Folded) < maxFolded {
		kept.Folded = append(kept.Folded, r.Citation)
	}
	return true
}

// prefer reports whether a copy r should be the result rather than kept:
// the file the agent loads before a file memwatch moved memory into,
// before an archive; among those, a name without a date stamp (HISTORY.md
// before HISTORY-2026-11.md).
func prefer(r, kept Result) bool {
	rank := func(x Result) int {
		switch x.Moved {
		case "":
			return 0
		case "moved":
			return 1
		}
		return 2
	}
	if a, b := rank(r), rank(kept); a != b {
		return a < b
	}
	return datedName.MatchString(path.Base(citedFile(kept.Citation))) && !datedName.MatchString(path.Base(citedFile(r.Citation)))
}

// foldAt is the result a text was first found as, and its file.
type foldAt struct {
	i    int
	file string
}

// citedFile is the file of a citation ("HISTORY.md#L4": "HISTORY.md").
func citedFile(c string) string {
	if i := bytes.LastIndexByte([]byte(c), '#'); i >= 0 {
		return c[:i]
	}
	return c
}
