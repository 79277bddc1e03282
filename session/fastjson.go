package session

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"strings"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
)

// jsonReader decodes a line into the three types decode asks for on
// every line (lineShape, a string, []part) exactly as encoding/json would,
// the values it keeps sliced from the line rather than copied. Capture and
// indexing decode every line of every log, most of it a tool's result, and
// decode reads it nested three deep (the line, its message, a part's
// content): go-json copied those bytes into each json.RawMessage and
// validated them again each time. Here a line is validated once (its
// JSON and its UTF-8); the values sliced from it are known valid and read
// again without a check. Anything it is not sure of (another type, a value
// of the wrong kind, a key that matches a field only without case, a lone
// surrogate, invalid JSON or UTF-8) it leaves to go-json, which
// FuzzDecodeLikeTheStandardLibrary holds to encoding/json too.
type jsonReader struct {
	valid [][]byte // values read whole and valid, or sliced from those
	big   bigStrings
}

// bigStrings are the long strings a validation found, their ends and
// whether they hold escapes. A tool's result is a string nested three or
// four deep (the line, its message, a part, the part's content): each
// level's value is found by its end, so its bytes were walked again at
// each, then once more to unquote it. Found here, its end is known at
// once. The strings are told by where they start in the line (every
// value read is sliced from it), so a string of another line, or a
// buffer that is not the line, is never one of them.
type bigStrings struct {
	s [maxBigStrings]bigString
	n int
}

type bigString struct {
	at  *byte // the opening quote
	n   int   // the string's length, quotes included
	esc bool
}

const (
	bigStringMin  = 128 // shorter strings are walked again: cheaper than a look-up
	maxBigStrings = 16  // past these a line's strings are walked again
)

func (e *bigStrings) add(b []byte, i, end int, esc bool) {
	if e != nil && end-i >= bigStringMin && e.n < maxBigStrings {
		e.s[e.n] = bigString{at: &b[i], n: end - i, esc: esc}
		e.n++
	}
}

// find is the string at b[i] when the validation kept it.
func (e *bigStrings) find(b []byte, i int) (bigString, bool) {
	if e == nil || e.n == 0 || i >= len(b) {
		return bigString{}, false
	}
	p := &b[i]
	for _, s := range e.s[:e.n] {
		if s.at == p && i+s.n <= len(b) {
			return s, true
		}
	}
	return bigString{}, false
}

// end is stringEnd, for a kept string without walking it.
func (e *bigStrings) end(b []byte, i int) int {
	if s, ok := e.find(b, i); ok {
		return i + s.n
	}
	return stringEnd(b, i)
}

func (r *jsonReader) unmarshal(data []byte, v any) error {
	if !r.known(data) {
		if !validJSONKeeping(data, &r.big) {
			return gojson.Unmarshal(data, v)
		}
		r.keep(data)
	}
	switch p := v.(type) {
	case *lineShape:
		l := *p
		if r.decodeShape(data, &l) {
			*p = l
			return nil
		}
	case *[]part:
		if ps, ok := r.decodeParts(data); ok {
			*p = ps
			return nil
		}
	case *string:
		i := skipSpace(data, 0)
		switch data[min(i, len(data)-1)] {
		case '"':
			if s, _, ok := r.big.unquote(data, i); ok {
				*p = s
				return nil
			}
		case 'n':
			return nil // null leaves a string as it was
		default:
			return errNotString // decode only asks whether it is one
		}
	}
	return gojson.Unmarshal(data, v)
}

// known reports a value the reader validated or sliced from one (the
// same bytes, not equal ones).
func (r *jsonReader) known(data []byte) bool {
	for _, k := range r.valid {
		if len(k) == len(data) && len(k) > 0 && &k[0] == &data[0] {
			return true
		}
	}
	return false
}

func (r *jsonReader) keep(data []byte) {
	if len(data) > 0 {
		r.valid = append(r.valid, data)
	}
}

