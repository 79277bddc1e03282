package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
)

// showCitation asks the daemon for the lines a citation names; when none
// answers (or it does not know them), memwatchd shows them instead
// (cli.ErrDelegate).
func (g client) ShowCitation(ctx context.Context, arg, dir string) ([]control.Shown, string, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return nil, "", cli.ErrDelegate
	}
	var err error
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, "", cli.ErrDelegate
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, "", cli.ErrDelegate
	}
	root := ""
	if path, _, _ := strings.Cut(arg, "#"); !filepath.IsAbs(path) {
		root = dir
	}
	res, err := ctl.Show(ctx, root, arg, g.Reveal)
	switch {
	case err == nil:
		return res.Lines, control.From(res.Lines), nil
	case errors.Is(err, control.ErrUsage):
		return nil, "", err
	}
	return nil, "", cli.ErrDelegate
}

// showArchive is memwatchd's.
func (g client) ShowArchive(string, bool, cli.Paint) error { return cli.ErrDelegate }
