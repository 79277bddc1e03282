// Package replica copies memwatch's state databases (the journal, the
// spool, the versions) to S3-compatible object storage as they change, and
// restores them on a new host. It is Litestream, used as a library: each
// database's WAL is shipped as LTX files a fraction of a second behind,
// snapshotted and compacted in the bucket, and a restore rebuilds the
// database from them. The recall index is not replicated: it is rebuilt
// from the files and the spool.
//
// An unreachable bucket never stops memwatch: the databases keep being
// written, Litestream keeps the changes locally and retries, and the
// Replicator logs one WARN per outage with its cause, probes the bucket
// every second while it lasts and catches up as soon as it answers.
package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/s3"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/policy"
)

// Databases are the state databases replicated, by file name in the state
// directory (state.Open, spool.Open, versions.Open).
var Databases = []string{"memwatch.db", "spool.db", "versions.db"}

// Status is how the replication is doing (the status answer's type).
type Status = control.ReplicaStatus

// Replicator replicates the state databases of one state directory.
type Replicator struct {
	cfg    *policy.Replicate
	dir    string
	log    *slog.Logger
	now    func() time.Time
	secret []string // the credentials, never to be logged

	dbs   []*litestream.DB
	store *litestream.Store
	probe *http.Client
	keys  *Keys // nil: the objects are written in the clear

	mu     sync.Mutex // guards st and the outage fields below
	st     Status
	failed chan string // failures reported by Litestream's logger
	// onFail, when set, counts a failure (the daemon's metric).
	onFail func()
}

