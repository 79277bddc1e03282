package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/fleet/hostname"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/versions"
)

// What a central node serves of one host beyond search: the lines a
// citation names, and the versions of its memory files, read from the
// host's replicated databases (the copy holds only the newest version).

// splitCitation splits what recall prints on a central node, a host's
// path (HOST:/whole/path#L5, HOST:/whole/path@3), into the host and the
// path (its citation); ok is false for anything else. The path is one
// line.
func splitCitation(s string) (host, cite string, ok bool) {
	host, cite, found := strings.Cut(s, ":")
	if !found || !hostname.Valid(host) || !strings.HasPrefix(cite, "/") || strings.Contains(cite, "\n") {
		return "", "", false
	}
	return host, cite, true
}

// Show returns the lines a HOST:PATH citation names, from what the
// central node holds of the host: its replicated spool (session lines),
// else the newest version of the memory file. ok is false when the
// citation names no host followed here.
func Show(ctx context.Context, stateDir, cite string) (lines []spool.Shown, host string, ok bool, err error) {
	host, path, ok := splitCitation(strings.TrimSpace(cite))
	if !ok {
		return nil, "", false, nil
	}
	dir := filepath.Join(stateDir, HostsDir, host)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, host, false, nil
	}
	c, err := spool.ParseCitation(path)
	if err != nil {
		return nil, host, true, err
	}
	under := func(key string) (confine.ID, string, bool) {
		id, ok := confine.ParseKey(key)
		if !ok {
			return id, "", false
		}
		rel, err := filepath.Rel(id.Path, filepath.FromSlash(c.Path))
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return id, "", false
		}
		return id, filepath.ToSlash(rel), true
	}
	if sp, err := spool.OpenReadOnly(ctx, dir); err == nil {
		defer sp.Close()
		keys, _ := sp.RootKeys(ctx)
		for _, k := range keys {
			if id, rel, ok := under(k); ok {
				cc := c
				cc.Path = rel
				lines, err := sp.Show(ctx, confine.Detached(id), cc)
				if err == nil {
					return lines, host, true, nil
				}
				if errors.Is(err, spool.ErrNoSuchLine) || ctx.Err() != nil {
					return nil, host, true, fmt.Errorf("show %s: %w", cite, err)
				}
			}
		}
	}
	if vs, err := versions.OpenReadOnly(ctx, dir); err == nil {
		defer vs.Close()
		keys, _ := vs.Roots(ctx)
		for _, k := range keys {
			id, rel, ok := under(k)
			if !ok {
				continue
			}
			list, err := vs.List(ctx, id, rel)
			if err != nil || len(list) == 0 || list[len(list)-1].Deleted() {
				continue
			}
			_, data, err := vs.Get(ctx, id, rel, list[len(list)-1].N)
			if err != nil {
				continue
			}
			all := bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'})
			if c.From > int64(len(all)) {
				return nil, host, true, fmt.Errorf("show %s: L%d is past the end (the file has %d line(s)): %w", cite, c.From, len(all), spool.ErrNoSuchLine)
			}
			for n := c.From; n <= min(c.To, int64(len(all))); n++ {
				lines = append(lines, spool.Shown{Line: n, Data: all[n-1], Source: "version"})
			}
			return lines, host, true, nil
		}
	}
	return nil, host, true, fmt.Errorf("show %s: host %s has no log or memory file %s in what it replicated (%s): %w", cite, host, c.Path, dir, spool.ErrUnknownLog)
}

// CitedPath is a citation without its lines (HOST:/p@3#L5: HOST:/p), or
// the text as it is when it is no citation.
func CitedPath(cite string) string {
	if c, err := spool.ParseCitation(cite); err == nil {
		return c.Path
	}
	return cite
}

// SplitHostPath splits HOST:/path (as recall cites a host's file) into the
// host and the path; ok is false for anything else (a path of this host).
func SplitHostPath(s string) (host, path string, ok bool) {
	host, path, ok = splitCitation(strings.TrimSpace(s))
	if !ok {
		return "", "", false
	}
	return host, filepath.Clean(path), true
}

// fileOf finds the root of a host's versions holding path: its ID and the
// file's path in it (the deepest root holding it).
func fileOf(ctx context.Context, vs *versions.Store, path string) (confine.ID, string, bool) {
	keys, _ := vs.Roots(ctx)
	var best confine.ID
	var bestRel string
	found := false
	for _, k := range keys {
		id, ok := confine.ParseKey(k)
		if !ok {
			continue
		}
		rel, err := filepath.Rel(id.Path, path)
		if err != nil || !filepath.IsLocal(rel) && rel != "." {
			continue
		}
		if !found || len(id.Path) > len(best.Path) {
			best, bestRel, found = id, rel, true
		}
	}
	return best, bestRel, found
}

// HostVersions lists the versions of a host's memory file (a root: its
// files with versions, as rels) from what the central node restored of
// the host; uid is the owner of the root they are in, there.
func HostVersions(ctx context.Context, stateDir, host, path string) (vs []versions.Version, files []string, uid int, err error) {
	st, err := openVersions(ctx, stateDir, host)
	if err != nil {
		return nil, nil, 0, err
	}
	defer st.Close()
	id, rel, ok := fileOf(ctx, st, path)
	if !ok {
		return nil, nil, 0, fmt.Errorf("host %s has no versions of %s: it is not a memory file of a root of that host", host, path)
	}
	if rel == "." {
		files, err = st.Files(ctx, id)
		return nil, files, id.UID, err
	}
	vs, err = st.List(ctx, id, rel)
	return vs, nil, id.UID, err
}

// HostVersion returns version n of a host's memory file, and the uid of
// its root's owner there.
func HostVersion(ctx context.Context, stateDir, host, path string, n int64) ([]byte, int, error) {
	st, err := openVersions(ctx, stateDir, host)
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	id, rel, ok := fileOf(ctx, st, path)
	if !ok || rel == "." {
		return nil, 0, fmt.Errorf("host %s has no versions of %s: it is not a memory file of a root of that host", host, path)
	}
	_, data, err := st.Get(ctx, id, rel, n)
	return data, id.UID, err
}

// HostOwner is the uid that owns, on host, the root a path of it is in
// (-1: none the central node knows of).
func HostOwner(ctx context.Context, stateDir, host, path string) int {
	if st, err := openVersions(ctx, stateDir, host); err == nil {
		defer st.Close()
		if id, _, ok := fileOf(ctx, st, path); ok {
			return id.UID
		}
	}
	if sp, err := spool.OpenReadOnly(ctx, filepath.Join(stateDir, HostsDir, host)); err == nil {
		defer sp.Close()
		keys, _ := sp.RootKeys(ctx)
		for _, k := range keys {
			if id, ok := confine.ParseKey(k); ok {
				if rel, err := filepath.Rel(id.Path, path); err == nil && filepath.IsLocal(rel) {
					return id.UID
				}
			}
		}
	}
	return -1
}

func openVersions(ctx context.Context, stateDir, host string) (*versions.Store, error) {
	if !hostname.Valid(host) {
		return nil, fmt.Errorf("%q is no host name", host)
	}
	dir := filepath.Join(stateDir, HostsDir, host)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("no host %s is followed here (%s): memwatch status lists the hosts", host, dir)
	}
	st, err := versions.OpenReadOnly(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	return st, nil
}
