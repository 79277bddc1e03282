package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// initPolicyPath is where memwatch init --write writes with no file.
func initPolicyPath() string {
	if os.Geteuid() == 0 {
		return filepath.Join(cli.SystemPolicy, "memwatch.yaml")
	}
	return cli.UserPolicy()
}

// controlFor finds the socket from the flags and the policy, if any.
func (g *globals) controlFor() (*control.Client, *policy.Policy, string, error) {
	p, err := g.ReadPolicy()
	if err != nil {
		return nil, nil, "", err
	}
	dir := g.ResolveStateDir(p)
	return g.Control(p, dir), p, dir, nil
}

func matchGlob(glob, p string) (bool, error) { return filepath.Match(glob, p) }

// logger builds the one logger main hands to everything else.
func (g *globals) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return nil, cli.UsageError{Err: fmt.Errorf("--log-level: want debug, info, warn or error, not %q", g.LogLevel)}
	}
	w := g.Stderr
	switch g.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
	case "auto":
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level})), nil
		}
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), nil
	}
	return nil, cli.UsageError{Err: fmt.Errorf("--log-format: want auto, text or json, not %q", g.LogFormat)}
}

// rewriter is a safe rewrite for one-off edits, journaling into db (nil:
// not journaled).
func (g *globals) rewriter(db *state.DB) *rewrite.Rewriter {
	log := slog.New(slog.NewTextHandler(g.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return rewrite.New(db, log)
}

// daemonStateDir is the state directory memwatch run uses: the one named,
// or the default; never another daemon's.
func (g *globals) daemonStateDir(p *policy.Policy) string {
	dir, _ := g.NamedStateDir(p)
	return dir
}

// fileRoot opens the directory of a file named on the command line as a
// root, and returns the file's name in it.
func fileRoot(path string) (*confine.Root, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	root, err := confine.Open(filepath.Dir(abs), confine.Options{})
	if err != nil {
		return nil, "", err
	}
	return root, filepath.Base(abs), nil
}
