// Package fleet follows, on a central node, the state other hosts
// replicate to S3-compatible storage. Each host replicates as it always
// does (replicate.url: s3://BUCKET/PREFIX/<host>); the central node's
// policy names the prefix (fleet.url: s3://BUCKET/PREFIX), and the
// Follower finds every host under it, new ones as they appear, restores
// each of a host's state databases into <state>/fleet/<host>/ and follows
// its changes (Litestream's follow mode: the LTX files the host ships are
// applied as they appear; nothing is ever written to the bucket).
//
// A host whose replica is corrupt or half-written (no snapshot yet, a
// history pruned past what was applied) is reported with the reason and
// tried again; it never stops the others. What was restored of a host
// stays when the host stops replicating, or dies.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/fleet/hostname"
	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/replica"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
)

// Dir is where the hosts' state is kept, under the state directory.
const Dir = mirror.HostsDir

// retryAfter is how long a database that could not be followed waits
// before it is tried again.
const retryAfter = 10 * time.Second

// HostStatus is where a central node is with one host (the status
// answer's type).
type HostStatus = control.HostStatus

// Follower follows every host of the fleet.
type Follower struct {
	cfg    *policy.Fleet
	dir    string // <state>/fleet
	log    *slog.Logger
	ak, sk string
	keys   *replica.Keys // the identities that open the hosts' objects
	s3     *s3.Client

	mu    sync.Mutex // guards hosts and refused
	hosts map[string]*host
	// refused are the hosts found past fleet.max_hosts, reported once.
	refused map[string]bool
	wg      sync.WaitGroup
}

// host is one followed host; its goroutines (one per database) set errs.
type host struct {
	name   string
	dir    string
	mu     sync.Mutex // guards errs and copied
	errs   map[string]string
	copied time.Time
	// applying is held while a change is applied to one of the host's
	// databases, and while the copier reads them: Litestream's lock on
	// a database it writes is a POSIX lock, which SQLite connections of
	// the same process do not see.
	applying chan struct{}
}

