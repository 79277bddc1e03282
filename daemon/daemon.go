// Package daemon wires memwatch together: the watcher hands settled changes
// to an evaluation job per root, the job engine runs each layout rule that
// has work, rules rewrite files only through the rewrite package, and the
// journal records it. It also runs the scheduler and the control API.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/background"
	"github.com/memwatch/memwatch/capture"
	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/fleet"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/loglimit"
	"github.com/memwatch/memwatch/metrics"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/prune"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/replica"
	"github.com/memwatch/memwatch/restore"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/schedule"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/share"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
	"github.com/memwatch/memwatch/versions"
	"github.com/memwatch/memwatch/watcher"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ruleEvaluate is the job that asks every rule of a root what needs work.
const ruleEvaluate = "evaluate"

// Config configures a Daemon.
type Config struct {
	Policy     *policy.Policy
	PolicyPath string // reloaded on SIGHUP
	// PolicyStamp is control.PolicyStamp of PolicyPath taken before
	// Policy was loaded from it ("": not known).
	PolicyStamp string
	StateDir    string
	Socket      string // control socket path
	Version     string
	// Notify sends a systemd notification (READY=1, RELOADING=1, ...); may be nil.
	Notify func(string)
	// Watchdog is systemd's WatchdogSec (from WATCHDOG_USEC); 0 when off.
	// The daemon pings at half of it, and only while its loops answer.
	Watchdog time.Duration
}

// ErrUnsupportedLayout is returned for a store whose layout this build does not implement.
var ErrUnsupportedLayout = errors.New("layout not supported by this build")

// LayoutFor returns the implementation of a layout.
func LayoutFor(name string) (layout.Layout, error) {
	if l, ok := registry.For(name); ok {
		return l, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupportedLayout, name)
}

// storeRT is a store with its layout and environment.
type storeRT struct {
	store  *policy.Store
	layout layout.Layout
	env    *layout.Env
	rules  map[string]layout.Rule
}

// captured is the store as capture's tasks see it.
func (rt *storeRT) captured() capture.Store {
	return capture.Store{Policy: rt.store, Layout: rt.layout, Env: rt.env}
}

// captureStore is a store by name, for capture's tasks.
func (d *Daemon) captureStore(name string) (capture.Store, bool) {
	rt := d.store(name)
	if rt == nil {
		return capture.Store{}, false
	}
	return rt.captured(), true
}

// captureStoresOf are the stores root is a root of, for capture.
func (d *Daemon) captureStoresOf(root string) []capture.Store {
	var out []capture.Store
	for _, rt := range d.storesOf(root) {
		out = append(out, rt.captured())
	}
	return out
}

// Daemon is a running memwatch.
type Daemon struct {
	cfg Config
	log *slog.Logger
	// rawLog is the log under the limit, for the limit's own summaries.
	rawLog   *slog.Logger
	logLimit *loglimit.Limit
	lock     *state.Lock
	db       *state.DB
	rw       *rewrite.Rewriter
	spool    *spool.Spool
	// versions keeps every version of the agents' memory files (the
	// recent deletions and large cuts agents made: capture.Worker.Losses).
	versions *versions.Store
	// replica copies the state databases to a bucket (policy replicate);
	// nil without one.
	replica *replica.Replicator
	// fleet follows the hosts' replicated state on a central node.
	fleet *fleet.Follower
	// capture runs the background tasks: logs into the spool, versions,
	// the recall index (capture.Worker).
	capture *capture.Worker
	// secrets counts the credentials in the roots, for status (secrets.go).
	secrets *secretTally
	// health says whether the state directory can be written (health.go).
	health health
	bg     *background.Runner // capture and indexing as files are written
	// passes follows each root's changes against its evaluation's pass
	// (background.Passes): nothing changed meanwhile is left to a later one.
	passes *background.Passes
	// segments is the index directory's term segments (listed once, kept
	// as they are written; searches read it too, under its lock).
	segments *recall.SegmentListing
	// listings keeps what searches listed of each root, used unlisted
	// while the watcher saw nothing change there (recall.go).
	listings *recall.ListingCache
	engine   *jobs.Engine
	watch    *watcher.Watcher
	metrics  *metrics.Metrics
	started  time.Time
	listener net.Listener
	tcp      net.Listener
	metricsL net.Listener // metrics.listen, when set
	running  atomic.Bool  // Run is serving: work goes through the engine
	// catchUp is the start-up's progress: roots whose first evaluation
	// is done, of those found at start (both 0 once caught up).
	catchDone, catchTotal atomic.Int64
	catch                 background.Progress // files and bytes of the catch-up (background.Progress)
	handlers              []route             // added with Handle before Run

	warnings layout.Warnings
	memo     layout.Memo    // what rules parsed of files, across reloads
	scans    layout.Scans   // evaluations' places between their slices
	batches  layout.Batches // targets worked off together, per root and rule
	scopes   scope.Cache    // what recall's scopes read of the roots
	// indexes keeps the large recall indexes parsed between searches
	// (recall.IndexCache: at most indexCacheBytes).
	indexes *recall.IndexCache
	// diskMu guards the index's bytes as last measured (disk).
	diskMu     sync.Mutex
	diskAt     time.Time
	diskWrites uint64
	diskIndex  int64
	quota      layout.Quota // lines of events repeated over many files
	// shares bounds what each client of the control API holds at once
	// (share.Shares).
	shares *share.Shares

	mu      sync.RWMutex // guards policy, stamp, stores and clients (replaced on reload)
	policy  *policy.Policy
	stamp   string // control.PolicyStamp of the files policy was loaded from
	stores  map[string]*storeRT
	clients map[string]*compact.Client
	sched   *schedule.Scheduler
}

