package cli

import (
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
)

// Memory files are written by agents, and agents may write anything: an
// escape sequence in a fact or a log line would reach the user's terminal
// through log, recall and show (moving the cursor, rewriting what is on
// screen, setting the title...). When stdout is a terminal, what memwatch
// prints goes through inert: control characters other than newline and tab
// become visible escapes. JSON output is escaped already; a pipe or a file
// gets the bytes as they are.

// terminalOut wraps w with inert when it is a terminal.
func terminalOut(w io.Writer) io.Writer {
	if isTerminal(w) {
		return inert{w}
	}
	return w
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// inert writes its input with control characters made visible: C0 and DEL
// as \xNN, C1 (U+0080-U+009F) as \u00NN, and invalid UTF-8 as \xNN.
type inert struct{ w io.Writer }

func (t inert) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out = fmt.Appendf(out, `\x%02x`, p[i])
		case r == '\n' || r == '\t':
			out = append(out, byte(r))
		case r < 0x20 || r == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
