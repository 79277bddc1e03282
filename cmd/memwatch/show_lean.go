//go:build lean

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/control"
)

// showCitation asks the daemon for the lines a citation names; when none
// answers (or it does not know them), memwatchd shows them instead
// (errDelegate).
func (g *globals) showCitation(ctx context.Context, arg, dir string) ([]control.Shown, string, error) {
	ctl, ok := g.leanControl()
	if !ok {
		return nil, "", errDelegate
	}
	var err error
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, "", errDelegate
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, "", errDelegate
	}
	root := ""
	if path, _, _ := strings.Cut(arg, "#"); !filepath.IsAbs(path) {
		root = dir
	}
	res, err := ctl.Show(ctx, root, arg, g.reveal)
	switch {
	case err == nil:
		return res.Lines, control.From(res.Lines), nil
	case errors.Is(err, control.ErrUsage):
		return nil, "", err
	}
	return nil, "", errDelegate
}

// showArchive is memwatchd's.
func (g *globals) showArchive(string, bool, paint) error { return errDelegate }