// New opens the state directory and builds every part; nothing runs until Run.
func New(cfg Config, log *slog.Logger) (*Daemon, error) {
	lock, err := state.TryLock(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	// Every part logs through the limit: no burst of events writes a line
	// per file (loglimit).
	raw := log
	log, limit := loglimit.New(log)
	d := &Daemon{cfg: cfg, log: log, rawLog: raw, logLimit: limit, lock: lock, metrics: metrics.New(cfg.Version), started: time.Now(), secrets: newSecretTally(), indexes: trustedIndexCache(filepath.Join(cfg.StateDir, IndexDir)),
		shares: share.New(share.DefaultClientRequests, share.DefaultTotalRequests, share.DefaultShareWait, raw)}
	d.health.wake = make(chan struct{}, 1)
	ctx := context.Background()
	if err := d.secrets.load(filepath.Join(cfg.StateDir, tallyFile)); err != nil {
		log.Warn("the credentials are counted again", "err", err)
	}
	d.db, err = state.Open(ctx, cfg.StateDir)
	if err != nil {
		lock.Unlock()
		return nil, err
	}
	// One registry of file hashes for the rewrite and the versions: what
	// memwatch appended is hashed once, by the rewrite, and the version
	// that follows reads only the bytes added.
	sums := filesum.New()
	d.rw = rewrite.New(d.db, log)
	d.rw.Sums = sums
	d.rw.BeforeChange = func(root *confine.Root, rel string) {
		if d.capture != nil { // built at the end of New
			d.capture.VersionBefore(root, rel)
		}
	}
	d.rw.OpenRoot = RootOpener(d.Policy)
	resolve := func(ctx context.Context, r *state.Record) (string, string) {
		return apprecords.Resolve(ctx, r, d.rw.OpenRoot)
	}
	d.rw.Resolvers = map[string]func(context.Context, *state.Record) (string, string){
		apprecords.RuleDelete: resolve, apprecords.RuleEdit: resolve, apprecords.RuleCreate: resolve,
	}
	d.spool, err = spool.Open(ctx, cfg.StateDir)
	if err != nil {
		d.closeState()
		return nil, err
	}
	d.versions, err = versions.Open(ctx, cfg.StateDir)
	if err != nil {
		d.closeState()
		return nil, err
	}
	d.versions.Sums = sums
	if r := cfg.Policy.Replicate; r != nil {
		if d.replica, err = replica.New(r, cfg.StateDir, log); err != nil {
			d.closeState()
			return nil, err
		}
	}
	if fl := cfg.Policy.Fleet; fl != nil {
		if d.fleet, err = fleet.New(fl, cfg.StateDir, log); err != nil {
			d.closeState()
			return nil, err
		}
	}
	d.stamp = cfg.PolicyStamp
	if err := d.apply(cfg.Policy); err != nil {
		d.closeState()
		return nil, err
	}
	d.engine = jobs.New(jobs.Config{
		MaxJobs:         cfg.Policy.MaxJobs,
		ShutdownTimeout: cfg.Policy.ShutdownTimeout,
		Timeout:         cfg.Policy.JobTimeout,
		Cooldown:        d.cooldown,
		OnFail:          d.onFail,
	}, d.runJob, log)
	d.passes = background.NewPasses()
	d.segments = recall.NewSegmentListing()
	d.listings = recall.NewListingCache()
	d.capture = capture.New(capture.Config{IndexDir: filepath.Join(cfg.StateDir, IndexDir), DB: d.db, RW: d.rw, Spool: d.spool, Versions: d.versions,
		Indexes: d.indexes, Segments: d.segments, Progress: &d.catch, Metrics: d.metrics, Log: log, Quota: &d.quota, Warnings: &d.warnings,
		Store: d.captureStore, StoresOf: d.captureStoresOf, OpenRoot: d.openRoot, StateFailed: d.stateFailed, Submit: d.engine.Submit, EvaluateRule: ruleEvaluate})
	d.bg = background.NewRunner(d.capture.Run, log)
	d.bg.OnDrop = func(root string) {
		d.passes.Changed(root, true)
		d.scans.Changed(root) // a log no capture took: the next evaluation goes through all
	}
	d.capture.Queue = d.bg
	d.watch, err = watcher.New(watcher.Config{Stores: watchStores(cfg.Policy), Handle: d.onChange, Refuse: d.onRefuse, Touched: d.capture.OnTouched,
		SyncDir: filepath.Join(cfg.StateDir, watchSyncDir)}, log)
	if err != nil {
		d.closeState()
		return nil, err
	}
	return d, nil
}

// Close releases the state directory of a daemon that was built but not run
// (one-off commands such as memwatch compact without a running daemon).
func (d *Daemon) Close() { d.closeState() }

func (d *Daemon) closeState() {
	d.scans.Close()
	if d.capture != nil {
		d.capture.Close() // the background goroutine has stopped
	}
	if d.spool != nil {
		d.spool.Close()
	}
	if d.versions != nil {
		d.versions.Close()
	}
	if d.db != nil {
		d.db.Close()
	}
	d.lock.Unlock()
}

func watchStores(p *policy.Policy) []watcher.Store {
	var out []watcher.Store
	for _, s := range p.Stores {
		ws := watcher.Store{Name: s.Name, Globs: s.Paths, Settle: s.Settle, FileRoots: s.Layout == "app-records", MaxWatches: s.MaxWatches}
		if s.User != "" {
			if id, err := confine.LookupIdentity(s.User, s.Group); err == nil {
				ws.Owner = &id
			}
		}
		out = append(out, ws)
	}
	return out
}

// apply builds store runtimes and LLM clients for p and swaps them in.
func (d *Daemon) apply(p *policy.Policy) error {
	clients := map[string]*compact.Client{}
	stores := map[string]*storeRT{}
	for _, s := range p.Stores {
		l, err := LayoutFor(s.Layout)
		if err != nil {
			return err
		}
		env := &layout.Env{Store: s, Rewriter: d.rw, DB: d.db, Spool: d.spool, Now: time.Now, Warnings: &d.warnings, Busy: &layout.BusyTargets{},
			OnBound: func(store, key string) { d.metrics.Bounds.WithLabelValues(store, key).Inc() },
			CaptureInto: func(ctx context.Context, root *confine.Root, rel string, o spool.Options) (spool.Result, error) {
				if d.capture == nil { // built at the end of New
					return d.spool.Capture(ctx, root, rel, o)
				}
				return d.capture.CaptureLog(ctx, s.Name, root, rel, o)
			},
			StateError: func(root *confine.Root, what string, err error) bool {
				return d.stateFailed(s.Name, root.Path(), what, err)
			},
			Sums: d.rw.Sums, Memo: &d.memo, Scans: &d.scans, Batches: &d.batches, Quota: &d.quota,
			Log: d.log.With("store", s.Name, "layout", s.Layout)}
		if s.Compactor == "llm" {
			c, ok := clients[s.LLM]
			if !ok {
				c, err = compact.NewClient(p.LLM[s.LLM], d.db, d.log)
				if err != nil {
					return err
				}
				c.OnFail = func(ep, cause string) { d.metrics.LLMFailures.WithLabelValues(ep, cause).Inc() }
				c.OnUse = func(ep string, n int64) {
					d.metrics.Tokens.WithLabelValues(ep).Add(float64(n))
					if used, err := c.Used(context.Background()); err == nil {
						d.metrics.LLMUsed.WithLabelValues(ep).Set(float64(used))
					}
				}
				d.metrics.LLMBudget.WithLabelValues(c.Name()).Set(float64(c.Budget()))
				clients[s.LLM] = c
			}
			env.LLM = c
		}
		rt := &storeRT{store: s, layout: l, env: env, rules: map[string]layout.Rule{}}
		for _, r := range l.Rules() {
			rt.rules[r.Name] = r
		}
		stores[s.Name] = rt
	}
	d.mu.Lock()
	d.policy, d.stores, d.clients = p, stores, clients
	d.mu.Unlock()
	return nil
}

func (d *Daemon) store(name string) *storeRT {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.stores[name]
}

// triggerOf names what started a job in the journal.
func triggerOf(reason jobs.Reason) string {
	switch reason {
	case jobs.ReasonTrigger:
		return "manual" // memwatch trigger, the control API
	case jobs.ReasonRetry, jobs.ReasonChangedWhileRunning:
		return "retry"
	case "":
		return "change"
	}
	return string(reason)
}

// storesOf returns the stores root is a root of.
func (d *Daemon) storesOf(root string) []*storeRT {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []*storeRT
	for _, rt := range d.stores {
		if rt.store.MatchesRoot(root) {
			out = append(out, rt)
		}
	}
	return out
}

func (d *Daemon) cooldown(store string) time.Duration {
	if rt := d.store(store); rt != nil {
		return rt.store.Cooldown
	}
	return 0
}

func (d *Daemon) onFail(j jobs.Job, err error) {
	d.stateFailed(j.Store, j.Root, "the work of rule "+j.Rule, err)
	rec := &state.Record{Store: j.Store, Root: j.Root, Rule: j.Rule, Target: j.Target, Outcome: state.Failed, Reason: err.Error(), Trigger: triggerOf(j.Reason)}
	if _, jerr := d.db.Append(context.Background(), rec); jerr != nil && !d.stateFailed(j.Store, j.Root, "the journal", jerr) {
		d.log.Error("journal failure", "err", jerr)
	}
}

// RuleRootRefused journals a path matching a store's glob that memwatch
// will not treat as a root (a symlink, or resolving outside the glob's directory).
const RuleRootRefused = "root-refused"

// onRefuse runs on the watcher goroutine, once per refused path and reason.
func (d *Daemon) onRefuse(store, path string, err error) {
	msg := fmt.Sprintf("%s: %s is not used as a store root: %v", store, path, err)
	d.metrics.Refusals.WithLabelValues(store).Inc()
	if !d.warnings.Set(path, RuleRootRefused, msg) {
		return // said already (memwatch status lists it)
	}
	d.log.Warn("store root refused; memwatch does not follow it", "store", store, "root", path, "err", err)
	key := path + "\x00" + err.Error()
	ctx := context.Background()
	if _, seen, _ := d.db.Get(ctx, RuleRootRefused, key); seen {
		return
	}
	rec := &state.Record{Store: store, Root: path, Rule: RuleRootRefused, Target: ".", Outcome: state.Skipped, Reason: err.Error(), Trigger: "watch"}
	if _, jerr := d.db.Append(ctx, rec); jerr != nil {
		d.log.Error("journal a refused root", "err", jerr)
		return
	}
	if perr := d.db.Put(ctx, RuleRootRefused, key, []byte("1")); perr != nil {
		d.log.Error("remember a refused root", "err", perr)
	}
}

// openRoot opens a root of store s (policy.Store.OpenRoot) for the
// daemon's own work and requests, and gives its ID what the spool and the
// versions hold for it unbound (a state restored from a replica, or kept
// before roots had IDs: see spool.Spool.Bind), so what is asked right
// after a restore finds it.
func (d *Daemon) openRoot(s *policy.Store, path string) (*confine.Root, error) {
	return d.openRootIn(s, path, nil)
}

// openRootIn is openRoot as one of a batch of opens (see
// confine.Prefixes).
func (d *Daemon) openRootIn(s *policy.Store, path string, pre *confine.Prefixes) (*confine.Root, error) {
	root, err := s.OpenRootIn(path, pre)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	d.spool.Bind(ctx, root.ID())
	d.versions.Bind(ctx, root.ID())
	return root, nil
}

// RootOpener opens a path as a root of the policy policy() returns, with
// its store's checks; a path that matches no store's globs (any more) is
// refused. The rewriter's undo and recovery open roots with it.
func RootOpener(policy func() *policy.Policy) func(path string) (*confine.Root, error) {
	return func(path string) (*confine.Root, error) {
		p := policy()
		if p == nil {
			return rewrite.OpenRoot(path)
		}
		for _, s := range p.Stores {
			if s.MatchesRoot(path) {
				return s.OpenRoot(path)
			}
		}
		return nil, fmt.Errorf("%s is no longer a root of any store of the policy; memwatch leaves it alone", path)
	}
}

// onChange runs on the watcher goroutine: it only queues work.
func (d *Daemon) onChange(c watcher.Change) {
	d.passes.Changed(c.Root, false)
	d.scans.Changed(c.Root, changedFiles(c)...)
	d.log.Debug("change", "store", c.Store, "root", c.Root, "reason", c.Reason, "paths", len(c.Paths), "first", c.Paths[:min(len(c.Paths), 2)])
	if len(c.Paths) == 0 {
		// A whole root (found, rescanned): bring its index up to date.
		d.bg.Queue(background.Task{Kind: background.IndexRoot, Store: c.Store, Root: c.Root})
	}
	d.engine.Submit(jobs.Job{Store: c.Store, Root: c.Root, Rule: ruleEvaluate, Reason: c.Reason})
}

// changedFiles is what the watcher told changed in c's root, file by
// file (relative to it); none when it did not tell (a root found, rescanned
// or polled, a flood).
func changedFiles(c watcher.Change) []string {
	if c.Reason != jobs.ReasonChange {
		return nil
	}
	rels := make([]string, 0, len(c.Paths))
	for _, p := range c.Paths {
		rel, err := filepath.Rel(c.Root, p)
		if err != nil || !filepath.IsLocal(rel) {
			return nil
		}
		rels = append(rels, rel)
	}
	return rels
}

// followsChanges reports an evaluation started by changes the watcher
// told file by file (changedFiles): it may go through those files alone
// (layout.FollowingChanges).
func followsChanges(r jobs.Reason) bool {
	switch r {
	case jobs.ReasonChange, jobs.ReasonChangedDuringPass, jobs.ReasonChangedWhileRunning:
		return true
	}
	return false
}

// runJob runs on a worker goroutine, one per root at a time.
func (d *Daemon) runJob(ctx context.Context, j jobs.Job) (jobs.Result, error) {
	ctx = state.WithTrigger(ctx, triggerOf(j.Reason))
	rt := d.store(j.Store)
	if rt == nil {
		return jobs.Result{}, nil // store removed by a reload
	}
	root, err := d.openRoot(rt.store, j.Root)
	if err != nil {
		if layout.IsRefusal(err) {
			d.onRefuse(j.Store, j.Root, err)
			return jobs.Result{}, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return jobs.Result{}, nil // gone meanwhile; the watcher drops it
		}
		return jobs.Result{}, err
	}
	defer root.Close()
	d.warnings.Clear(j.Root, RuleRootRefused)
	if j.Rule == ruleEvaluate && (j.Reason.Unseen() || d.bg.Dropped(j.Root)) {
		// Logs gone while memwatch did not run (or on the host a
		// restored state came from), or in a flood of changes too large
		// to follow file by file: their lines are held, not live.
		o := spool.Options{MaxLine: int(rt.store.MaxLine), IsMessage: session.IsMessage}
		if n, err := d.spool.MarkGone(ctx, root, o); err != nil {
			d.log.Warn("mark the logs that went unseen as gone", "root", j.Root, "err", err)
		} else if n > 0 {
			d.log.Info("logs gone unseen (while memwatch did not run, or in a flood of changes); their lines stay searchable from the spool", "root", j.Root, "logs", n, "trigger", j.Reason)
		}
	}
	if j.Rule == ruleEvaluate {
		d.passes.Begin(j.Root)
		if followsChanges(j.Reason) {
			ctx = layout.FollowingChanges(ctx)
		}
		// Lines an agent wrote that a conflict left out of its live file
		// come first, whatever the layout (see rewrite.Restore).
		for _, t := range d.rw.RiskTargets(ctx, j.Root) {
			d.engine.Submit(jobs.Job{Store: j.Store, Root: j.Root, Rule: rewrite.RuleRestore, Target: t, Reason: j.Reason})
		}
		var again error
		more := false
		for _, r := range rt.layout.Rules() {
			targets, err := r.Targets(ctx, rt.env, root)
			if errors.Is(err, layout.ErrMore) {
				// A slice of a large root: its targets now, the rest in
				// the next slice, after the work queued meanwhile.
				more, err = true, nil
			}
			if jobs.IsRetryable(err) {
				// Transient (a database locked by its app): evaluate again
				// with backoff rather than wait for the next change.
				d.log.Info("rule evaluation postponed", "store", j.Store, "root", j.Root, "rule", r.Name, "err", err)
				again = err
				continue
			}
			if err != nil {
				if !d.stateFailed(j.Store, j.Root, "the evaluation of rule "+r.Name, err) {
					d.log.Warn("rule evaluation failed", "store", j.Store, "root", j.Root, "rule", r.Name, "err", err)
				}
				continue
			}
			if len(targets) > batchOver {
				// Many files at once (a git checkout, an rsync): one job
				// works them off, not a job per file.
				rt.env.Batches.Add(root, r.Name, targets...)
				targets = []string{layout.BatchTarget}
			}
			for _, t := range targets {
				if t == layout.BatchTarget {
					d.log.Info("rule has work", "store", j.Store, "root", j.Root, "rule", r.Name, "files", rt.env.Batches.Pending(root, r.Name), "trigger", j.Reason)
				} else {
					d.log.Info("rule has work", "store", j.Store, "root", j.Root, "rule", r.Name, "path", t, "trigger", j.Reason)
				}
				d.engine.Submit(jobs.Job{Store: j.Store, Root: j.Root, Rule: r.Name, Target: t, Reason: j.Reason})
			}
		}
		// What the agent wrote is captured now (a database's new
		// conversations are spool lines only): the root's credentials
		// are counted again within a minute (recountChanged).
		d.secrets.markChanged(j.Root)
		if more {
			d.engine.Submit(jobs.Job{Store: j.Store, Root: j.Root, Rule: ruleEvaluate, Reason: jobs.ReasonNextSlice})
		}
		if d.passes.End(j.Root, more || again != nil) {
			// Changed (or captures dropped) since this pass began: a new
			// pass at once, not at the next change (background.Passes).
			d.engine.Submit(jobs.Job{Store: j.Store, Root: j.Root, Rule: ruleEvaluate, Reason: jobs.ReasonChangedDuringPass})
		}
		return jobs.Result{}, again
	}
	if j.Rule == restore.Rule {
		return d.capture.RestoreDeleted(ctx, rt.captured(), root, j.Target)
	}
	run := d.restore
	if r, ok := rt.rules[j.Rule]; ok {
		run = r.Run
		if j.Target == layout.BatchTarget && !r.Batches {
			return d.runBatch(ctx, rt, root, j, r)
		}
	} else if j.Rule != rewrite.RuleRestore {
		return jobs.Result{}, fmt.Errorf("layout %s has no rule %q", rt.layout.Name(), j.Rule)
	}
	start := time.Now()
	res, err := run(ctx, rt.env, root, j.Target)
	d.metrics.JobSeconds.WithLabelValues(j.Store, j.Rule).Observe(time.Since(start).Seconds())
	outcome := "unchanged"
	switch {
	case err != nil:
		outcome = "error"
	case res.Changed:
		outcome = "changed"
	}
	d.metrics.Jobs.WithLabelValues(j.Store, j.Rule, outcome).Inc()
	return res, err
}

// batchOver is the most targets one evaluation of a rule gives as a job
// each; more are worked off by one job (runBatch).
const batchOver = layout.BatchOver

// runBatch works off the targets of rule r batched for root, one after
// another in this one job: what a job per target would do, without a job
// (and a log line) per file. A target that fails is journaled as its job
// would be; one deferred is batched again.
func (d *Daemon) runBatch(ctx context.Context, rt *storeRT, root *confine.Root, j jobs.Job, r layout.Rule) (jobs.Result, error) {
	var res jobs.Result
	for ctx.Err() == nil && !jobs.Stopping(ctx) {
		ts := rt.env.Batches.Take(root, r.Name, 1)
		if len(ts) == 0 {
			return res, nil
		}
		one := j
		one.Target = ts[0]
		start := time.Now()
		out, err := r.Run(ctx, rt.env, root, ts[0])
		d.metrics.JobSeconds.WithLabelValues(j.Store, j.Rule).Observe(time.Since(start).Seconds())
		switch {
		case err != nil && ctx.Err() != nil:
			rt.env.Batches.Add(root, r.Name, ts[0])
			return res, ctx.Err()
		case err != nil:
			d.metrics.Jobs.WithLabelValues(j.Store, j.Rule, "error").Inc()
			d.onFail(one, err)
		case out.RetryAfter > 0:
			rt.env.Batches.Add(root, r.Name, ts[0])
			res.RetryAfter = max(res.RetryAfter, out.RetryAfter)
			return res, nil
		default:
			d.metrics.Jobs.WithLabelValues(j.Store, j.Rule, map[bool]string{true: "changed", false: "unchanged"}[out.Changed]).Inc()
		}
	}
	return res, ctx.Err()
}

// restore is the job of rewrite.RuleRestore: put back lines an agent
// wrote that a conflict left out of its live file.
func (d *Daemon) restore(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	out, err := d.rw.Restore(ctx, root, target, env.Store.Name)
	if res, ok := env.Deferred(ctx, root, rewrite.RuleRestore, target, err); ok {
		return res, nil
	}
	if err != nil {
		return jobs.Result{}, layout.Retryable(err)
	}
	return jobs.Result{Changed: out.Status == state.Done}, nil
}

// Run runs the daemon until ctx ends, then stops everything and waits.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.closeState()
	err := d.serve(ctx)
	if err == nil {
		// Every job has returned and cleaned up after itself: the next
		// start need not look for leftover temp files.
		if perr := d.db.Put(context.WithoutCancel(ctx), "daemon", "clean-stop", []byte("1")); perr != nil {
			d.log.Warn("remember the clean stop", "err", perr)
		}
		// Here, not as the stop begins: the running jobs and the
		// background's tasks have ended ("waiting for running jobs" came
		// after "stopped" in the log).
		d.log.Info("stopped")
	}
	return err
}

