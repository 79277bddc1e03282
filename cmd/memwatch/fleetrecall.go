package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/versions"
)

// fleetDir is where a central node keeps the hosts' state (fleet.Dir; the
// fleet package itself is the daemon's: it brings the S3 client, which
// the lean recall does without).
const fleetDir = "fleet"

var fleetHostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// fleetSearch is what a central node searches of the hosts it follows:
// each root a host captured memory in, as a Detached root (its files are
// on the host), read from the host's replicated spool (session lines)
// and versions (the memory files, as their newest version). Until the
// central node indexes them, a search reads the lines themselves (each
// log newest first, the hosts in name order), at most maxFleetBytes.
type fleetSearch struct {
	roots []recall.Root
	held  map[*confine.Root]func(ctx context.Context, fn func(rel string, gen, line int64, raw []byte) error) error
	close []func() error
	read  int64 // bytes of lines given to the search
	cut   bool  // maxFleetBytes reached: older lines were not searched
}

// maxFleetBytes bounds the lines one search reads of the hosts' state (a
// ranked search holds what it reads in memory).
const maxFleetBytes = 256 << 20

// openFleet opens the state of every host followed under stateDir; a
// host whose databases cannot be read is left out (the daemon reports it).
func openFleet(ctx context.Context, stateDir string) *fleetSearch {
	fs := &fleetSearch{held: map[*confine.Root]func(context.Context, func(string, int64, int64, []byte) error) error{}}
	// add makes a root of host for each key, read by each.
	add := func(host, label string, keys []string, each func(id confine.ID, fn func(string, int64, int64, []byte) error) error) {
		for _, k := range keys {
			id, ok := confine.ParseKey(k)
			if !ok {
				continue
			}
			r := confine.Detached(id)
			fs.roots = append(fs.roots, recall.Root{Root: r, Sources: []recall.Source{{Kind: recall.Log, Label: label}}, Name: filepath.Base(id.Path), Host: host})
			fs.held[r] = func(ctx context.Context, fn func(string, int64, int64, []byte) error) error { return each(id, fn) }
		}
	}
	ents, _ := os.ReadDir(filepath.Join(stateDir, fleetDir))
	for _, e := range ents {
		if !e.IsDir() || !fleetHostName.MatchString(e.Name()) {
			continue
		}
		host, dir := e.Name(), filepath.Join(stateDir, fleetDir, e.Name())
		if sp, err := spool.OpenReadOnly(ctx, dir); err == nil {
			fs.close = append(fs.close, sp.Close)
			keys, _ := sp.RootKeys(ctx)
			add(host, "messages", keys, func(id confine.ID, fn func(string, int64, int64, []byte) error) error {
				return sp.Captured(ctx, id, func(h spool.HeldLine) error { return fn(h.Path, h.Gen, h.Line, h.Data) })
			})
		}
		if vs, err := versions.OpenReadOnly(ctx, dir); err == nil {
			fs.close = append(fs.close, vs.Close)
			keys, _ := vs.Roots(ctx)
			add(host, "memory", keys, func(id confine.ID, fn func(string, int64, int64, []byte) error) error {
				return newestLines(ctx, vs, id, fn)
			})
		}
	}
	sort.SliceStable(fs.roots, func(i, j int) bool { return fs.roots[i].Host < fs.roots[j].Host })
	return fs
}

// newestLines calls fn with each line of the newest version of each
// memory file of root (a file deleted last is left out).
func newestLines(ctx context.Context, vs *versions.Store, id confine.ID, fn func(rel string, gen, line int64, raw []byte) error) error {
	files, err := vs.Files(ctx, id)
	if err != nil {
		return err
	}
	for _, rel := range files {
		list, err := vs.List(ctx, id, rel)
		if err != nil || len(list) == 0 {
			continue
		}
		last := list[len(list)-1]
		if last.Deleted() {
			continue
		}
		_, data, err := vs.Get(ctx, id, rel, last.N)
		if err != nil {
			continue
		}
		for i, l := range bytes.Split(data, []byte{'\n'}) {
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			if err := fn(rel, 1, int64(i+1), l); err != nil {
				return err
			}
		}
	}
	return nil
}

// Held is recall.Options.Held for the fleet's roots, and local for the rest.
func (fs *fleetSearch) Held(local func(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error) func(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error {
	return func(ctx context.Context, root *confine.Root, fn func(rel string, gen, line int64, raw []byte) error) error {
		if h, ok := fs.held[root]; ok {
			err := h(ctx, func(rel string, gen, line int64, raw []byte) error {
				if fs.read += int64(len(raw)); fs.read > maxFleetBytes {
					fs.cut = true
					return errFleetCut
				}
				return fn(rel, gen, line, raw)
			})
			if errors.Is(err, errFleetCut) {
				return nil
			}
			return err
		}
		if local == nil {
			return nil
		}
		return local(ctx, root, fn)
	}
}

var errFleetCut = errors.New("fleet search bound reached")

// Close closes the hosts' databases.
func (fs *fleetSearch) Close() {
	for _, c := range fs.close {
		c()
	}
}

// fleetCitation matches a citation recall prints on a central node:
// HOST:/whole/path#L5.
var fleetCitation = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(/.*)$`)

// showFleet returns the lines a HOST:PATH citation names, from what the
// central node holds of the host: its replicated spool (session lines),
// else the newest version of the memory file. ok is false when the
// citation names no host followed here.
func showFleet(ctx context.Context, stateDir, cite string) (lines []spool.Shown, host string, ok bool, err error) {
	m := fleetCitation.FindStringSubmatch(strings.TrimSpace(cite))
	if m == nil {
		return nil, "", false, nil
	}
	host = m[1]
	dir := filepath.Join(stateDir, fleetDir, host)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, host, false, nil
	}
	c, err := spool.ParseCitation(m[2])
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
				if lines, err := sp.Show(ctx, confine.Detached(id), cc); err == nil {
					return lines, host, true, nil
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
			all := bytes.Split(data, []byte{'\n'})
			for n := c.From; n <= c.To; n++ {
				if n <= int64(len(all)) {
					lines = append(lines, spool.Shown{Line: n, Data: all[n-1], Source: "version"})
				} else {
					lines = append(lines, spool.Shown{Line: n, Source: "missing"})
				}
			}
			return lines, host, true, nil
		}
	}
	return nil, host, true, fmt.Errorf("show %s: host %s has no log or memory file %s in what it replicated (%s): %w", cite, host, c.Path, dir, spool.ErrUnknownLog)
}
