package ui

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/session"
)

// visible makes agent-written text safe to show as text: invalid UTF-8
// becomes U+FFFD, and control characters (a terminal escape's ESC, a
// carriage return that would hide what precedes it, a bell) become their
// visible Control Pictures symbols (␛, ␍, ␇), tabs stay. html/template
// escapes the rest when the page is written.
//
// And no credential an agent's tool printed is shown: it is masked
// ([REDACTED:kind]), whatever the page (a line, a search result, a diff).
func visible(s string) string {
	s = secrets.Masked(s)
	if !strings.ContainsFunc(s, func(r rune) bool {
		return r < 0x20 && r != '\t' || r == 0x7f || r == utf8.RuneError || r >= 0x80 && r < 0xa0
	}) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\t':
			b.WriteRune(r)
		case r == '\n':
			// ↵, which every font has (Control Pictures' ␊ is tofu in
			// many).
			b.WriteRune('\u21b5')
		case r < 0x20:
			b.WriteRune(0x2400 + r)
		case r == 0x7f:
			b.WriteRune('\u2421')
		case r >= 0x80 && r < 0xa0:
			b.WriteRune('\uFFFD') // C1 controls: CSI and friends
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// maxLineShown bounds one line on a page; the rest is cut with a mark.
const maxLineShown = 4000

// lineText is how a page shows one line of a file: a JSONL line (a
// session log, nanobot's history.jsonl) read as what it says (role and
// message, tool calls) rather than its JSON; any line visible and bounded.
func lineText(line []byte, jsonl bool) string {
	line = bytes.TrimRight(line, "\r")
	if jsonl && len(line) > 0 && line[0] == '{' {
		m := session.Decode(line)
		switch {
		case m.Raw:
		case m.Role != "" && !m.Meta:
			return cut(m.Role + ": " + m.Text)
		case m.Text != "":
			return cut("meta: " + m.Text)
		}
		line = secrets.MaskedLine(line) // shown as written: masked inside its strings too
	}
	return cut(string(line))
}

func cut(s string) string {
	s = secrets.Masked(s) // whole, before it is cut: no part of a value left at the cut
	if len(s) > maxLineShown {
		s = strings.ToValidUTF8(s[:maxLineShown], "") + " …[cut]"
	}
	return visible(s)
}

// isJSONL reports whether a file is read as JSON lines.
func isJSONL(path string) bool {
	return strings.HasSuffix(path, ".jsonl") || strings.HasSuffix(path, ".jsonl.gz")
}

// splitLines splits text into its lines, without their newlines.
func splitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}