// serve is Run between opening and closing the state.
func (d *Daemon) serve(ctx context.Context) error {
	// Leftover temp files first: carrying an agent's tail into a target
	// changes what the pending records are resolved against. Only a run
	// that did not stop cleanly (killed, crashed) can have left any, so
	// after a clean stop the walk of every root is skipped.
	clean, _, err := d.db.Get(ctx, "daemon", "clean-stop")
	if err == nil {
		err = d.db.Put(ctx, "daemon", "clean-stop", []byte("0"))
	}
	if err != nil || string(clean) != "1" {
		d.cleanTemp(ctx)
	}
	if n, err := d.rw.Recover(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped during startup: a clean stop; recovery runs next start
		}
		return fmt.Errorf("recover interrupted rewrites: %w", err)
	} else if n > 0 {
		d.log.Info("resolved interrupted rewrites", "count", n)
	}
	if err := d.listen(); err != nil {
		return err
	}
	defer d.announce()()
	var wg sync.WaitGroup
	defer wg.Wait()
	d.catch.Start(time.Now()) // before the first index task reads a file
	d.bg.HoldIndexing()       // until ready: the watches first (Release below)
	d.bg.Start()
	defer d.bg.Stop()
	engineCtx, stopEngine := context.WithCancel(context.Background())
	watchCtx, stopWatch := context.WithCancel(context.Background())
	errs := make(chan error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); errs <- d.engine.Run(engineCtx) }()
	go func() { defer wg.Done(); errs <- d.watch.Run(watchCtx) }()
	// Replication ends last: what the last jobs wrote is sent as it stops.
	replicaCtx, stopReplica := context.WithCancel(context.Background())
	defer stopReplica()
	if d.replica != nil {
		d.metrics.WatchReplica(d.replica)
		wg.Add(1)
		// Its failures never stop memwatch: Run logs them and returns nil.
		go func() { defer wg.Done(); _ = d.replica.Run(replicaCtx) }()
	}
	if d.fleet != nil {
		wg.Add(1)
		// Its failures never stop memwatch: each host's are reported and
		// retried.
		go func() { defer wg.Done(); _ = d.fleet.Run(replicaCtx) }()
	}
	// Requests end with the daemon: long-lived ones (an MCP client's event
	// stream) would otherwise hold Shutdown for its whole timeout.
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopAPI()
	base := func(net.Listener) context.Context { return apiCtx }
	// Every connection, request and answer bounded (package share).
	srv := &http.Server{Handler: d.authenticate(false, "", d.api()), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: share.IdleTimeout, BaseContext: base, ConnContext: access.PeerContext}
	srv.RegisterOnShutdown(stopAPI)
	go func() {
		defer wg.Done()
		l := share.NewConnLimit(d.listener, share.DefaultClientConns, share.SocketClient(os.Geteuid()), &d.shares.Refused)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("control API: %w", err)
		}
	}()
	// The metrics-only listener: no token, nothing but /metrics.
	metricsSrv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: share.RequestReadTimeout, WriteTimeout: share.RequestWriteTimeout, IdleTimeout: share.IdleTimeout, BaseContext: base}
	if ml := d.metricsL; ml != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.Reg, promhttp.HandlerOpts{}))
		metricsSrv.Handler = mux
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := metricsSrv.Serve(share.NewConnLimit(ml, share.DefaultClientConns, share.AddrClient, &d.shares.Refused)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("metrics listener: %w", err)
			}
		}()
		d.log.Info("serving metrics", "listen", ml.Addr().String())
	}
	tcpSrv := &http.Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: share.IdleTimeout, BaseContext: base}
	if al, ok := d.tcp.(*authListener); ok {
		tcpSrv.Handler = d.authenticate(true, al.token, d.api())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tcpSrv.Serve(share.NewConnLimit(al.Listener, share.DefaultClientConns, share.AddrClient, &d.shares.Refused)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("control API (tcp): %w", err)
			}
		}()
	}
	stopAll := func() {
		d.stopScheduler()
		stopWatch()
		stopEngine()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(shutdownCtx)
		_ = tcpSrv.Shutdown(shutdownCtx)
		_ = metricsSrv.Shutdown(shutdownCtx)
		cancel()
		os.Remove(d.cfg.Socket)
		stopReplica()
	}
	select {
	case <-d.watch.Ready():
	case <-ctx.Done():
		stopAll()
		return nil
	case err := <-errs:
		stopAll()
		return err
	}
	if err := d.startScheduler(ctx); err != nil {
		stopAll()
		if ctx.Err() != nil {
			return nil // stopped during startup: a clean stop
		}
		return err
	}
	d.running.Store(true)
	defer d.running.Store(false)
	counts, _ := d.watch.Counts(ctx)
	d.metrics.Watches.Set(float64(counts.Watches))
	d.metrics.Roots.Set(float64(counts.Roots))
	if counts.Stores == 0 && d.fleet == nil {
		d.log.Info("no stores configured; idle until the policy names one (edit it and send SIGHUP or systemctl reload memwatch)", "policy", d.cfg.PolicyPath)
	}
	d.log.Info("ready", "stores", counts.Stores, "roots", counts.Roots, "watches", counts.Watches, "polled", counts.Polled,
		"state_dir", d.cfg.StateDir, "socket", d.cfg.Socket, "version", d.cfg.Version)
	d.notify("READY=1\nSTATUS=watching " + fmt.Sprint(counts.Roots) + " roots")
	d.bg.Release()
	wg.Add(1)
	go func() { defer wg.Done(); d.sayTwoDaemons(ctx) }()
	flush := time.NewTicker(10 * time.Second)
	defer flush.Stop()
	// The catch-up: every root found is evaluated once (its logs captured
	// and indexed). Its progress is polled until the engine and the
	// background drain, then never again: an idle daemon does nothing.
	catchUp := time.NewTicker(250 * time.Millisecond)
	defer catchUp.Stop()
	catchStart, cpuStart := time.Now(), cpuSeconds()
	d.catchTotal.Store(int64(counts.Roots))
	lastSaid := catchStart
	if ids, err := d.watch.RootIDs(ctx); err == nil {
		countCtx, stopCount := context.WithCancel(ctx)
		defer stopCount()
		wg.Add(1)
		go func() { defer wg.Done(); d.countCatchUp(countCtx, ids) }()
	}
	d.log.Info("catching up: evaluating every root found, capturing and indexing its logs", "roots", counts.Roots)
	// The state directory's probe runs only while it cannot be written.
	var probe *time.Ticker
	var probeC <-chan time.Time
	defer func() {
		if probe != nil {
			probe.Stop()
		}
	}()
	var watchdog <-chan time.Time
	if d.cfg.Watchdog > 0 {
		t := time.NewTicker(d.cfg.Watchdog / 2)
		defer t.Stop()
		watchdog = t.C
	}
	for {
		select {
		case <-d.health.wake:
			if probe == nil {
				probe = time.NewTicker(probeEvery)
				probeC = probe.C
			}
		case <-probeC:
			if !d.probeState(ctx) {
				probe.Stop()
				probe, probeC = nil, nil
			}
		case <-watchdog:
			if d.healthy(ctx) {
				d.notify("WATCHDOG=1")
			} else {
				d.log.Error("watcher or job engine not answering; withholding the watchdog ping")
			}
		case <-ctx.Done():
			d.log.Info("stopping", "reason", context.Cause(ctx))
			d.notify("STOPPING=1")
			stopAll()
			return nil
		case err := <-errs:
			d.log.Error("component failed; stopping", "err", err)
			stopAll()
			return err
		case <-catchUp.C:
			n, err := d.engine.Pending(ctx)
			if err != nil {
				continue
			}
			total := d.catchTotal.Load()
			d.catchDone.Store(max(0, total-int64(n)))
			if now := time.Now(); now.Sub(lastSaid) >= background.CatchUpEvery && (n > 0 || d.bg.Queued.Load() > 0) {
				lastSaid = now
				if st := d.catch.Status(now, d.catchDone.Load(), total, nil); st != nil {
					d.log.Info("catching up: "+st.String(), "files", st.Files, "files_total", st.FilesTotal, "bytes", st.Bytes, "bytes_total", st.BytesTotal, "left", st.Left.String())
				}
			}
			if n == 0 && d.bg.Queued.Load() == 0 && len(d.passes.Uncaptured()) == 0 {
				catchUp.Stop()
				d.catch.Finish()
				d.catchDone.Store(0)
				d.catchTotal.Store(0)
				d.log.Info("caught up: every root evaluated, its logs captured and indexed", "roots", total,
					"took", time.Since(catchStart).Round(time.Millisecond).String(), "cpu_seconds", fmt.Sprintf("%.2f", cpuSeconds()-cpuStart))
				d.notify("STATUS=watching " + fmt.Sprint(total) + " roots")
				// The first count of the credentials in the roots, for
				// status; then hourly (the scheduler's "secrets").
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := d.spool.Checkpoint(ctx); err != nil {
						d.log.Warn("after the catch-up", "err", err)
					}
					// What the catch-up left goes back to the system now:
					// the heap grows to three times what is live
					// (defaultGCPercent), and the scavenger keeps what is
					// under the next goal, 20-30 MiB an idle daemon held
					// after catching up 10,000 sessions.
					d.capture.ForgetTerms()
					debug.FreeOSMemory()
					d.tallySecrets(ctx)
				}()
			}
		case <-flush.C:
			d.recountChanged(ctx, &wg)
			d.quota.Flush()
			d.logLimit.Flush(d.rawLog)
			if c, err := d.watch.Counts(ctx); err == nil {
				d.metrics.Watches.Set(float64(c.Watches))
				d.metrics.Roots.Set(float64(c.Roots))
			}
			d.metrics.SpoolBytes.Set(float64(d.spool.Size()))
			disk := d.disk()
			d.metrics.StateBytes.WithLabelValues("journal").Set(float64(disk.Journal))
			d.metrics.StateBytes.WithLabelValues("spool").Set(float64(disk.Spool))
			d.metrics.StateBytes.WithLabelValues("index").Set(float64(disk.Index))
			d.metrics.StateBytes.WithLabelValues("versions").Set(float64(disk.Versions))
		}
	}
}

