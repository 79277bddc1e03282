package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/daemon"
	"github.com/memwatch/memwatch/fleet/hostname"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/restore"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// versions lists the versions of arg (a file, a root, or a host's),
// through the daemon or from the state directory.
func (g *globals) Versions(ctx context.Context, host, arg string, o cli.Listing) error {
	path, err := onHost(host, arg)
	if err != nil {
		return err
	}
	src, err := g.versionSource()
	if err != nil {
		return err
	}
	defer src.close()
	if _, _, ok := mirror.SplitHostPath(path); ok {
		return src.hostVersions(ctx, g, path, o)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		files, err := src.files(ctx, path)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintln(g.Stdout, f)
		}
		return nil
	}
	vs, err := src.list(ctx, path)
	if err != nil {
		return err
	}
	return cli.PrintVersions(g.Globals, path, vs, o)
}

// onHost is path as a host's (HOST:PATH) when host is given, else
// absOrHost(path).
func onHost(host, path string) (string, error) {
	if host == "" {
		return absOrHost(path)
	}
	if _, _, ok := mirror.SplitHostPath(path); ok {
		return "", cli.UsageError{Err: fmt.Errorf("%s names its host already; leave out --host", path)}
	}
	if !filepath.IsAbs(path) || !hostname.Valid(host) {
		return "", cli.UsageError{Err: fmt.Errorf("--host %s: give the file's whole path on that host (as recall cites it), not %q", host, path)}
	}
	return host + ":" + filepath.Clean(path), nil
}

func restoreCmd(g *globals) *cobra.Command {
	var deleted, missing string
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "restore PATH@VERSION | PATH@TIME | --deleted ROOT [--since 1h] | --missing ROOT",
		Short: "Put an earlier version of a memory file back, or files an agent deleted",
		Long: `Put a version of a memory file back through the safe rewrite: what the
file holds now is archived first, the change is journaled, and memwatch
undo takes it back again. The version is a number (memwatch versions
lists them), a time (MEMORY.md@2026-11-25T09:00:00Z: the version of that
time) or a time ago (MEMORY.md@2h).

It needs the undo right and a store that allows undo (allow_undo). With
the daemon running it goes through it; otherwise it runs here, as undo does.`,
		Example: `  memwatch restore MEMORY.md@1               # put version 1 back
  memwatch restore --deleted .. --since 1h   # every file an agent deleted in the last hour
  memwatch restore --missing ..              # every file with versions but not on disk (a new host)`,
		Args: func(cmd *cobra.Command, args []string) error {
			if deleted != "" || missing != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if deleted != "" && missing != "" {
				return cli.UsageError{Err: errors.New("restore: --deleted or --missing, not both")}
			}
			if missing != "" {
				root, err := filepath.Abs(missing)
				if err != nil {
					return err
				}
				return g.restoreLost(cmd.Context(), restore.LostRequest{Root: root, Missing: true})
			}
			if deleted != "" {
				root, err := filepath.Abs(deleted)
				if err != nil {
					return err
				}
				return g.restoreLost(cmd.Context(), restore.LostRequest{Root: root, Since: time.Now().Add(-since)})
			}
			path, n, at, err := parseVersionRef(args[0], time.Now())
			if err != nil {
				return cli.UsageError{Err: err}
			}
			if n == 0 && at.IsZero() {
				return cli.UsageError{Err: fmt.Errorf("restore: say which version, PATH@N or PATH@TIME (memwatch versions %s lists them)", path)}
			}
			res, err := g.restoreVersion(cmd.Context(), restore.Request{Path: path, Version: n, At: at})
			if err != nil {
				return err
			}
			printRestore(g, res)
			return nil
		},
	}
	cmd.Flags().StringVar(&deleted, "deleted", "", "bring back the memory files an agent deleted under this root")
	cmd.Flags().DurationVar(&since, "since", time.Hour, "with --deleted: how far back deletions count")
	cmd.Flags().StringVar(&missing, "missing", "", "bring back every memory file of this root that has versions and is not on disk")
	return cmd
}

func printRestore(g *globals, r restore.Result) {
	if r.Outcome == state.Done {
		fmt.Fprintf(g.Stdout, "restored %s to version %d (%s, journal %d; memwatch undo %d takes it back)\n", filepath.Join(r.Root, r.Path), r.Version, g.Size(int64(r.Bytes)), r.Journal, r.Journal)
		return
	}
	fmt.Fprintf(g.Stdout, "%s already holds version %d: nothing to do\n", filepath.Join(r.Root, r.Path), r.Version)
}

