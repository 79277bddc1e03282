package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

// showCitation returns the lines a citation names and where they came
// from: a host's on a central node, else through the daemon when it
// answers, else from the state here.
func (g *globals) ShowCitation(ctx context.Context, arg, dir string) ([]control.Shown, string, error) {
	p, err := g.ReadPolicy()
	if err != nil {
		return nil, "", err
	}
	stateDir := g.ResolveStateDir(p)
	if host, lines, ok, err := showHost(ctx, p, stateDir, arg); ok {
		return lines, "what host " + host + " replicated", err
	}
	c, err := spool.ParseCitation(arg)
	if err != nil {
		return nil, "", control.Usagef("%v", err)
	}
	lines, err := g.showLocal(ctx, p, stateDir, dir, c, arg)
	return lines, control.From(lines), err
}

// showLocal finds the root of a citation (--dir, the current directory,
// or, for a whole path, the policy's root holding it or the nearest
// directory above it the spool knows the file from) and shows its lines:
// through the daemon when it answers, else from the state here.
func (g *globals) showLocal(ctx context.Context, p *policy.Policy, stateDir, dir string, c spool.Citation, arg string) ([]spool.Shown, error) {
	var dirs []string
	suffix := strings.TrimPrefix(strings.TrimSpace(arg), c.Path)
	abs := filepath.IsAbs(filepath.FromSlash(c.Path))
	var err error
	switch {
	case dir != "":
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
		dirs = []string{dir}
	case abs:
		dirs = citationRoots(p, filepath.FromSlash(c.Path))
	default:
		if dir, err = os.Getwd(); err != nil {
			return nil, err
		}
		dirs = []string{dir}
	}
	var first error
	for pass := 0; pass < 2; pass++ {
		// The spool's logs first, then, for a note, the file as it is.
		for _, d := range dirs {
			cc := c
			if abs {
				rel, err := filepath.Rel(d, filepath.FromSlash(c.Path))
				if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
					return nil, control.Usagef("show %s: the file is not under --dir %s", arg, d)
				}
				cc.Path = filepath.ToSlash(rel)
			}
			lines, err := g.showIn(ctx, p, stateDir, d, cc, cc.Path+suffix, pass == 1)
			if err == nil {
				return answer.Decode(lines, cc.Path, g.Reveal), nil
			}
			if errors.Is(err, spool.ErrNoSuchLine) {
				return nil, fmt.Errorf("show %s: %w", arg, err)
			}
			if first == nil || errors.Is(first, spool.ErrUnknownLog) && !errors.Is(err, spool.ErrUnknownLog) {
				first = err
			}
		}
	}
	switch {
	case abs && len(dirs) > 1:
		return nil, fmt.Errorf("show %s: no root memwatch knows holds it (tried %s and the %d directories above it): %w", arg, dirs[0], len(dirs)-1, first)
	case errors.Is(first, spool.ErrUnknownLog):
		return nil, fmt.Errorf("show %s: %w (state %s; is --dir the root the citation belongs to?)", arg, first, stateDir)
	}
	return nil, fmt.Errorf("show %s: %w", arg, first)
}

// showIn returns the lines of citation c of root dir: from the daemon
// when it answers (it shows what this user's roots hold), else from
// memwatch's spool here, or, for a note (file), the file as it is.
func (g *globals) showIn(ctx context.Context, p *policy.Policy, stateDir, dir string, c spool.Citation, cite string, file bool) ([]spool.Shown, error) {
	if !file {
		res, err := g.Control(p, stateDir).Show(ctx, dir, cite, g.Reveal)
		switch {
		case err == nil:
			return res.Lines, nil
		case errors.Is(err, spool.ErrNoSuchLine):
			return nil, spool.ErrNoSuchLine
		case !errors.Is(err, control.ErrNoDaemon) && !errors.Is(err, control.ErrNotARoot) && !errors.Is(err, spool.ErrUnknownLog):
			return nil, err
		}
	}
	root, err := confine.Open(dir, confine.Options{})
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if file {
		if lines, ok, err := spool.ShowFile(ctx, root, c); ok {
			return lines, err
		}
		return nil, fmt.Errorf("%s in %s: %w", c.Path, dir, spool.ErrUnknownLog)
	}
	if stateUnreadable(stateDir) {
		return nil, fmt.Errorf("%s in %s: %w", c.Path, dir, spool.ErrUnknownLog)
	}
	sp, err := spool.OpenReadOnly(ctx, stateDir)
	if err != nil {
		return nil, fmt.Errorf("%w (looked in %s: name the daemon's state with --state-dir, --policy or MEMWATCH_STATE_DIR)", err, stateDir)
	}
	defer sp.Close()
	return sp.Show(ctx, root, c)
}