// healthy reports whether the watcher and the engine loops answer.
func (d *Daemon) healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.watch.Counts(ctx); err != nil {
		return false
	}
	_, err := d.engine.Status(ctx)
	return err == nil
}

func (d *Daemon) notify(s string) {
	if d.cfg.Notify != nil {
		d.cfg.Notify(s)
	}
}

// cleanTemp resolves the temp files a killed memwatch left in every root,
// GOMAXPROCS roots at a time: it runs before ready, and with thousands of
// roots opening each (resolving its path as its owner) is most of the cost.
// Roots are independent, and no job runs before it ends.
func (d *Daemon) cleanTemp(ctx context.Context) {
	d.mu.RLock()
	stores := d.policy.Stores
	d.mu.RUnlock()
	type work struct {
		s *policy.Store
		r string
	}
	todo := make(chan work)
	var wg sync.WaitGroup
	// One batch of opens: the roots' trusted parents are looked up once.
	pre := new(confine.Prefixes)
	defer pre.Close()
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range todo {
				d.cleanRootTemp(ctx, w.s, w.r, pre)
			}
		}()
	}
	for _, s := range stores {
		for _, r := range s.Roots() {
			todo <- work{s, r}
		}
	}
	close(todo)
	wg.Wait()
}

func (d *Daemon) cleanRootTemp(ctx context.Context, s *policy.Store, r string, pre *confine.Prefixes) {
	root, err := s.OpenRootIn(r, pre)
	if err != nil {
		return // the watcher reports refused roots
	}
	defer root.Close()
	removed, kept, err := d.rw.CleanTemp(ctx, root, s.Name)
	if err != nil {
		d.log.Warn("scan for leftover temp files", "store", s.Name, "root", r, "err", err)
	}
	if removed+kept > 0 {
		d.log.Info("resolved temp files left by an interrupted rewrite", "store", s.Name, "root", r, "removed", removed, "kept", kept)
	}
}