// lock takes h.applying, unless ctx ends first.
func (h *host) lock(ctx context.Context) bool {
	select {
	case h.applying <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (h *host) unlock() { <-h.applying }

// appliedClient is a replica client that holds its host's applying lock
// from the opening of a change to apply (an LTX file) until it is closed:
// Litestream's follow mode writes the change's pages to the database in
// between. The first restore (into a temporary file, several changes open
// at once) takes no lock: the database is not there yet.
type appliedClient struct {
	litestream.ReplicaClient
	h   *host
	out string // the restored database
	// Higher levels' listings, kept a while: Litestream's follow mode
	// lists every compaction level (1 to 8, each from its start) at every
	// poll that finds no new change, to bridge a gap a compaction could
	// have left; idle, that is nine listings per database per interval
	// instead of one. A gap shows as changes that do not follow on (the
	// listings are then asked again), or, when a compaction removed every
	// change not applied here (the central node stopped a long while),
	// is bridged once the listings are older than higherFor.
	higherFor time.Duration
	mu        sync.Mutex // guards higher and the polls' times
	higher    map[[2]int64]listing
	// Polls of new changes (level 0) are spaced by what is searched and
	// how recently the host changed: each interval while it changes,
	// every second interval once it has been quiet for quietAfter (a new
	// change then waits at most two intervals), every sixth for the
	// journal (memwatch.db, which no search reads). Litestream's follow
	// mode asks at every interval; an answer with nothing new is given
	// without asking the bucket in between.
	interval        time.Duration
	journal         bool
	lastPoll, found time.Time
	skipped         bool // the last level 0 answer was given without asking
}

// quietAfter is how long a host's database has had no new change before
// it is asked half as often.
const quietAfter = time.Minute

// due reports whether level 0 is to be asked now (and notes the ask).
func (c *appliedClient) due(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.found.IsZero() {
		c.found = now
	}
	period := c.interval
	switch {
	case c.journal:
		period = 6 * c.interval
	case now.Sub(c.found) > quietAfter:
		period = 2 * c.interval
	}
	if !c.lastPoll.IsZero() && now.Sub(c.lastPoll) < period-c.interval/2 {
		c.skipped = true
		return false
	}
	c.lastPoll, c.skipped = now, false
	return true
}

type listing struct {
	at    time.Time
	files []*ltx.FileInfo
}

// LTXFiles lists a level's changes; in follow mode a compaction level's
// listing is reused for higherFor.
func (c *appliedClient) LTXFiles(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) (ltx.FileIterator, error) {
	if level >= litestream.SnapshotLevel || c.interval <= 0 {
		return c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	}
	if _, err := os.Stat(c.out); err != nil {
		return c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	}
	if level == 0 {
		now := time.Now()
		if !c.due(now) {
			return ltx.NewFileInfoSliceIterator(nil), nil
		}
		files, err := c.list(ctx, level, seek, useMetadata)
		if err != nil {
			return nil, err
		}
		if len(files) > 0 {
			c.mu.Lock()
			c.found = now
			if files[0].MinTXID > seek {
				c.higher = nil // a gap: bridged from fresh listings
			}
			c.mu.Unlock()
		}
		return ltx.NewFileInfoSliceIterator(files), nil
	}
	c.mu.Lock()
	skipped := c.skipped
	c.mu.Unlock()
	if skipped {
		// Litestream bridges a gap after an answer with nothing new; this
		// one was not the bucket's.
		return ltx.NewFileInfoSliceIterator(nil), nil
	}
	key := [2]int64{int64(level), int64(seek)}
	c.mu.Lock()
	l, ok := c.higher[key]
	c.mu.Unlock()
	if !ok || time.Since(l.at) > c.higherFor {
		files, err := c.list(ctx, level, seek, useMetadata)
		if err != nil {
			return nil, err
		}
		l = listing{at: time.Now(), files: files}
		c.mu.Lock()
		if c.higher == nil {
			c.higher = map[[2]int64]listing{}
		}
		c.higher[key] = l
		c.mu.Unlock()
	}
	return ltx.NewFileInfoSliceIterator(slices.Clone(l.files)), nil
}

// list asks the bucket for a level's changes, read whole.
func (c *appliedClient) list(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) ([]*ltx.FileInfo, error) {
	itr, err := c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	if err != nil {
		return nil, err
	}
	var files []*ltx.FileInfo
	for itr.Next() {
		files = append(files, itr.Item())
	}
	return files, errors.Join(itr.Err(), itr.Close())
}

func (c *appliedClient) OpenLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, offset, size int64) (io.ReadCloser, error) {
	if _, err := os.Stat(c.out); err != nil {
		return c.ReplicaClient.OpenLTXFile(ctx, level, minTXID, maxTXID, offset, size)
	}
	if !c.h.lock(ctx) {
		return nil, ctx.Err()
	}
	rc, err := c.ReplicaClient.OpenLTXFile(ctx, level, minTXID, maxTXID, offset, size)
	if err != nil {
		c.h.unlock()
		return nil, err
	}
	return &unlockOnClose{ReadCloser: rc, h: c.h}, nil
}

type unlockOnClose struct {
	io.ReadCloser
	h    *host
	once sync.Once
}

func (u *unlockOnClose) Close() error {
	err := u.ReadCloser.Close()
	u.once.Do(u.h.unlock)
	return err
}

// New builds a follower keeping the hosts' state under stateDir; nothing
// runs until Run. The credentials are read now: a missing variable or
// file is an error that names it.
func New(cfg *policy.Fleet, stateDir string, logger *slog.Logger) (*Follower, error) {
	ak, sk, err := replica.Credentials(cfg.Host(""))
	if err != nil {
		return nil, err
	}
	replica.UseCABundle(logger)
	keys, err := replica.LoadKeys(&cfg.S3, stateDir, false)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f := &Follower{cfg: cfg, dir: filepath.Join(stateDir, Dir), log: logger, ak: ak, sk: sk, keys: keys, hosts: map[string]*host{}, refused: map[string]bool{}}
	opts := s3.Options{Region: cfg.Region, UsePathStyle: cfg.ForcePathStyle}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	if ak != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(ak, sk, "")
	}
	f.s3 = s3.New(opts)
	return f, nil
}