// parseVersionRef splits PATH@N or PATH@TIME; a path without @ has n 0 and
// a zero time. TIME is RFC 3339, a local "2006-01-02 15:04[:05]", or a
// duration before now ("2h").
func parseVersionRef(ref string, now time.Time) (path string, n int64, at time.Time, err error) {
	i := strings.LastIndex(ref, "@")
	if i < 0 {
		p, err := filepath.Abs(ref)
		return p, 0, time.Time{}, err
	}
	path, spec := ref[:i], ref[i+1:]
	if path, err = filepath.Abs(path); err != nil {
		return "", 0, time.Time{}, err
	}
	if v, err := strconv.ParseInt(spec, 10, 64); err == nil && v > 0 {
		return path, v, time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, spec); err == nil {
		return path, 0, t, nil
	}
	for _, layout := range []string{time.DateTime, "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, spec, time.Local); err == nil {
			return path, 0, t, nil
		}
	}
	if d, err := time.ParseDuration(spec); err == nil && d > 0 {
		return path, 0, now.Add(-d), nil
	}
	return "", 0, time.Time{}, fmt.Errorf("%q: after @ give a version number, a time (2026-11-25T09:00:00Z) or how long ago (2h)", ref)
}

// versionSource reads versions from the daemon, or from the state
// directory when no daemon runs.
type versionSource struct {
	ctl      *control.Client
	offline  *versions.Store
	pol      *policy.Policy
	stateDir string
}

func (g *globals) versionSource() (*versionSource, error) {
	ctl, p, dir, err := g.controlFor()
	if err != nil {
		return nil, err
	}
	if err := ctl.Alive(context.Background()); !errors.Is(err, control.ErrNoDaemon) {
		return &versionSource{ctl: ctl, pol: p, stateDir: dir}, nil
	}
	vs, err := versions.OpenReadOnly(context.Background(), dir)
	if err != nil && (p == nil || p.Fleet == nil) {
		return nil, fmt.Errorf("no daemon answered and no versions were found: %w (give the daemon's --state-dir or --policy)", err)
	}
	return &versionSource{offline: vs, pol: p, stateDir: dir}, nil
}

// hostVersions prints the versions of a host's file (HOST:/path) or the
// files with versions of a host's root, on a central node.
func (s *versionSource) hostVersions(ctx context.Context, g *globals, path string, o cli.Listing) error {
	var vs []versions.Version
	var files []string
	if s.ctl != nil {
		var raw json.RawMessage
		if err := s.ctl.Versions(ctx, path, &raw); err != nil {
			return err
		}
		if json.Unmarshal(raw, &files) != nil || len(files) == 0 {
			files = nil
			if err := json.Unmarshal(raw, &vs); err != nil {
				return fmt.Errorf("read the daemon's answer: %w", err)
			}
		}
	} else {
		host, hp, _ := mirror.SplitHostPath(path)
		var err error
		if vs, files, _, err = mirror.HostVersions(ctx, s.stateDir, host, hp); err != nil {
			return err
		}
	}
	if files != nil {
		for _, f := range files {
			fmt.Fprintln(g.Stdout, f)
		}
		return nil
	}
	return cli.PrintVersions(g.Globals, path, vs, o)
}

// absOrHost is path made absolute, or a host's path (HOST:/path) as is.
func absOrHost(path string) (string, error) {
	if _, _, ok := mirror.SplitHostPath(path); ok {
		return path, nil
	}
	return filepath.Abs(path)
}

func (s *versionSource) close() {
	if s.offline != nil {
		s.offline.Close()
	}
}

// rootOf finds the policy root holding path (offline, or the root itself
// with rel "."), as the daemon finds it: opened from its glob's fixed part
// without following a symbolic link, so the versions read are those of
// the directory there (its ID). It returns the root's ID.
func (s *versionSource) rootOf(path string) (confine.ID, string, error) {
	if s.pol != nil {
		for _, st := range s.pol.Stores {
			for _, r := range st.Roots() {
				if rel, err := filepath.Rel(r, path); err == nil && filepath.IsLocal(rel) || r == path {
					root, err := st.OpenRoot(r)
					if err != nil {
						return confine.ID{}, "", err
					}
					defer root.Close()
					rel, _ := root.Rel(path)
					return root.ID(), rel, nil
				}
			}
		}
	}
	if s.pol != nil {
		return confine.ID{}, "", noRoot(s.pol, path)
	}
	return confine.ID{}, "", fmt.Errorf("%s is not under a root of the policy (give --policy)", path)
}

func (s *versionSource) list(ctx context.Context, path string) ([]versions.Version, error) {
	if s.ctl != nil {
		var out []versions.Version
		err := s.ctl.Versions(ctx, path, &out)
		return out, err
	}
	root, rel, err := s.rootOf(path)
	if err != nil {
		return nil, err
	}
	return s.offline.List(ctx, root, rel)
}

func (s *versionSource) files(ctx context.Context, path string) ([]string, error) {
	if s.ctl != nil {
		return s.ctl.VersionedFiles(ctx, path)
	}
	root, _, err := s.rootOf(path)
	if err != nil {
		return nil, err
	}
	return s.offline.Files(ctx, root)
}