func (d *Daemon) startScheduler(ctx context.Context) error {
	d.mu.Lock()
	p := d.policy
	s := schedule.New(d.db, d.log, time.Local, time.Now)
	d.sched = s
	d.mu.Unlock()
	var entries []schedule.Entry
	for _, st := range p.Stores {
		st := st
		rt := d.store(st.Name)
		for _, r := range rt.layout.Rules() {
			if r.Every != nil {
				if every := r.Every(st); every > 0 {
					entries = append(entries, schedule.Entry{Name: st.Name + "/" + r.Name + "/every", Spec: fmt.Sprintf("@every %s", every), Run: func() { d.trigger(ctx, st.Name, "", jobs.ReasonTick) }})
				}
			}
			if r.Schedule == "" {
				continue
			}
			entries = append(entries, schedule.Entry{Name: st.Name + "/" + r.Name, Spec: r.Schedule, Run: func() { d.trigger(ctx, st.Name, "", jobs.ReasonSchedule) }})
		}
		if st.Sweep > 0 {
			entries = append(entries, schedule.Entry{Name: st.Name + "/sweep", Spec: fmt.Sprintf("@every %s", st.Sweep), Run: func() { d.trigger(ctx, st.Name, "", jobs.ReasonSweep) }})
		}
	}
	entries = append(entries, schedule.Entry{Name: "spool-prune", Spec: "@every 1h", Run: func() { d.pruneSpool(ctx, p.SpoolRetention) }})
	entries = append(entries, schedule.Entry{Name: "spool-pack", Spec: "@every 2m", Run: func() { d.packSpool(ctx) }})
	entries = append(entries, schedule.Entry{Name: "secrets", Spec: "@every 1h", Run: func() { d.tallySecrets(ctx) }})
	entries = append(entries, schedule.Entry{Name: "archive-bytes", Spec: "@every 1h", Run: func() { d.reportArchives(ctx) }})
	for _, st := range p.Stores {
		if prune.Retention(st).Active() {
			entries = append(entries, schedule.Entry{Name: "archive-retention", Spec: "@every 1h", Run: func() { d.pruneArchives(ctx) }})
			break
		}
	}
	if err := s.Add(ctx, entries); err != nil {
		return err
	}
	s.Start()
	return nil
}

