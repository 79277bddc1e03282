package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"
)

// SGRID colours a journal record's id as git log colours a commit's.
const SGRID = "\x1b[33m"

// terminalSize is the size of the terminal w writes to ($COLUMNS and
// $LINES first, as shells set them); ok is false when w is no terminal.
func terminalSize(w io.Writer) (cols, rows int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile || !isatty.IsTerminal(f.Fd()) {
		return 0, 0, false
	}
	if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
		cols, rows = int(ws.Col), int(ws.Row)
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		cols = n
	}
	if n, err := strconv.Atoi(os.Getenv("LINES")); err == nil && n > 0 {
		rows = n
	}
	return cols, rows, true
}

// terminalWidth is the width to wrap to: the terminal's, 0 (no wrapping)
// for a pipe or a file.
func terminalWidth(w io.Writer) int {
	cols, _, _ := terminalSize(w)
	return cols
}

// Colours of the commands that print for a person, as git's.
const (
	SGRDel    = "\x1b[31m" // a removed line, a problem
	SGRAdd    = "\x1b[32m" // an added line
	SGRHunk   = "\x1b[36m" // a diff's @@ line
	SGRHeader = "\x1b[1m"  // a diff's file names, a section
	SGRWarn   = "\x1b[33m" // what a person should look at
)

// terminalText is what a command wrote for a person (agents' text in it
// included), made inert when it goes to a terminal (see terminal.go; a
// pipe or a file gets the bytes as they are, as before), each line then
// coloured by colour (nil, or colour off: as it is). Colour codes are
// memwatch's, added after the text is inert.
func (g *Globals) TerminalText(text string, colored bool, colour func(line string) string) string {
	if isTerminal(g.RawOut) {
		var b strings.Builder
		inert{&b}.Write([]byte(text))
		text = b.String()
	}
	if !colored || colour == nil {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	var out strings.Builder
	for _, l := range lines {
		body, nl := strings.CutSuffix(l, "\n")
		if sgr := colour(body); sgr != "" && body != "" {
			out.WriteString(sgr + body + SGRReset)
		} else {
			out.WriteString(body)
		}
		if nl {
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// page prints text (made inert already: it may hold colour), through a pager when it is longer than the terminal
// is high, as git log does: $MEMWATCH_PAGER, else $PAGER, else less (with
// LESS=FRX unless set: quit if it fits, keep colours, leave the screen).
// A pipe, --no-pager, or a pager that does not start gets the text as is.
func (g *Globals) Page(text string, noPager bool) {
	_, rows, tty := terminalSize(g.RawOut)
	if noPager || !tty || rows == 0 || strings.Count(text, "\n") < rows {
		fmt.Fprint(g.RawOut, text)
		return
	}
	pager := os.Getenv("MEMWATCH_PAGER")
	if pager == "" {
		pager = os.Getenv("PAGER")
	}
	if pager == "" {
		pager = "less"
	}
	if pager == "cat" {
		fmt.Fprint(g.RawOut, text)
		return
	}
	cmd := exec.Command("/bin/sh", "-c", pager)
	cmd.Stdin = strings.NewReader(text)
	cmd.Stdout, cmd.Stderr = g.RawOut, g.Stderr
	cmd.Env = os.Environ()
	if os.Getenv("LESS") == "" {
		cmd.Env = append(cmd.Env, "LESS=FRX")
	}
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() == 127) {
		// No pager to run (a person quitting one is not this).
		fmt.Fprint(g.RawOut, text)
	}
}
