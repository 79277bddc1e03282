package answer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
)

// Decode gives each shown line its text as a person reads it: a log's
// message as "role: text" (a line of a .jsonl file), a note's as it is;
// its credentials masked in both its text and its data, unless reveal
// (the owner asked for them: show --reveal).
func Decode(lines []spool.Shown, rel string, reveal bool) []spool.Shown {
	jsonl := strings.HasSuffix(rel, ".jsonl") || spool.IsRecordLog(rel)
	for i := range lines {
		l := &lines[i]
		if l.Data == nil {
			continue
		}
		l.Text = textOf(l.Data, jsonl)
		if !reveal {
			l.Text = secrets.Masked(l.Text)
			l.Data = secrets.MaskedLine(l.Data)
		}
	}
	return lines
}

// textOf is a shown line's text: a log's message as "role: text", a
// note's line as it is.
func textOf(data []byte, jsonl bool) string {
	if !jsonl {
		return strings.ToValidUTF8(string(data), "\uFFFD")
	}
	m := session.Decode(data)
	switch {
	case m.Raw:
		return strings.ToValidUTF8(string(data), "\uFFFD")
	case m.Meta:
		return "meta: " + strings.ToValidUTF8(string(data), "\uFFFD")
	}
	return m.Role + ": " + m.Text
}

// ShowIn returns the lines citation c names in root: a log's from the
// spool (sp; nil: none readable) or its live file, a note's from the file
// as it is (a compressed archive decompressed).
func ShowIn(ctx context.Context, sp *spool.Spool, root *confine.Root, c spool.Citation) ([]spool.Shown, error) {
	err := fmt.Errorf("%s in %s: %w", c.Path, root.Path(), spool.ErrUnknownLog)
	var lines []spool.Shown
	if sp != nil {
		lines, err = sp.Show(ctx, root, c)
	}
	if errors.Is(err, spool.ErrUnknownLog) {
		if file, ok, ferr := spool.ShowFile(ctx, root, c); ok {
			return file, ferr
		}
	}
	return lines, err
}