// New builds a replicator for the state directory dir; nothing runs until
// Run. The credentials are read now: a missing variable or file is an
// error that names it.
func New(cfg *policy.Replicate, dir string, logger *slog.Logger) (*Replicator, error) {
	ak, sk, err := Credentials(cfg)
	if err != nil {
		return nil, err
	}
	keys, err := LoadKeys(&cfg.S3, dir, true)
	if err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	UseCABundle(logger)
	r := &Replicator{cfg: cfg, dir: dir, log: logger, now: time.Now, failed: make(chan string, 64), keys: keys,
		probe: &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for _, s := range []string{ak, sk} {
		if s != "" {
			r.secret = append(r.secret, s)
		}
	}
	r.st = Status{URL: cfg.URL, Endpoint: cfg.Endpoint, Bytes: -1}
	// Litestream's own logs go through a handler that turns its errors
	// into one WARN per outage (and drops the rest: its progress is ours
	// to report).
	lsLog := slog.New(&failureHandler{r: r})
	for _, name := range Databases {
		db := litestream.NewDB(filepath.Join(dir, name))
		db.MonitorInterval = 0 // upload syncs the WAL when it changed
		rep := litestream.NewReplicaWithClient(db, r.client(name, ak, sk))
		rep.SyncInterval = cfg.SyncInterval
		// Uploads are ours (upload): woken by new data, never polling an
		// idle bucket, never backing off for minutes.
		rep.MonitorEnabled = false
		db.Replica = rep
		r.dbs = append(r.dbs, db)
	}
	levels := litestream.CompactionLevels{
		{Level: 0},
		{Level: 1, Interval: 30 * time.Second},
		{Level: 2, Interval: 5 * time.Minute},
		{Level: 3, Interval: time.Hour},
	}
	r.store = litestream.NewStore(r.dbs, levels)
	// NewStore gave every database the default logger: ours instead.
	r.store.Logger = lsLog
	for _, db := range r.dbs {
		db.SetLogger(lsLog.With("db", filepath.Base(db.Path())))
	}
	r.store.SnapshotInterval = min(cfg.SnapshotInterval, cfg.Retention/2)
	r.store.SnapshotRetention = cfg.Retention
	r.store.SetRetentionEnabled(true)
	r.store.SetShutdownSyncTimeout(2 * time.Second)
	return r, nil
}

// SetOnFail sets what is called on each failed sync (a metric).
func (r *Replicator) SetOnFail(fn func()) { r.onFail = fn }

// client is the S3 client of one database: its objects under PREFIX/name.
func (r *Replicator) client(name, ak, sk string) litestream.ReplicaClient {
	return NewClient(r.cfg, name, ak, sk, r.keys)
}

// NewClient is the S3 client of one state database; with keys, what it
// writes is encrypted and what it reads decrypted (age.go).
func NewClient(cfg *policy.Replicate, name, ak, sk string, keys *Keys) litestream.ReplicaClient {
	c := s3.NewReplicaClient()
	c.Bucket = cfg.Bucket
	c.Path = path.Join(cfg.Prefix, name)
	c.Region = cfg.Region
	c.Endpoint = cfg.Endpoint
	c.ForcePathStyle = cfg.ForcePathStyle
	c.AccessKeyID, c.SecretAccessKey = ak, sk
	if keys == nil {
		return c
	}
	return newAgeClient(c, cfg, ak, sk, keys)
}

// UseCABundle hands AWS_CA_BUNDLE to Go's TLS instead of the AWS SDK:
// with it set, the SDK refuses the HTTP client Litestream gives it
// ("unable to add custom RootCAs HTTPClient"), and replication could not
// start. Go reads the certificates of SSL_CERT_FILE (when no other names
// them) the first time it verifies one, so this runs before any.
func UseCABundle(logger *slog.Logger) {
	bundle := os.Getenv("AWS_CA_BUNDLE")
	if bundle == "" {
		return
	}
	os.Unsetenv("AWS_CA_BUNDLE")
	if os.Getenv("SSL_CERT_FILE") == "" {
		os.Setenv("SSL_CERT_FILE", bundle)
		logger.Info("replicate: the certificates of AWS_CA_BUNDLE are trusted through SSL_CERT_FILE", "file", bundle)
		return
	}
	logger.Info("replicate: AWS_CA_BUNDLE is left to SSL_CERT_FILE, which names the certificates to trust", "ignored", bundle, "ssl_cert_file", os.Getenv("SSL_CERT_FILE"))
}

// Credentials reads the access key id and secret the policy names: from
// the environment or from files only root (0600) may read. Both empty: the
// AWS SDK's default chain.
func Credentials(cfg *policy.Replicate) (ak, sk string, err error) {
	read := func(env, file, what string) (string, error) {
		switch {
		case env != "":
			v := os.Getenv(env)
			if v == "" {
				return "", fmt.Errorf("replicate: %s names the environment variable %s, which is not set (for the service: its EnvironmentFile)", what+"_env", env)
			}
			return v, nil
		case file != "":
			fi, err := os.Stat(file)
			if err != nil {
				return "", fmt.Errorf("replicate: read %s: %w", what+"_file", err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				return "", fmt.Errorf("replicate: %s %s is readable by group or others (mode %04o); run chmod 600 %s", what+"_file", file, fi.Mode().Perm(), file)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return "", fmt.Errorf("replicate: read %s: %w", what+"_file", err)
			}
			return strings.TrimSpace(string(b)), nil
		}
		return "", nil
	}
	if ak, err = read(cfg.AccessKeyEnv, cfg.AccessKeyFile, "access_key"); err != nil {
		return "", "", err
	}
	if sk, err = read(cfg.SecretKeyEnv, cfg.SecretKeyFile, "secret_key"); err != nil {
		return "", "", err
	}
	return ak, sk, nil
}

// Run replicates until ctx is done, then sends what is left (for at most
// two seconds) and closes. A refused endpoint (it redirects) stops only
// the replication: Run logs why and returns nil.
func (r *Replicator) Run(ctx context.Context) error {
	if why := r.checkEndpoint(ctx); why != "" {
		r.mu.Lock()
		r.st.Refused = why
		r.mu.Unlock()
		r.log.Error("replication refused; memwatch runs without it", "url", r.cfg.URL, "why", why)
		return nil
	}
	if err := r.store.Open(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		r.mu.Lock()
		r.st.Refused = r.redact(err.Error())
		r.mu.Unlock()
		r.log.Error("replication could not start; memwatch runs without it", "url", r.cfg.URL, "err", r.redact(err.Error()))
		return nil
	}
	r.log.Info("replicating the state", "url", r.cfg.URL, "endpoint", r.cfg.Endpoint, "databases", strings.Join(Databases, ","), "sync_interval", r.cfg.SyncInterval, "retention", r.cfg.Retention)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		if err := r.store.Close(context.Background()); err != nil {
			r.log.Warn("close replication", "err", r.redact(err.Error()))
		}
	}()
	for _, db := range r.dbs {
		wg.Go(func() { r.upload(ctx, db) })
	}
	r.monitor(ctx)
	return nil
}

// maxRetry bounds the wait between two tries of an upload that failed:
// the bucket is caught up with within seconds of its return.
const maxRetry = 2 * time.Second

// upload ships one database: once a sync interval it looks at the WAL's
// size and time (one stat: idle, that is all it does), and when the WAL
// changed has Litestream turn the new frames into LTX files and send them.
// Litestream's own loops would read every WAL and poll the bucket each
// interval, and back off for minutes after a failure; a failure here is
// reported to the monitor and tried again within maxRetry.
func (r *Replicator) upload(ctx context.Context, db *litestream.DB) {
	tick := time.NewTicker(r.cfg.SyncInterval)
	defer tick.Stop()
	var seen walStamp
	var backoff time.Duration
	var next time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if st := stampOf(db.WALPath()); st != seen {
			if err := db.Sync(ctx); err != nil {
				if ctx.Err() == nil {
					r.report(fmt.Sprintf("read the WAL of %s: %v", filepath.Base(db.Path()), err))
				}
				continue
			}
			seen = st
		}
		lp, err := db.Pos()
		if err != nil || lp.TXID == 0 || lp.TXID <= db.Replica.Pos().TXID || time.Now().Before(next) {
			continue
		}
		if err := db.Replica.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.report(err.Error())
			backoff = min(max(2*backoff, r.cfg.SyncInterval), maxRetry)
			next = time.Now().Add(backoff)
			continue
		}
		backoff, next = 0, time.Time{}
	}
}