// content returns version n of path.
func (s *versionSource) content(ctx context.Context, path string, n int64) ([]byte, error) {
	if host, hp, ok := mirror.SplitHostPath(path); ok && s.ctl == nil {
		data, _, err := mirror.HostVersion(ctx, s.stateDir, host, hp, n)
		return data, err
	}
	if s.ctl != nil {
		var out daemon.VersionContent
		err := s.ctl.VersionContent(ctx, path, n, &out)
		return out.Content, err
	}
	root, rel, err := s.rootOf(path)
	if err != nil {
		return nil, err
	}
	_, data, err := s.offline.Get(ctx, root, rel, n)
	return data, err
}

// restoreVersion goes through the daemon, or runs here under the state
// lock when none runs.
func (g *globals) restoreVersion(ctx context.Context, req restore.Request) (restore.Result, error) {
	ctl, p, dir, err := g.controlFor()
	if err != nil {
		return restore.Result{}, err
	}
	var res restore.Result
	err = ctl.Restore(ctx, req, &res)
	if !errors.Is(err, control.ErrNoDaemon) {
		return res, err
	}
	err = offlineVersions(dir, p, req.Path, func(rw *rewrite.Rewriter, vs *versions.Store, s *policy.Store, root string) error {
		r, err := s.OpenRoot(root)
		if err != nil {
			return err
		}
		defer r.Close()
		vs.Bind(ctx, r.ID()) // what a restored state holds for this path and owner
		res, err = restore.Version(ctx, rw, vs, r, s.Name, req)
		return err
	})
	return res, err
}

// restoreLost puts back the files of a root that req selects (restore
// --deleted, restore --missing): through the daemon when one runs, else
// here, the same way.
func (g *globals) restoreLost(ctx context.Context, req restore.LostRequest) error {
	ctl, p, dir, err := g.controlFor()
	if err != nil {
		return err
	}
	var res []restore.Result
	err = ctl.RestoreDeleted(ctx, req, &res)
	if errors.Is(err, control.ErrNoDaemon) {
		err = offlineVersions(dir, p, req.Root, func(rw *rewrite.Rewriter, vs *versions.Store, s *policy.Store, rootPath string) error {
			r, err := s.OpenRoot(rootPath)
			if err != nil {
				return err
			}
			defer r.Close()
			vs.Bind(ctx, r.ID()) // what a restored state holds for this path and owner
			lost, err := restore.Lost(ctx, vs, r, req)
			if err != nil {
				return err
			}
			for _, v := range lost {
				one, err := restore.Version(ctx, rw, vs, r, s.Name, restore.Request{Path: filepath.Join(rootPath, v.Path), Version: v.N})
				if err != nil {
					return err
				}
				res = append(res, one)
			}
			return nil
		})
	}
	if err != nil {
		return err
	}
	switch {
	case len(res) > 0:
	case req.Missing:
		fmt.Fprintf(g.Stdout, "every memory file of %s with versions is on disk: nothing to restore\n", req.Root)
	default:
		fmt.Fprintf(g.Stdout, "no memory file of %s was deleted since %s\n", req.Root, req.Since.Local().Format(time.DateTime))
	}
	for _, r := range res {
		printRestore(g, r)
	}
	return nil
}

// offlineVersions runs fn with the state of dir locked (no daemon runs),
// for the store and root of the policy holding path.
func offlineVersions(dir string, p *policy.Policy, path string, fn func(*rewrite.Rewriter, *versions.Store, *policy.Store, string) error) error {
	if p == nil {
		return errors.New("no daemon answered: give --policy so memwatch knows the store of " + path)
	}
	var store *policy.Store
	var root string
	for _, s := range p.Stores {
		for _, r := range s.Roots() {
			if rel, err := filepath.Rel(r, path); err == nil && filepath.IsLocal(rel) || r == path {
				store, root = s, r
			}
		}
	}
	if store == nil {
		return noRoot(p, path)
	}
	if !store.AllowUndo {
		return fmt.Errorf("store %s does not allow undo (allow_undo: false in the policy), and a restore is one", store.Name)
	}
	lock, err := state.TryLock(dir)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	db, err := state.Open(context.Background(), dir)
	if err != nil {
		return err
	}
	defer db.Close()
	vs, err := versions.Open(context.Background(), dir)
	if err != nil {
		return err
	}
	defer vs.Close()
	rw := rewrite.New(db, slog.New(slog.DiscardHandler))
	rw.OpenRoot = daemon.RootOpener(func() *policy.Policy { return p })
	return fn(rw, vs, store, root)
}

// noRoot says why path is under no root of the policy: when a store's
// glob names it (or a directory above it), why memwatch refuses that root
// (a symbolic link on the way, its owner cannot reach it, ...).
func noRoot(p *policy.Policy, path string) error {
	for c := filepath.Clean(path); ; c = filepath.Dir(c) {
		for _, s := range p.Stores {
			if s.MatchesRoot(c) {
				r, err := s.OpenRoot(c)
				if err != nil {
					return fmt.Errorf("%s is no root of store %s: %w", c, s.Name, err)
				}
				r.Close()
			}
		}
		if c == filepath.Dir(c) {
			return fmt.Errorf("%s is not under a root of the policy", path)
		}
	}
}