// validJSON reports one JSON value and white space, in valid UTF-8.
func validJSON(b []byte) bool { return validJSONKeeping(b, nil) }

// validJSONKeeping is validJSON keeping the long strings' ends in e. Its
// strings are checked for UTF-8 as they are read (scanString): outside
// them, a byte beyond ASCII is no JSON.
func validJSONKeeping(b []byte, e *bigStrings) bool {
	end, ok := skipJSON(b, skipSpace(b, 0), 0, e)
	return ok && skipSpace(b, end) == len(b)
}

var errNotString = errors.New("decode string: not a string")

// maxFastDepth bounds the nesting the fast path follows; deeper input
// goes to go-json (encoding/json allows 10,000).
const maxFastDepth = 512

// What follows reads values already found valid: it finds their ends
// without checking them again, and fails only where go-json must decide.

// decodeShape decodes the object b holds into l.
func (r *jsonReader) decodeShape(b []byte, l *lineShape) bool {
	_, ok := r.walkObject(b, skipSpace(b, 0), func(key string, b []byte, i int) (int, bool) {
		switch key {
		case "type":
			return r.setString(b, i, &l.Type)
		case "role":
			return r.setString(b, i, &l.Role)
		case "name":
			return r.setString(b, i, &l.Name)
		case "_type":
			return r.setString(b, i, &l.MetaType)
		case "uuid":
			return r.setString(b, i, &l.UUID)
		case "parentUuid":
			return r.setString(b, i, &l.ParentUID)
		case "parentId":
			return r.setString(b, i, &l.ParentID)
		case "$rewindTo":
			return r.setString(b, i, &l.RewindTo)
		case "sessionId":
			return r.setString(b, i, &l.SessionID)
		case "content":
			return r.setRaw(b, i, &l.Content)
		case "parts":
			return r.setRaw(b, i, &l.Parts)
		case "message":
			return r.setRaw(b, i, &l.Message)
		case "payload":
			return r.setRaw(b, i, &l.Payload)
		case "data":
			return r.setRaw(b, i, &l.Data)
		case "createdAt":
			return r.setRaw(b, i, &l.CreatedAt)
		case "summary":
			return r.setRaw(b, i, &l.Summary)
		case "id":
			return r.setRaw(b, i, &l.EntryID)
		case "arguments":
			return r.setRaw(b, i, &l.Arguments)
		case "input":
			return r.setRaw(b, i, &l.Input)
		case "output":
			return r.setRaw(b, i, &l.Output)
		case "command":
			return r.setRaw(b, i, &l.Shell)
		case "$set":
			return r.setRaw(b, i, &l.Set)
		case "timestamp":
			// stamp's UnmarshalJSON gets the value as it is, null too.
			end := valueEnd(b, i, &r.big)
			l.Timestamp.Time = parseStamp(b[i:end])
			return end, true
		case "isMeta":
			return setBool(b, i, &l.IsMeta)
		case "_command":
			return setBool(b, i, &l.Command)
		case "isCompactSummary":
			return setBool(b, i, &l.Compact)
		}
		return skipOther(b, i, key, shapeKeys, &r.big)
	})
	return ok
}

// decodeParts decodes the array of content parts b holds.
func (r *jsonReader) decodeParts(b []byte) ([]part, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	parts := []part{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return parts, true
	}
	for i < len(b) {
		var p part
		switch b[i] {
		case '{':
			end, ok := r.decodePart(b, i, &p)
			if !ok {
				return nil, false
			}
			i = end
		case 'n':
			i += len("null") // a zero part, as encoding/json leaves it
		default:
			return nil, false
		}
		parts = append(parts, p)
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ']' {
			return parts, true
		}
		i = skipSpace(b, i+1) // past the comma
	}
	return nil, false
}