// report hands a failure to the monitor (which logs one per outage).
func (r *Replicator) report(cause string) {
	select {
	case r.failed <- r.redact(cause):
	default: // the monitor has enough to say there is an outage
	}
}

// walStamp is what says a WAL changed: its size and time.
type walStamp struct{ size, mtime int64 }

func stampOf(path string) walStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return walStamp{}
	}
	return walStamp{fi.Size(), fi.ModTime().UnixNano()}
}

// Status returns the replication's status now.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.Behind = append([]string(nil), r.st.Behind...)
	return st
}

// monitor owns the outage state: it measures the lag, notices failures
// (from Litestream's logger, through r.failed), probes the bucket while it
// is unreachable and sends what waited as soon as it answers, and counts
// the bucket's bytes now and then.
func (r *Replicator) monitor(ctx context.Context) {
	// Every second when all is sent (idle, it reads three positions in
	// memory), four times a second while something waits.
	const slow, fast = time.Second, 250 * time.Millisecond
	tick := time.NewTicker(slow)
	defer tick.Stop()
	period := slow
	var behindSince time.Time
	var outage string
	var outageSince, lastProbe, lastCount time.Time
	var failures int64
	var counted [2]int64 // the remote positions summed, at the last count
	for {
		select {
		case <-ctx.Done():
			return
		case cause := <-r.failed:
			failures++
			if r.onFail != nil {
				r.onFail()
			}
			if outage == "" {
				outage, outageSince = cause, r.now()
				r.log.Warn("replication is failing; memwatch keeps working and retries until the bucket answers", "url", r.cfg.URL, "cause", cause)
			}
		case <-tick.C:
		}
		now := r.now()
		var behind []string
		var local, remote int64
		for i, db := range r.dbs {
			lp, err := db.Pos()
			if err != nil {
				continue
			}
			rp := db.Replica.Pos()
			local += int64(lp.TXID)
			remote += int64(rp.TXID)
			if lp.TXID > rp.TXID {
				behind = append(behind, Databases[i])
			}
		}
		switch {
		case len(behind) > 0 && behindSince.IsZero():
			behindSince = now
		case len(behind) == 0:
			behindSince = time.Time{}
		}
		if outage != "" && now.Sub(lastProbe) >= time.Second {
			// Litestream backs off up to minutes between retries: once the
			// bucket answers again, send what waited now.
			lastProbe = now
			if r.reachable(ctx) {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				ok := true
				for _, db := range r.dbs {
					if err := db.Replica.Sync(sctx); err != nil {
						ok = false
						break
					}
				}
				cancel()
				if ok {
					r.log.Info("replication caught up", "url", r.cfg.URL, "outage", now.Sub(outageSince).Round(time.Second), "failures", failures)
					outage = ""
					behind = nil
					behindSince = time.Time{}
				}
			}
		}
		if outage == "" && (lastCount.IsZero() || now.Sub(lastCount) >= time.Minute && counted != [2]int64{local, remote}) {
			// The bucket's bytes, listed now and then (not when idle).
			if n, err := r.bucketBytes(ctx); err == nil {
				lastCount, counted = now, [2]int64{local, remote}
				r.mu.Lock()
				r.st.Bytes, r.st.Counted = n, now
				r.mu.Unlock()
			}
		}
		if want := map[bool]time.Duration{true: fast, false: slow}[len(behind) > 0 || outage != ""]; want != period {
			period = want
			tick.Reset(period)
		}
		r.mu.Lock()
		r.st.Failures, r.st.Outage, r.st.Since = failures, outage, outageSince
		if outage == "" {
			r.st.Since = time.Time{}
		}
		r.st.Behind, r.st.Pending = behind, len(behind) > 0
		r.st.Lag = 0
		if !behindSince.IsZero() {
			r.st.Lag = now.Sub(behindSince).Seconds()
		} else {
			r.st.LastSync = now
		}
		r.mu.Unlock()
	}
}

// bucketBytes sums the sizes of the objects the state has in the bucket.
func (r *Replicator) bucketBytes(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var total int64
	for _, db := range r.dbs {
		c := db.Replica.Client
		for level := 0; level <= litestream.SnapshotLevel; level++ {
			it, err := c.LTXFiles(ctx, level, 0, false)
			if err != nil {
				return 0, err
			}
			for it.Next() {
				total += it.Item().Size
			}
			err = it.Close()
			if err != nil {
				return 0, err
			}
		}
	}
	return total, nil
}