// pruneSpool drops the text of captured lines every rule is done with,
// after the retention period, and forgets logs long gone.
func (d *Daemon) pruneSpool(ctx context.Context, retention time.Duration) {
	cutoff := time.Now().Add(-retention)
	st, err := d.spool.Prune(ctx, cutoff)
	if err != nil {
		d.log.Warn("prune the spool", "err", err)
		return
	}
	n, err := d.spool.Forget(ctx, cutoff)
	if err != nil {
		d.log.Warn("prune the spool", "err", err)
	}
	if st.Lines > 0 || n > 0 {
		d.log.Info("pruned the spool", "lines", st.Lines, "bytes", st.Bytes, "logs_forgotten", n, "retention", retention)
	}
}

// packBudget bounds the text one packing of the spool compresses: a state
// directory of an older release converts a slice every few minutes, the
// daemon's other work going on between its blocks.
const packBudget = 256 << 20

// packSpool compresses the text of logs written a line at a time, and of a
// spool written before blocks (spool.Pack).
func (d *Daemon) packSpool(ctx context.Context) {
	start := time.Now()
	st, err := d.spool.Pack(ctx, packBudget)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("pack the spool", "err", err)
		}
		return
	}
	if st.Blocks > 0 {
		d.log.Info("packed the spool's text into compressed blocks", "logs", st.Logs, "lines", st.Lines, "blocks", st.Blocks, "bytes", st.Bytes, "more", st.More, "took", time.Since(start).Round(time.Millisecond))
	}
}