func (r *jsonReader) decodePart(b []byte, i int, p *part) (int, bool) {
	return r.walkObject(b, i, func(key string, b []byte, i int) (int, bool) {
		switch key {
		case "type":
			return r.setString(b, i, &p.Type)
		case "text":
			return r.setString(b, i, &p.Text)
		case "name":
			return r.setString(b, i, &p.Name)
		case "input":
			return r.setRaw(b, i, &p.Input)
		case "arguments":
			return r.setRaw(b, i, &p.Arguments)
		case "content":
			return r.setRaw(b, i, &p.Content)
		}
		return skipOther(b, i, key, partKeys, &r.big)
	})
}

// walkObject walks the object at i, handing each key and where its value
// starts to field, which returns where the value ends; it returns where
// the object ends. Keys with escapes or bytes beyond ASCII are left to
// go-json (encoding/json folds them onto fields in ways of its own).
func (r *jsonReader) walkObject(b []byte, i int, field func(key string, b []byte, i int) (int, bool)) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for i < len(b) {
		end := stringEnd(b, i)
		key := b[i+1 : max(end-1, i+1)]
		for _, c := range key {
			if c >= utf8.RuneSelf || c == '\\' {
				return i, false
			}
		}
		i = skipSpace(b, end)
		i = skipSpace(b, i+1) // past the colon
		var ok bool
		if i, ok = field(string(key), b, i); !ok {
			return i, false
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		i = skipSpace(b, i+1) // past the comma
	}
	return i, false
}

// The JSON names of lineShape's and part's fields: a key that is none of
// them but matches one without case is left to go-json (encoding/json
// decodes it into that field). TestFastFieldsKnown checks the lists
// against the structs' tags.
var (
	shapeKeys = []string{"type", "role", "content", "parts", "message", "payload", "data", "timestamp", "createdAt", "tool_calls", "name",
		"toolsUsed", "summary", "_type", "uuid", "parentUuid", "id", "parentId", "isMeta", "_command", "isCompactSummary", "arguments",
		"input", "output", "command", "$set", "$rewindTo", "sessionId", "action"}
	partKeys = []string{"type", "text", "name", "input", "arguments", "content"}
)

// skipOther skips the value of a key decode does not read; false for a
// field the fast path does not decode (tool_calls, toolsUsed, action) or
// a key that folds onto one.
func skipOther(b []byte, i int, key string, known []string, e *bigStrings) (int, bool) {
	for _, k := range known {
		// The key is ASCII (walkObject): only a key of k's length folds
		// onto it.
		if len(k) == len(key) && strings.EqualFold(key, k) {
			return i, false
		}
	}
	return valueEnd(b, i, e), true
}

func (r *jsonReader) setString(b []byte, i int, dst *string) (int, bool) {
	if i < len(b) && b[i] == 'n' {
		return i + len("null"), true // null leaves a string as it was
	}
	s, end, ok := r.big.unquote(b, i)
	if ok {
		*dst = s
	}
	return end, ok
}

func setBool(b []byte, i int, dst *bool) (int, bool) {
	end := valueEnd(b, i, nil)
	switch string(b[i:end]) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	case "null":
	default:
		return end, false
	}
	return end, true
}

// setRaw slices the value from the line: json.RawMessage takes it as it
// is, null included.
func (r *jsonReader) setRaw(b []byte, i int, dst *json.RawMessage) (int, bool) {
	end := valueEnd(b, i, &r.big)
	*dst = b[i:end:end]
	r.keep(*dst)
	return end, true
}

// valueEnd returns where the valid value at i ends; e, when set, holds
// the ends of its long strings.
func valueEnd(b []byte, i int, e *bigStrings) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return e.end(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = e.end(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] >= 'a' && b[j] <= 'z' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'E') {
		j++
	}
	return j
}

// stringEnd returns where the valid string at i ends: after the first
// quote that follows an even run of backslashes, found with IndexByte.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
	}
	return len(b)
}

// skipJSON validates the value at i and returns where it ends, keeping
// its long strings' ends in e when set.
func skipJSON(b []byte, i, depth int, e *bigStrings) (int, bool) {
	if i >= len(b) || depth > maxFastDepth {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		end, esc, ok := scanString(b, i)
		if ok {
			e.add(b, i, end, esc)
		}
		return end, ok
	case c == '{':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			end, _, ok := scanString(b, i)
			if !ok {
				return i, false
			}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = skipJSON(b, skipSpace(b, i+1), depth+1, e); !ok {
				return i, false
			}
			var more bool
			if i, more, ok = afterItem(b, i, '}'); !ok || !more {
				return i, ok
			}
		}
	case c == '[':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok, more bool
			if i, ok = skipJSON(b, i, depth+1, e); !ok {
				return i, false
			}
			if i, more, ok = afterItem(b, i, ']'); !ok || !more {
				return i, ok
			}
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	}
	return i, false
}

// afterItem steps past what follows an object's or an array's item: a
// comma (more) or the closing byte (where the value ends).
func afterItem(b []byte, i int, closing byte) (next int, more, ok bool) {
	i = skipSpace(b, i)
	switch {
	case i < len(b) && b[i] == ',':
		return skipSpace(b, i+1), true, true
	case i < len(b) && b[i] == closing:
		return i + 1, false, true
	}
	return i, false, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if i+len(lit) <= len(b) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

// skipNumber reads a number as JSON spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// scanString validates the string at i (its escapes, its UTF-8 and the
// absence of control bytes) and returns where it ends and whether it
// holds escapes. Eight bytes are tested at a time for a quote, a
// backslash, a control byte or one beyond ASCII: tool results are most of
// a log's bytes.
func scanString(b []byte, i int) (end int, esc, ok bool) {
	j := i + 1
	for {
		for j+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[j:])
			q, s := x^(ones*'"'), x^(ones*'\\')
			m := ((q - ones) &^ q) | ((s - ones) &^ s) | ((x - ones*0x20) &^ x) | x
			if m&highs != 0 {
				// The lowest flagged byte is exact: borrows only
				// reach the bytes above it.
				j += bits.TrailingZeros64(m&highs) / 8
				break
			}
			j += 8
		}
		for j < len(b) && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 && b[j] < utf8.RuneSelf {
			j++
		}
		if j >= len(b) {
			return j, esc, false
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, esc, true
		case c < 0x20:
			return j, esc, false
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n == 1 {
				return j, esc, false
			}
			j += n
			continue
		}
		esc = true
		if j+1 >= len(b) {
			return j, esc, false
		}
		switch b[j+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j += 2
		case 'u':
			if _, ok := hex4(b, j+2); !ok {
				return j, esc, false
			}
			j += 6
		default:
			return j, esc, false
		}
	}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// unquote reads the valid string at i as encoding/json unquotes it, and
// returns where it ends; false for a surrogate escape, which is go-json's
// to read. A string e kept is read without looking for its end and, with
// no escape, copied as it is; e may be nil.
func (e *bigStrings) unquote(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	s, kept := e.find(b, i)
	end := i + s.n
	if kept && !s.esc {
		return string(b[i+1 : end-1]), end, true
	}
	if !kept {
		end = stringEnd(b, i)
	}
	raw := b[i+1 : max(end-1, i+1)]
	k := bytes.IndexByte(raw, '\\')
	if k < 0 {
		return string(raw), end, true
	}
	// A Builder's String is the bytes written, not a copy of them:
	// tool results are most of what is read.
	var out strings.Builder
	out.Grow(len(raw))
	for ; k >= 0; k = bytes.IndexByte(raw, '\\') {
		out.Write(raw[:k])
		if k+1 >= len(raw) {
			return "", end, false
		}
		switch c := raw[k+1]; c {
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			r, ok := hex4(raw, k+2)
			if !ok || utf8.RuneLen(r) < 0 { // a surrogate half
				return "", end, false
			}
			out.WriteRune(r)
			raw = raw[k+6:]
			continue
		default: // " \ /
			out.WriteByte(c)
		}
		raw = raw[k+2:]
	}
	out.Write(raw)
	return out.String(), end, true
}