// Hosts lists the hosts under fleet.url: the prefixes that hold a host's
// state (one of its databases).
func (f *Follower) Hosts(ctx context.Context) ([]string, error) {
	prefix := strings.Trim(f.cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	var out []string
	var token *string
	for {
		res, err := f.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(f.cfg.Bucket), Prefix: aws.String(prefix), Delimiter: aws.String("/"), ContinuationToken: token})
		if err != nil {
			return nil, fmt.Errorf("list the hosts under %s: %w", f.cfg.URL, err)
		}
		for _, p := range res.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(p.Prefix), prefix), "/")
			if hostname.Valid(name) { // a host's directory: one path element
				out = append(out, name)
			}
		}
		if !aws.ToBool(res.IsTruncated) || len(out) > 4*f.cfg.MaxHosts {
			break
		}
		token = res.NextContinuationToken
	}
	sort.Strings(out)
	return out, nil
}

// Run follows the fleet until ctx ends: it looks for hosts now and every
// ten intervals, and follows each one it finds.
func (f *Follower) Run(ctx context.Context) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("make the fleet directory: %w", err)
	}
	f.log.Info("following the fleet", "url", f.cfg.URL, "endpoint", f.cfg.Endpoint, "dir", f.dir)
	tick := time.NewTicker(max(10*f.cfg.Interval, 2*time.Second))
	defer tick.Stop()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.copier(ctx)
	}()
	failing := ""
	for {
		names, err := f.Hosts(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if msg := err.Error(); msg != failing {
				f.log.Warn("cannot list the fleet's hosts; retrying", "err", err)
				failing = msg
			}
		case err == nil:
			if failing != "" {
				f.log.Info("the fleet's bucket answers again", "url", f.cfg.URL)
				failing = ""
			}
			for _, n := range names {
				f.add(ctx, n)
			}
		}
		select {
		case <-ctx.Done():
			f.wg.Wait()
			return nil
		case <-tick.C:
		}
	}
}

// add starts following a host not followed yet.
func (f *Follower) add(ctx context.Context, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hosts[name] != nil || f.refused[name] {
		return
	}
	if len(f.hosts) >= f.cfg.MaxHosts {
		f.refused[name] = true
		f.log.Warn("a host past fleet.max_hosts is not followed; raise it to follow more", "host", name, "max_hosts", f.cfg.MaxHosts)
		return
	}
	h := &host{name: name, dir: filepath.Join(f.dir, name), errs: map[string]string{}, applying: make(chan struct{}, 1)}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		f.log.Warn("cannot keep a host's state", "host", name, "err", err)
		return
	}
	f.hosts[name] = h
	f.log.Info("following a host", "host", name, "url", f.cfg.Host(name).URL)
	for _, db := range replica.Databases {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.follow(ctx, h, db)
		}()
	}
}

// follow restores one database of a host and applies its changes as they
// reach the bucket, until ctx ends; on a failure it says why and starts
// again after retryAfter (anew when what it had cannot be caught up).
func (f *Follower) follow(ctx context.Context, h *host, name string) {
	out := filepath.Join(h.dir, name)
	// A database object only for its logger: a replica without one logs
	// through the process's default logger (Litestream's progress is ours
	// to report). It is never opened.
	quiet := litestream.NewDB(out)
	quiet.Logger = slog.New(discard{})
	for ctx.Err() == nil {
		rep := litestream.NewReplicaWithClient(quiet, &appliedClient{ReplicaClient: replica.NewClient(f.cfg.Host(h.name), name, f.ak, f.sk, f.keys), h: h, out: out,
			higherFor: max(5*time.Minute, 60*f.cfg.Interval), interval: f.cfg.Interval, journal: name == state.FileName})
		opt := litestream.NewRestoreOptions()
		opt.OutputPath = out
		opt.Follow = true
		opt.FollowInterval = f.cfg.Interval
		err := rep.Restore(ctx, opt)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("follow ended")
		}
		reason := err.Error()
		if strings.Contains(reason, "cannot resume follow mode") || strings.Contains(reason, "output path already exists") {
			// What was applied cannot be caught up (the history was
			// pruned, the host started anew): restored again, whole.
			os.Remove(out)
			os.Remove(out + "-txid")
			os.Remove(out + ".tmp")
		}
		if h.setErr(name, reason) {
			if strings.Contains(reason, "no snapshots") || strings.Contains(reason, "no backups") || strings.Contains(reason, "no matching backup") {
				f.log.Debug("a host has no replica of a database yet", "host", h.name, "db", name)
			} else {
				f.log.Warn("cannot follow a host's database; skipped, tried again", "host", h.name, "db", name, "err", reason)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryAfter):
		}
	}
}