func (d *Daemon) stopScheduler() {
	d.mu.Lock()
	s := d.sched
	d.sched = nil
	d.mu.Unlock()
	if s != nil {
		s.Stop()
	}
}

// errNoSuchRoot: a trigger named a root its store does not have.
var errNoSuchRoot = errors.New("no such root in the store (memwatch status lists them)")

// trigger queues an evaluation of one root, or of every root of a store.
func (d *Daemon) trigger(ctx context.Context, store, root string, reason jobs.Reason) (int, error) {
	roots, err := d.watch.Roots(ctx)
	if err != nil {
		return 0, err
	}
	if d.store(store) == nil {
		return 0, fmt.Errorf("no store named %q", store)
	}
	n := 0
	for _, r := range roots[store] {
		if root == "" || r == filepath.Clean(root) {
			d.engine.Submit(jobs.Job{Store: store, Root: r, Rule: ruleEvaluate, Reason: reason})
			n++
		}
	}
	if root != "" && n == 0 {
		return 0, fmt.Errorf("trigger %s %s: %w", store, root, errNoSuchRoot)
	}
	return n, nil
}

// Reload loads the policy again. An invalid policy is logged and the
// daemon keeps running on the old one.
func (d *Daemon) Reload(ctx context.Context) error {
	d.notify("RELOADING=1")
	defer d.notify("READY=1")
	stamp := control.PolicyStamp(d.cfg.PolicyPath) // before the files are read
	p, err := policy.Load(d.cfg.PolicyPath, registry.Specs())
	if err != nil {
		var perrs policy.Errors
		if errors.As(err, &perrs) {
			for _, e := range perrs {
				d.log.Error("policy reload rejected; keeping the running policy", "error", e.Error())
			}
		} else {
			d.log.Error("policy reload rejected; keeping the running policy", "err", err)
		}
		return err
	}
	if err := d.apply(p); err != nil {
		d.log.Error("policy reload failed; keeping the running policy", "err", err)
		return err
	}
	d.mu.Lock()
	d.stamp = stamp
	d.mu.Unlock()
	if err := d.watch.SetStores(ctx, watchStores(p)); err != nil {
		return err
	}
	d.stopScheduler()
	if err := d.startScheduler(ctx); err != nil {
		return err
	}
	c, _ := d.watch.Counts(ctx)
	d.log.Info("policy reloaded", "stores", c.Stores, "roots", c.Roots, "watches", c.Watches)
	return nil
}

// cpuSeconds is the CPU time this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// trustedIndexCache is the daemon's cache of the recall indexes: it alone
// writes them (indexFile tells the cache), so a search reads a kept copy
// without a stat.
func trustedIndexCache(dir string) *recall.IndexCache {
	c := recall.NewIndexCache(indexCacheBytes)
	c.TrustWrites(dir)
	return c
}