// showHost shows a host's citation on a central node (HOST:/path#L5, as
// recall prints there); ok is false for any other citation.
func showHost(ctx context.Context, p *policy.Policy, stateDir, cite string) (host string, lines []spool.Shown, ok bool, err error) {
	lines, host, ok, err = mirror.Show(ctx, stateDir, cite)
	if ok && err == nil {
		_, path, _ := mirror.SplitHostPath(mirror.CitedPath(cite))
		lines = answer.Decode(lines, path, false) // a host's copy: never revealed off the host
	}
	return host, lines, ok, err
}

// maxCitationDepth bounds the directories above a cited file tried as its
// root when no root of the policy holds it.
const maxCitationDepth = 16

// citationRoots are the directories a file cited by its whole path may be
// a root of, best first: the policy's roots holding it (the deepest
// first), then the directories above it, nearest first.
func citationRoots(p *policy.Policy, file string) []string {
	var out []string
	if p != nil {
		for _, s := range p.Stores {
			for _, r := range s.Roots() {
				if strings.HasPrefix(file, r+string(filepath.Separator)) {
					out = append(out, r)
				}
			}
		}
		sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	}
	for d := filepath.Dir(file); len(out) < maxCitationDepth+1; d = filepath.Dir(d) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return out
}

// showArchive prints an archive, decompressing one retention compressed.
//
// A JSONL file (a session log, a copy of one) is printed as show prints
// cited lines (Lnn: role: text, --raw: as stored); a note as it is. Its
// credentials are masked unless --reveal (it is a file the caller reads
// itself: its own).
func (g *globals) ShowArchive(path string, raw bool, p cli.Paint) error {
	b, err := readMaybeCompressed(path)
	if err != nil {
		return err
	}
	rel := strings.TrimSuffix(path, ".gz")
	if !strings.HasSuffix(rel, ".jsonl") {
		if !g.Reveal {
			b = []byte(secrets.Masked(string(b)))
		}
		_, err = g.Stdout.Write(b)
		return err
	}
	var lines []spool.Shown
	for i, l := range markdown.Lines(b) {
		lines = append(lines, spool.Shown{Line: int64(i + 1), Data: []byte(strings.TrimRight(l, "\r\n")), Source: "live"})
	}
	cli.PrintShown(g.Globals, path, "the file", answer.Decode(lines, rel, g.Reveal), raw, p)
	return nil
}

// stateUnreadable reports that memwatch's state is not this user's to
// read: its state directory is the daemon's (running as root), or, for a
// user other than root, there is none of its own. It is decided by opening
// the databases, not by their existence (a state directory made 0755 holds
// files only root may open). The commands that read the state then ask the
// daemon over its socket, which answers within what the kernel says this
// user is (SO_PEERCRED).
//
// A journal with no spool beside it (memwatch mcp wrote it; no daemon
// captured anything there yet) is this user's to read.
func stateUnreadable(dir string) bool {
	f, err := os.Open(filepath.Join(dir, state.FileName))
	if err != nil {
		return os.Geteuid() != 0 || errors.Is(err, fs.ErrPermission)
	}
	f.Close()
	if f, err := os.Open(filepath.Join(dir, spool.FileName)); err == nil {
		f.Close()
	} else if errors.Is(err, fs.ErrPermission) {
		return true
	}
	return false
}

// readMaybeCompressed reads a file the way show and diff do: through a
// confined root, a .gz archive decompressed.
func readMaybeCompressed(path string) ([]byte, error) {
	root, file, err := fileRoot(path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := root.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(file, ".gz") {
		var ok bool
		if b, ok = rewrite.Unpack(b); !ok {
			return nil, fmt.Errorf("read %s: not a gzip file memwatch can read", path)
		}
	}
	return b, nil
}