// setErr records why a database is not followed ("": it is again); it
// reports whether the reason is new.
func (h *host) setErr(db, reason string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs[db] == reason {
		return false
	}
	if reason == "" {
		delete(h.errs, db)
	} else {
		h.errs[db] = reason
	}
	return true
}

// copyCheck is how often the copier looks for a host's new changes (a
// stat of two files per host: Litestream writes a database's -txid file
// after each change it applies).
func copyCheck(interval time.Duration) time.Duration {
	return min(max(interval/4, 100*time.Millisecond), time.Second)
}

// copier keeps each host's searchable copy (mirror) up to date with what
// was restored of it: when a host's spool or versions changed, what they
// hold that the copy does not is copied and indexed. This goroutine alone
// owns the copies and what it last saw of each host.
func (f *Follower) copier(ctx context.Context) {
	copies := map[string]*mirror.Copy{}
	seen := map[string]string{}
	outOfBounds := map[string]bool{}
	defer func() {
		for _, c := range copies {
			c.Close()
		}
	}()
	tick := time.NewTicker(copyCheck(f.cfg.Interval))
	defer tick.Stop()
	for {
		f.mu.Lock()
		hosts := make([]*host, 0, len(f.hosts))
		for _, h := range f.hosts {
			hosts = append(hosts, h)
		}
		f.mu.Unlock()
		sort.Slice(hosts, func(i, j int) bool { return hosts[i].name < hosts[j].name })
		for _, h := range hosts {
			stamp := changeStamp(h.dir)
			if stamp == "" || stamp == seen[h.name] || ctx.Err() != nil {
				continue
			}
			c := copies[h.name]
			if c == nil {
				var err error
				if c, err = mirror.New(h.name, h.dir, f.log); err != nil {
					if h.setErr("copy", err.Error()) {
						f.log.Warn("cannot keep a host's searchable copy", "host", h.name, "err", err)
					}
					continue
				}
				copies[h.name] = c
			}
			start := time.Now()
			if !h.lock(ctx) {
				return
			}
			st, err := c.Update(ctx)
			h.unlock()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// Tried again at the next change; said once.
				if h.setErr("copy", err.Error()) {
					f.log.Warn("cannot copy a host's changes; its copy stays as it was", "host", h.name, "err", err)
				}
				seen[h.name] = stamp
				continue
			}
			h.setErr("copy", "")
			seen[h.name] = stamp
			h.mu.Lock()
			h.copied = time.Now()
			h.mu.Unlock()
			if st.Skipped > 0 && !outOfBounds[h.name] {
				outOfBounds[h.name] = true // said once a host
				f.log.Warn("some of a host's memory is not copied for search: out of bounds (a name leaving its root, a line over 16 MiB, a file over 256 MiB, or a line number far past the last)", "host", h.name, "skipped", st.Skipped)
			}
			if st.Lines > 0 || st.Files > 0 || st.Skipped > 0 {
				f.log.Debug("copied a host's changes", "host", h.name, "lines", st.Lines, "files", st.Files, "indexed", st.Indexed, "skipped", st.Skipped, "took", time.Since(start).Round(time.Millisecond))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// changeStamp says how a host's spool and versions are now on disk (""
// before either is restored): it changes with every change applied.
func changeStamp(dir string) string {
	var b strings.Builder
	for _, db := range []string{spool.FileName, versions.FileName} {
		for _, p := range []string{db, db + "-txid"} {
			if fi, err := os.Stat(filepath.Join(dir, p)); err == nil {
				fmt.Fprintf(&b, "%s %d %d;", p, fi.Size(), fi.ModTime().UnixNano())
			}
		}
	}
	return b.String()
}

// Status is what the central node knows of each host: what it restored
// (from disk), and how far behind the bucket it is (asked of the bucket,
// at most once per call, with ctx's deadline).
func (f *Follower) Status(ctx context.Context) []HostStatus {
	f.mu.Lock()
	hosts := make([]*host, 0, len(f.hosts))
	for _, h := range f.hosts {
		hosts = append(hosts, h)
	}
	f.mu.Unlock()
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].name < hosts[j].name })
	var out []HostStatus
	now := time.Now()
	for _, h := range hosts {
		st := Local(h.dir)
		st.Host = h.name
		h.mu.Lock()
		st.Copied = h.copied
		h.mu.Unlock()
		var newest time.Time
		var behind bool
		var oldestWaiting time.Time
		checked := true
		for _, db := range replica.Databases {
			applied, _ := litestream.ReadTXIDFile(filepath.Join(h.dir, db))
			client := replica.NewClient(f.cfg.Host(h.name), db, f.ak, f.sk, f.keys)
			info, err := maxLTX(ctx, client)
			if err != nil {
				checked = false
				continue
			}
			if info.CreatedAt.After(newest) {
				newest = info.CreatedAt
			}
			if info.MaxTXID > applied && db != state.FileName {
				// (The journal is asked less often, and searched not at
				// all: its lag is not the host's.)
				behind = true
				if w, err := firstAfter(ctx, client, applied); err == nil && (oldestWaiting.IsZero() || w.Before(oldestWaiting)) {
					oldestWaiting = w
				}
			}
		}
		if checked {
			st.Checked = now
			if behind && !oldestWaiting.IsZero() {
				st.Lag = max(0, now.Sub(oldestWaiting).Seconds())
			}
			st.Stopped = !newest.IsZero() && now.Sub(newest) > f.cfg.StoppedAfter
		}
		h.mu.Lock()
		var errs []string
		for db, e := range h.errs {
			if _, err := os.Stat(filepath.Join(h.dir, db)); err != nil || !strings.Contains(e, "no snapshots") {
				errs = append(errs, db+": "+e)
			}
		}
		h.mu.Unlock()
		sort.Strings(errs)
		st.Error = strings.Join(errs, "; ")
		out = append(out, st)
	}
	return out
}

