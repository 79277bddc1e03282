package ui

import (
	"github.com/pmezard/go-difflib/difflib"
)

// diffRow is one line of a unified diff as a page shows it.
type diffRow struct {
	Kind     string // "ctx", "add", "del", or "gap" between hunks
	Old, New int    // line numbers (0: none)
	Text     string
}

// diffView is one page of a diff.
type diffView struct {
	Rows           []diffRow
	Added, Removed int
	Page, Pages    int
	Prev, Next     int // neighbouring pages, 0 when none
	Same           bool
	Cut            bool // the files were longer than maxDiffLines: their start is compared
}

const (
	diffContext  = 3
	diffPageRows = 400
	// maxDiffLines bounds the lines compared of each side: the matcher's
	// cost grows faster than the lines.
	maxDiffLines = 20000
)

// unified compares before and after line by line and returns page (from
// 1) of the result.
func unified(before, after []byte, jsonl bool, page int) diffView {
	a, b := splitLines(before), splitLines(after)
	var v diffView
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		a, b = a[:min(len(a), maxDiffLines)], b[:min(len(b), maxDiffLines)]
		v.Cut = true
	}
	as, bs := make([]string, len(a)), make([]string, len(b))
	for i, l := range a {
		as[i] = string(l)
	}
	for i, l := range b {
		bs[i] = string(l)
	}
	m := difflib.NewMatcher(as, bs)
	var rows []diffRow
	for gi, group := range m.GetGroupedOpCodes(diffContext) {
		if gi > 0 {
			rows = append(rows, diffRow{Kind: "gap"})
		}
		for _, op := range group {
			switch op.Tag {
			case 'e':
				for k := 0; k < op.I2-op.I1; k++ {
					rows = append(rows, diffRow{Kind: "ctx", Old: op.I1 + k + 1, New: op.J1 + k + 1, Text: lineText(a[op.I1+k], jsonl)})
				}
			default:
				for i := op.I1; i < op.I2; i++ {
					rows = append(rows, diffRow{Kind: "del", Old: i + 1, Text: lineText(a[i], jsonl)})
					v.Removed++
				}
				for j := op.J1; j < op.J2; j++ {
					rows = append(rows, diffRow{Kind: "add", New: j + 1, Text: lineText(b[j], jsonl)})
					v.Added++
				}
			}
		}
	}
	v.Same = len(rows) == 0
	v.Pages = max(1, (len(rows)+diffPageRows-1)/diffPageRows)
	v.Page = min(max(page, 1), v.Pages)
	if v.Page > 1 {
		v.Prev = v.Page - 1
	}
	if v.Page < v.Pages {
		v.Next = v.Page + 1
	}
	from := (v.Page - 1) * diffPageRows
	v.Rows = rows[from:min(len(rows), from+diffPageRows)]
	return v
}
