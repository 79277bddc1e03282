package secrets

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// FindLine returns the credentials of one line of a file as its agent's
// reader reads it: a JSON line, or a line of a JSON file written out on
// many lines (its first byte a quote: "text": "..."), is read with its
// strings' escapes unescaped in place (a tool result's
// {\"api_key\": \"...\"}, a quoted .env value, a name and its value on
// two lines), as MaskedLine masks such a line; any other line as it is
// (MaskedLine reads the strings of any line holding an escape: a mask
// errs wide, a count does not unescape a note's own backslashes). Findings
// are placed in that reading, not in the line's bytes: they are to
// count, not to cut. buf is reused for the reading.
func (d *Detector) FindLine(line []byte, buf *[]byte) []Finding {
	if t := bytes.TrimLeft(line, " \t"); len(t) > 0 && (t[0] == '{' || t[0] == '[' || t[0] == '"') && bytes.IndexByte(t, '\\') >= 0 {
		*buf = unescapeJSON((*buf)[:0], line)
		line = *buf
	}
	return d.FindBytes(line)
}

// unescapeJSON appends line to dst with each JSON escape replaced by what
// it stands for (the structure's quotes kept); an escape that is no
// valid one is kept as it is. Nothing is longer unescaped, so the line
// is written into a slice its length, a run between escapes copied at
// once (a tool result of source code has an escape every 12 bytes: each
// line's \n, each indent's \t).
func unescapeJSON(dst, line []byte) []byte {
	n0 := len(dst)
	dst = slices.Grow(dst, len(line))[:n0+len(line)]
	out := dst[n0:]
	j := 0
	for i := 0; i < len(line); {
		if line[i] != '\\' { // else an escape right after the last (\n\t\t)
			k := bytes.IndexByte(line[i:], '\\')
			if k < 0 {
				j += copy(out[j:], line[i:])
				break
			}
			j += copy(out[j:], line[i:i+k])
			i += k
		}
		if i+1 == len(line) {
			out[j] = '\\'
			j++
			break
		}
		e := line[i+1]
		if c := escaped[e]; c != 0 {
			out[j] = c
			i, j = i+2, j+1
			continue
		}
		r, ok := rune(0), false
		if e == 'u' {
			r, ok = hex4(line[i+2:])
		}
		if !ok { // no escape: kept as it is
			j += copy(out[j:], line[i:i+2])
			i += 2
			continue
		}
		n := 6
		if utf16.IsSurrogate(r) {
			r2, ok2 := rune(0), false
			if len(line) >= i+12 && line[i+6] == '\\' && line[i+7] == 'u' {
				r2, ok2 = hex4(line[i+8:])
			}
			if r = utf16.DecodeRune(r, r2); ok2 && r != utf8.RuneError {
				n = 12
			}
		}
		j += utf8.EncodeRune(out[j:], r)
		i += n
	}
	return dst[:n0+j]
}

// escaped is what each one-letter JSON escape stands for (0: none is).
var escaped = [256]byte{'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f', '"': '"', '\\': '\\', '/': '/'}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// MaskLine masks the credentials of one line of a log as the agent wrote
// it, and returns the kinds it masked (one per value). A JSON line is
// masked inside its string values, each decoded, masked and encoded
// again, so the line still parses and everything outside the strings
// keeps its bytes (a PEM key's \n escapes are newlines to the rules, as
// the agent's reader sees them). Any other line is masked as text.
func (d *Detector) MaskLine(line []byte) ([]byte, []string) {
	if t := bytes.TrimLeft(line, " \t"); len(t) == 0 || (t[0] != '{' && t[0] != '[') || !json.Valid(bytes.TrimRight(line, "\r\n")) {
		fs := d.Find(string(line))
		if len(fs) == 0 {
			return line, nil
		}
		out, _ := d.Mask(string(line))
		return []byte(out), kindsOf(fs)
	}
	return d.maskLiterals(line)
}

// maskLiterals masks the credentials inside the JSON string literals of
// line, each decoded, masked and encoded again, and returns the kinds it
// masked; the bytes outside the literals are kept.
func (d *Detector) maskLiterals(line []byte) ([]byte, []string) {
	var out []byte
	var kinds []string
	last := 0
	for i := 0; i < len(line); i++ {
		if line[i] != '"' {
			continue
		}
		start, end := i, stringEnd(line, i)
		cut := end < 0 // a literal the line ends in (cut short): read to its end
		if cut {
			end = len(line)
		}
		lit := line[start:end]
		i = end - 1
		// Only strings that may hold a credential are decoded.
		if !d.mentions(lit) {
			continue
		}
		var s string
		if cut {
			s = string(unescapeJSON(nil, lit[1:]))
		} else if json.Unmarshal(lit, &s) != nil {
			continue
		}
		fs := d.Find(s)
		if len(fs) == 0 {
			continue
		}
		masked, _ := d.Mask(s)
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(masked) != nil {
			continue
		}
		enc2 := bytes.TrimRight(b.Bytes(), "\n")
		if cut {
			enc2 = enc2[:len(enc2)-1] // no closing quote it did not have
		}
		out = append(out, line[last:start]...)
		out = append(out, enc2...)
		last = end
		kinds = append(kinds, kindsOf(fs)...)
	}
	if kinds == nil {
		return line, nil
	}
	return append(out, line[last:]...), kinds
}

// MaskedLine is a log's line as it is shown written (show --raw, a page's
// line that is no message) with Default's credentials masked: inside its
// JSON strings as the agent's reader reads them (a name and its value on
// two lines, a value between escaped quotes: in the raw bytes the escapes
// hide it from the rules), in a JSON line, a line of a JSON file written
// out on many lines or a line cut short alike; then in the line as it is.
func MaskedLine(line []byte) []byte {
	d := Default()
	out := line
	if bytes.IndexByte(line, '\\') >= 0 && bytes.IndexByte(line, '"') >= 0 {
		// Without an escape, a string reads as its raw bytes: the pass
		// below sees what it holds.
		out, _ = d.maskLiterals(line)
	}
	if m, n := d.Mask(string(out)); n > 0 {
		return []byte(m)
	}
	return out
}

// stringEnd is the offset just after the JSON string literal starting
// at line[start] (a quote), or -1 when it does not end.
func stringEnd(line []byte, start int) int {
	for j := start + 1; j < len(line); j++ {
		switch line[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// mentions reports whether text holds any rule's keyword (the prefilter
// of Find).
func (d *Detector) mentions(text []byte) bool {
	return d.kw.any(string(text))
}

func kindsOf(fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Rule
	}
	return out
}
