package control

import (
	"errors"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeRecall decodes a recall answer in one pass over body, without
// reflection: in a search's process, encoding/json's first decoding of
// these types (their fields' tables built, an encoder for each) and its
// two passes over the answer were a tenth of the process. It reads a
// strict subset of what encoding/json reads: keys spelled exactly as
// the daemon writes them, each once, no key it does not know. Anything
// else is an error, on which the caller decodes with encoding/json, so
// the answer read is always encoding/json's (FuzzDecodeRecall holds the
// two to the same result where this one succeeds).
func decodeRecall(body []byte, out *RecallResponse) error {
	d := &jdec{b: body}
	var r RecallResponse
	d.object(func(key string) bool {
		switch key {
		case "results":
			if d.null() {
				break
			}
			r.Results = []Result{} // as encoding/json makes of []
			d.array(func() bool {
				var res Result
				d.result(&res)
				r.Results = append(r.Results, res)
				return d.err == nil
			})
		case "roots":
			r.Roots = d.int()
		case "skipped":
			r.Skipped = d.int()
		case "stats":
			d.stats(&r.Stats)
		case "searched":
			r.Searched = d.str()
		case "next":
			r.Next = d.int()
		default:
			return false
		}
		return true
	})
	d.ws()
	if d.err == nil && d.i != len(d.b) {
		d.fail()
	}
	if d.err != nil {
		return d.err
	}
	*out = r
	return nil
}

func (d *jdec) result(r *Result) {
	d.object(func(key string) bool {
		switch key {
		case "source":
			r.Source = d.str()
		case "file_path":
			r.FilePath = d.str()
		case "line_number":
			r.LineNumber = d.int64()
		case "text":
			r.Text = d.str()
		case "citation":
			r.Citation = d.str()
		case "session":
			r.Session = d.str()
		case "root":
			r.Root = d.str()
		case "store":
			r.Store = d.str()
		case "host":
			r.Host = d.str()
		case "project":
			r.Project = d.str()
		case "time":
			r.Time = d.time()
		case "moved":
			r.Moved = d.str()
		case "folded":
			r.Folded = d.strings()
		case "copies":
			r.Copies = d.int()
		case "before":
			r.Before = d.turns()
		case "after":
			r.After = d.turns()
		case "score":
			r.Score = d.float()
		case "why":
			r.Why = d.str()
		case "passage":
			r.Passage = d.int()
		default:
			return false
		}
		return true
	})
}

func (d *jdec) turns() []Turn {
	if d.null() {
		return nil
	}
	out := []Turn{}
	d.array(func() bool {
		var t Turn
		d.object(func(key string) bool {
			switch key {
			case "line":
				t.Line = d.int64()
			case "role":
				t.Role = d.str()
			case "text":
				t.Text = d.str()
			case "time":
				t.Time = d.time()
			default:
				return false
			}
			return true
		})
		out = append(out, t)
		return d.err == nil
	})
	return out
}

func (d *jdec) stats(s *Stats) {
	d.object(func(key string) bool {
		switch key {
		case "Files":
			s.Files = d.int()
		case "Indexed":
			s.Indexed = d.int()
		case "Blocks":
			s.Blocks = d.int()
		case "BlocksRead":
			s.BlocksRead = d.int()
		case "BytesRead":
			s.BytesRead = d.int64()
		case "Duration":
			s.Duration = time.Duration(d.int64())
		case "StoppedEarly":
			s.StoppedEarly = d.bool()
		case "Unread":
			s.Unread = d.int()
		case "Why":
			s.Why = d.str()
		case "More":
			s.More = d.int()
		case "MoreCapped":
			s.MoreCapped = d.bool()
		default:
			return false
		}
		return true
	})
}

// jdec reads JSON from b at i; the first error stops it.
type jdec struct {
	b   []byte
	i   int
	err error
}

var errNotFast = errors.New("not an answer decodeRecall reads")

func (d *jdec) fail() {
	if d.err == nil {
		d.err = errNotFast
	}
}

func (d *jdec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c,
// stepping over it if so.
func (d *jdec) next(c byte) bool {
	d.ws()
	if d.err == nil && d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// null steps over a null, reporting whether there was one.
func (d *jdec) null() bool {
	d.ws()
	if d.err == nil && len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// object reads an object (or null), calling field for each key with the
// reader at its value; field returns false for a key it does not know.
// A key twice is refused (encoding/json keeps the last, merging).
func (d *jdec) object(field func(key string) bool) {
	if d.null() {
		return
	}
	if !d.next('{') {
		d.fail()
		return
	}
	if d.next('}') {
		return
	}
	var seen []string
	for d.err == nil {
		key := d.str()
		if !d.next(':') || d.err != nil {
			d.fail()
			return
		}
		for _, k := range seen {
			if k == key {
				d.fail()
				return
			}
		}
		seen = append(seen, key)
		if !field(key) {
			d.fail()
			return
		}
		if d.next('}') {
			return
		}
		if !d.next(',') {
			d.fail()
			return
		}
	}
}

// array reads an array (or null), calling elem for each element.
func (d *jdec) array(elem func() bool) {
	if d.null() {
		return
	}
	if !d.next('[') {
		d.fail()
		return
	}
	if d.next(']') {
		return
	}
	for d.err == nil {
		if !elem() {
			d.fail()
			return
		}
		if d.next(']') {
			return
		}
		if !d.next(',') {
			d.fail()
			return
		}
	}
}

func (d *jdec) strings() []string {
	if d.null() {
		return nil
	}
	out := []string{}
	d.array(func() bool {
		out = append(out, d.str())
		return d.err == nil
	})
	return out
}

func (d *jdec) bool() bool {
	d.ws()
	switch {
	case d.null():
		return false
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		return true
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
		return false
	}
	d.fail()
	return false
}

// number returns the text of a number as JSON writes one.
func (d *jdec) number() []byte {
	d.ws()
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case digits() == 0:
		d.fail()
		return nil
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			d.fail()
			return nil
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			d.fail()
			return nil
		}
	}
	return d.b[start:d.i]
}

func (d *jdec) int64() int64 {
	if d.null() {
		return 0
	}
	n, err := strconv.ParseInt(string(d.number()), 10, 64)
	if err != nil {
		d.fail()
	}
	return n
}

func (d *jdec) int() int {
	n := d.int64()
	if int64(int(n)) != n {
		d.fail()
	}
	return int(n)
}

func (d *jdec) float() float64 {
	if d.null() {
		return 0
	}
	f, err := strconv.ParseFloat(string(d.number()), 64)
	if err != nil {
		d.fail()
	}
	return f
}

func (d *jdec) time() time.Time {
	var t time.Time
	if d.null() {
		return t
	}
	d.ws()
	start := d.i
	d.str()
	if d.err == nil && t.UnmarshalJSON(d.b[start:d.i]) != nil {
		d.fail()
	}
	return t
}

// str reads a string as encoding/json does: its escapes decoded, a byte
// that is not UTF-8 and a lone surrogate read as U+FFFD.
func (d *jdec) str() string {
	if !d.next('"') {
		d.fail()
		return ""
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s
		case c == '\\' || c >= utf8.RuneSelf:
			return d.slowStr(start)
		case c < ' ':
			d.fail()
			return ""
		}
		d.i++
	}
	d.fail()
	return ""
}

func (d *jdec) slowStr(start int) string {
	out := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(out)
		case c < ' ':
			d.fail()
			return ""
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, d.b[d.i:d.i+n]...)
			}
			d.i += n
			continue
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		d.i++
		if d.i >= len(d.b) {
			break
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := d.hex4()
			if d.err != nil {
				return ""
			}
			if utf16.IsSurrogate(r) {
				// A pair when a low half follows; else U+FFFD, the next
				// escape read on its own.
				r2 := utf8.RuneError
				if len(d.b)-d.i >= 6 && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					if r2 = utf16.DecodeRune(r, d.hex4()); r2 == utf8.RuneError {
						d.i = save
					}
				}
				if d.err != nil {
					return ""
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default:
			d.fail()
			return ""
		}
	}
	d.fail()
	return ""
}

func (d *jdec) hex4() rune {
	if len(d.b)-d.i < 4 {
		d.fail()
		return 0
	}
	n, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 32)
	if err != nil {
		d.fail()
		return 0
	}
	d.i += 4
	return rune(n)
}
