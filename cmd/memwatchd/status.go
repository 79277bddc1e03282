package main

import (
	"context"
	"fmt"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/nowhistory"
)

// fileStatus prints the structure of a now-history memory file.
func (g *globals) FileStatus(arg string, asJSON bool) error {
	root, file, err := fileRoot(arg)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := nowhistory.Status(root, file, g.maxSizeFor(root.Path()))
	if err != nil {
		return err
	}
	if asJSON {
		return cli.PrintJSON(g.Globals, st)
	}
	fmt.Fprint(g.Stdout, nowhistory.FormatStatus(st))
	return nil
}

// daemonStatus asks the daemon of the policy how it is.
func (g *globals) DaemonStatus(ctx context.Context) (control.Status, error) {
	var st control.Status
	ctl, _, _, err := g.controlFor()
	if err != nil {
		return st, err
	}
	return ctl.Status(ctx)
}

// maxSizeFor is the max_size of the now-history store whose root dir is,
// when a policy is at hand, else the layout's default.
func (g *globals) maxSizeFor(dir string) int64 {
	limit := int64(100 << 10) // now-history's default max_size
	p, err := g.ReadPolicy()
	if err != nil || p == nil {
		return limit
	}
	for _, s := range p.Stores {
		if s.Layout == "now-history" && s.MatchesRoot(dir) {
			return int64(nowhistory.OptionsOf(s).MaxSize)
		}
	}
	return limit
}
