package secrets

import (
	"bytes"
	"encoding/json"
)

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
	var out []byte
	var kinds []string
	last := 0
	for i := 0; i < len(line); i++ {
		if line[i] != '"' {
			continue
		}
		start, end := i, stringEnd(line, i)
		if end < 0 {
			break
		}
		lit := line[start:end]
		i = end - 1
		// Only strings that may hold a credential are decoded.
		if !d.mentions(lit) {
			continue
		}
		var s string
		if json.Unmarshal(lit, &s) != nil {
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
		out = append(out, line[last:start]...)
		out = append(out, bytes.TrimRight(b.Bytes(), "\n")...)
		last = end
		kinds = append(kinds, kindsOf(fs)...)
	}
	if kinds == nil {
		return line, nil
	}
	return append(out, line[last:]...), kinds
}

// MaskedLine is a log's line as it is shown written (show --raw, a page's
// line that is no message) with Default's credentials masked: inside a
// JSON line's strings as the agent's reader reads them (a name and its
// value on two lines are one there, and an escape in the raw bytes), then
// in the line as it is.
func MaskedLine(line []byte) []byte {
	d := Default()
	out, _ := d.MaskLine(line)
	if t := bytes.TrimLeft(line, " \t"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		// What MaskLine read as JSON: its bytes outside the strings too.
		if m, n := d.Mask(string(out)); n > 0 {
			return []byte(m)
		}
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