// checkEndpoint refuses an endpoint that redirects (as the LLM endpoints
// are refused): requests signed for one host would go to another. It
// returns why, or "" (an unreachable endpoint is an outage, not a refusal).
func (r *Replicator) checkEndpoint(ctx context.Context) string {
	if r.cfg.Endpoint == "" {
		return ""
	}
	resp, err := r.get(ctx)
	if err != nil {
		return ""
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return fmt.Sprintf("replicate.endpoint %s redirects (%s to %q): point it at the S3 server itself", r.cfg.Endpoint, resp.Status, resp.Header.Get("Location"))
	}
	return ""
}

// reachable reports that the bucket's server answers (any HTTP answer but
// a redirect or a 5xx: an unsigned request is refused, and that is an
// answer).
func (r *Replicator) reachable(ctx context.Context) bool {
	if r.cfg.Endpoint == "" {
		return true // AWS: let the next sync tell
	}
	resp, err := r.get(ctx)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode < 300 || resp.StatusCode >= 400 && resp.StatusCode < 500
}

func (r *Replicator) get(ctx context.Context) (*http.Response, error) {
	u := r.cfg.Endpoint + "/" + r.cfg.Bucket
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return nil, err
	}
	return r.probe.Do(req)
}

// redact removes the credentials from a text (an error of the SDK).
func (r *Replicator) redact(s string) string {
	for _, sec := range r.secret {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	return s
}

// failureHandler receives Litestream's logs: its errors are failures the
// monitor counts (and logs once per outage); the rest is dropped.
type failureHandler struct {
	r     *Replicator
	attrs []slog.Attr
}

func (h *failureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *failureHandler) Handle(_ context.Context, rec slog.Record) error {
	cause := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" || a.Key == "err" {
			cause = a.Value.String()
			return false
		}
		return true
	})
	cause = h.r.redact(cause)
	select {
	case h.r.failed <- cause:
	default: // the monitor has enough to say there is an outage
	}
	return nil
}

func (h *failureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &failureHandler{r: h.r, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *failureHandler) WithGroup(string) slog.Handler { return h }

// ErrNotEmpty is returned by Restore for a state directory that holds
// databases already.
var ErrNotEmpty = errors.New("the state directory is not empty")

// Restored is what Restore did for one database.
type Restored struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	Found bool   `json:"found"` // false: the bucket had nothing of it
}

// Restore rebuilds the state databases of dir from the bucket. It refuses
// a directory that holds any of them unless force; each is restored into
// a temporary file renamed into place, so an interrupted restore leaves
// no half database behind.
func Restore(ctx context.Context, cfg *policy.Replicate, dir string, force bool, logger *slog.Logger) ([]Restored, error) {
	ak, sk, err := Credentials(cfg)
	if err != nil {
		return nil, err
	}
	UseCABundle(logger)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if len(entries) > 0 && !force {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return nil, fmt.Errorf("restore into %s: %w (%s); give --force to replace its databases, or an empty --state-dir", dir, ErrNotEmpty, strings.Join(names, ", "))
	}
	keys, err := LoadKeys(&cfg.S3, dir, false)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	var out []Restored
	for _, name := range Databases {
		c := NewClient(cfg, name, ak, sk, keys)
		if err := c.Init(ctx); err != nil {
			return out, fmt.Errorf("restore %s: %w", name, err)
		}
		rep := litestream.NewReplicaWithClient(nil, c)
		opt := litestream.NewRestoreOptions()
		tmp := filepath.Join(dir, "."+name+".restoring")
		os.Remove(tmp)
		opt.OutputPath = tmp
		if err := rep.Restore(ctx, opt); err != nil {
			os.Remove(tmp)
			if errors.Is(err, litestream.ErrTxNotAvailable) || errors.Is(err, litestream.ErrNoSnapshots) {
				out = append(out, Restored{Name: name})
				continue
			}
			return out, fmt.Errorf("restore %s from %s: %w", name, cfg.URL, err)
		}
		final := filepath.Join(dir, name)
		for _, suffix := range []string{"-wal", "-shm"} {
			os.Remove(final + suffix)
		}
		// Litestream's local state of the old database would not match.
		os.RemoveAll(filepath.Join(dir, "."+name+"-litestream"))
		if err := os.Chmod(tmp, 0o600); err != nil {
			return out, err
		}
		if err := os.Rename(tmp, final); err != nil {
			return out, err
		}
		fi, _ := os.Stat(final)
		out = append(out, Restored{Name: name, Bytes: fi.Size(), Found: true})
		logger.Info("restored a state database", "name", name, "bytes", fi.Size(), "from", cfg.URL)
	}
	return out, nil
}