// Local is what is restored of a host in dir, from disk alone (for the
// CLI, without the daemon).
func Local(dir string) HostStatus {
	st := HostStatus{Host: filepath.Base(dir), Dir: dir}
	for _, db := range replica.Databases {
		fi, err := os.Stat(filepath.Join(dir, db))
		if err != nil {
			continue
		}
		st.Databases = append(st.Databases, db)
		st.Bytes += fi.Size()
		if t, err := os.Stat(filepath.Join(dir, db) + "-txid"); err == nil && t.ModTime().After(st.LastChange) {
			st.LastChange = t.ModTime()
		}
	}
	return st
}

// maxLTX is the newest LTX file of a database in the bucket, across levels.
func maxLTX(ctx context.Context, c litestream.ReplicaClient) (ltx.FileInfo, error) {
	var best ltx.FileInfo
	for level := 0; level <= litestream.SnapshotLevel; level++ {
		it, err := c.LTXFiles(ctx, level, 0, false)
		if err != nil {
			return best, err
		}
		for it.Next() {
			if i := it.Item(); i.MaxTXID > best.MaxTXID {
				best = *i
			}
		}
		if err := it.Close(); err != nil {
			return best, err
		}
	}
	return best, nil
}

// firstAfter is when the first change after txid reached the bucket.
func firstAfter(ctx context.Context, c litestream.ReplicaClient, txid ltx.TXID) (time.Time, error) {
	it, err := c.LTXFiles(ctx, 0, txid+1, false)
	if err != nil {
		return time.Time{}, err
	}
	defer it.Close()
	for it.Next() {
		if i := it.Item(); i.MaxTXID > txid {
			return i.CreatedAt, nil
		}
	}
	return time.Time{}, it.Err()
}

// discard drops Litestream's own logs: what a follower does is reported
// by Follow's errors and Status.
type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return false }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }
