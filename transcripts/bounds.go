package transcripts

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Every value is bounded before it is in memory. An agent may keep a 50 MB
// message in one row (a log pasted into a prompt); reading rows whole, a
// batch of them would take gigabytes. So a value longer than the bound is
// read in part: SQLite is asked its size (octet_length, from the row's
// header) and only its first MaxValue bytes (substr), and a batch stops
// once it holds MaxBatch bytes (at least one record). What was cut stays a
// message: its role and the start of its text are salvaged from the JSON
// prefix, the record carries the size of what the agent wrote
// (spool.Record.Size), and the spool says it was cut and by how much.

// Bounds limit what one read of an agent's database holds.
type Bounds struct {
	// MaxValue is the most of one value read; the rest is counted, not
	// read (a store's max_line). 0: DefaultMaxValue.
	MaxValue int64
	// MaxBatch is the most bytes one call of Records returns (at least one
	// record). 0: DefaultMaxBatch.
	MaxBatch int64
}

// Defaults of Bounds.
const (
	DefaultMaxValue = 1 << 20
	DefaultMaxBatch = 16 << 20
)

func (b Bounds) value() int64 {
	if b.MaxValue <= 0 {
		return DefaultMaxValue
	}
	return b.MaxValue
}

func (b Bounds) batch() int64 {
	if b.MaxBatch <= 0 {
		return DefaultMaxBatch
	}
	return b.MaxBatch
}

// bounded is the SQL for column col read in part: its first max bytes
// when it is longer (as a BLOB: substr of TEXT counts characters), else
// the value; then its size in bytes. col is one of the formats' own
// column names, never input.
func bounded(col string, max int64) string {
	return fmt.Sprintf("CASE WHEN octet_length(%[1]s) > %[2]d THEN substr(CAST(%[1]s AS BLOB), 1, %[2]d) ELSE %[1]s END, coalesce(octet_length(%[1]s), 0)", col, max)
}

// salvage reads what it can of a JSON document cut short: the first role
// and the texts it holds ("text", "content" and "output" strings, the last
// one possibly cut), joined. It never fails: a prefix with none gives "".
func salvage(prefix []byte) (role, text string) {
	s := string(prefix)
	role, _ = stringAfter(s, `"role"`)
	var texts []string
	for s != "" {
		i, key := nextKey(s, `"text"`, `"content"`, `"output"`)
		if i < 0 {
			break
		}
		v, ok := stringAfter(s[i:], key)
		if ok || v != "" {
			if strings.TrimSpace(v) != "" {
				texts = append(texts, v)
			}
		}
		s = s[i+len(key):]
	}
	return role, strings.Join(texts, "\n")
}

// nextKey finds the first of keys in s.
func nextKey(s string, keys ...string) (int, string) {
	at, which := -1, ""
	for _, k := range keys {
		if i := strings.Index(s, k); i >= 0 && (at < 0 || i < at) {
			at, which = i, k
		}
	}
	return at, which
}

// stringAfter decodes the JSON string value after key (`"key"`) in s, as
// much of it as s holds; ok is false when the string is cut (or absent).
func stringAfter(s, key string) (string, bool) {
	i := strings.Index(s, key)
	if i < 0 {
		return "", false
	}
	s = strings.TrimLeft(s[i+len(key):], " \t\r\n")
	if !strings.HasPrefix(s, ":") {
		return "", false
	}
	s = strings.TrimLeft(s[1:], " \t\r\n")
	if !strings.HasPrefix(s, `"`) {
		return "", false
	}
	// The longest prefix of the string that decodes.
	end := 1
	for end < len(s) {
		switch s[end] {
		case '\\':
			end += 2
			continue
		case '"':
			var v string
			if json.Unmarshal([]byte(s[:end+1]), &v) == nil {
				return v, true
			}
			return "", false
		}
		end++
	}
	// Cut: close the string where a whole escape and rune end.
	body := s[1:min(end, len(s))]
	for len(body) > 0 {
		var v string
		if json.Unmarshal([]byte(`"`+body+`"`), &v) == nil {
			return strings.ToValidUTF8(v, ""), false
		}
		// Drop a partial escape or rune at the end and try again.
		_, size := utf8.DecodeLastRuneInString(body)
		body = body[:len(body)-max(size, 1)]
		if k := strings.LastIndexByte(body, '\\'); k >= 0 && len(body)-k < 6 {
			body = body[:k]
		}
	}
	return "", false
}

// cutNote is what a salvaged text ends with: it was cut, and the size of
// what the agent wrote.
func cutNote(size int64) string {
	return fmt.Sprintf("…[memwatch: cut, %d bytes in all]", size)
}

// fitTo cuts a salvaged text to half of n, the bytes it was salvaged
// from (at a rune's end): the message made of it, JSON-escaped with its
// role and note, stays within the bound those bytes kept to and is stored
// whole, a message.
func fitTo(text string, n int) string {
	n /= 2
	if len(text) <= n {
		return text
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[:n]
}

// Documents are parsed whole (each message a map), which takes several
// times their size: one is read only up to MaxDocument (or the store's
// max_file_size when lower), and only when nested at most MaxDepth deep.
const (
	MaxDocument = 64 << 20
	MaxDepth    = 512
)

// Depth is how deep doc's arrays and objects nest (strings skipped), up
// to the first level past MaxDepth: what a parser would recurse into.
func Depth(doc []byte) int {
	depth, deepest := 0, 0
	in := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			if depth++; depth > deepest {
				if deepest = depth; deepest > MaxDepth {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
