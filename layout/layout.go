// Package layout is the contract between memwatch's engine and the memory
// layouts it maintains. A layout owns a format and its rules; it reads a
// root only through its confine.Root and changes files only through the
// rewrite package, which archives, re-checks and journals.
package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/filesum"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

// Env is what a rule may use.
type Env struct {
	Store    *policy.Store
	Rewriter *rewrite.Rewriter
	DB       *state.DB
	// LLM is the store's endpoint when its compactor is llm, else nil.
	LLM *compact.Client
	// Spool holds the captured lines of session logs.
	Spool *spool.Spool
	// CaptureInto, when set, captures a log into Spool for a rule (and may
	// index it for recall from the same read: capture.Worker.CaptureLog);
	// nil: Spool.Capture.
	CaptureInto func(ctx context.Context, root *confine.Root, rel string, o spool.Options) (spool.Result, error)
	Log         *slog.Logger
	Now         func() time.Time
	// Warnings collects conditions shown by memwatch status; may be nil.
	Warnings *Warnings

	// Busy tracks deferrals of targets written continuously; NewBusy makes one.
	Busy *BusyTargets
	// Sums knows the sha256 of the files memwatch appends to, and Memo
	// what rules parsed of them: together they let a rule read only what
	// was appended since it last looked (nil: read whole).
	Sums *filesum.Registry
	Memo *Memo
	// Scans keeps evaluations' places between their slices (EachFile).
	Scans *Scans
	// Batches holds the targets of rules that work many off together
	// (Batched), and where GoneLogs looked last.
	Batches *Batches
	// Quota bounds the lines an event repeated across many files logs.
	Quota *Quota
	// OnBound counts an input that hit a bound (see Bound); may be nil.
	OnBound func(store, key string)
	// StateError is told of an error writing memwatch's own state (the
	// spool, ...) while working on root, what naming what was not
	// recorded; it reports whether err was such a failure (a full disk),
	// which the daemon then reports and recovers from. May be nil.
	StateError func(root *confine.Root, what string, err error) bool
}

// Rule is one thing a layout does to a root.
type Rule struct {
	Name string
	// Schedule is a cron spec (local time) for rules that also run on a
	// clock, e.g. retention; "" for change-driven rules only.
	Schedule string
	// Every, when set, evaluates the rule's roots at that interval for the
	// store (e.g. to notice a session that went quiet); 0 means never.
	Every func(*policy.Store) time.Duration
	// Targets returns what in root needs this rule now. It runs often and
	// must be cheap: this is where "nothing new, skip" is decided, before
	// any expensive step.
	Targets func(ctx context.Context, env *Env, root *confine.Root) ([]string, error)
	// Run does the rule's work for one target.
	Run func(ctx context.Context, env *Env, root *confine.Root, target string) (jobs.Result, error)
	// Batches says Run works off BatchTarget itself (the targets the
	// evaluation put in Env.Batches, together); otherwise the daemon runs
	// Run for each of them in turn in one job.
	Batches bool
}

// Layout is one memory format.
type Layout interface {
	Name() string
	// NewOptions returns the layout's store keys set to their defaults: a
	// pointer to the options struct the layout declares (its fields and
	// tags are the schema, see policy.LayoutSpec). policy/ decodes a
	// store's keys into it; the layout reads it back with policy.OptionsOf.
	NewOptions() any
	Rules() []Rule
}

// SessionLogs is a layout whose rules read session logs: the daemon
// captures them into the spool as soon as they are written.
type SessionLogs interface {
	// Logs returns the logs' globs, relative to a root of the store
	// (Glob and Exclude of each source are what count).
	Logs(s *policy.Store) []recall.Source
}

// Searchable is a layout whose files memwatch recall searches (and the
// daemon indexes).
type Searchable interface {
	Sources(s *policy.Store) []recall.Source
}

// Compactable is a layout with an on-demand compaction (memwatch compact).
type Compactable interface {
	// CompactRequest returns the rewrite that compacts root now, even under
	// its threshold when force is set, and the record to journal it with.
	CompactRequest(env *Env, root *confine.Root, force bool) (rewrite.Request, *state.Record)
}

// dryRunKey marks a context whose Compute must have no side effects.
type dryRunKey struct{}

// WithDryRun marks ctx as a dry run (memwatch compact --dry-run): a Compute
// that writes beside its target (a pruned-facts archive) must not.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

// IsDryRun reports a context marked by WithDryRun.
func IsDryRun(ctx context.Context) bool { v, _ := ctx.Value(dryRunKey{}).(bool); return v }

// Logged reports a failed write to the state database that the rule can go
// on without (a note, a remembered mark): it is logged, not dropped.
func (e *Env) Logged(err error, what string) {
	if err != nil {
		e.Log.Warn("state database write failed; going on without it", "store", e.Store.Name, "what", what, "err", err)
	}
}

// Record starts a journal record for a rule's action.
func (e *Env) Record(rule string) *state.Record {
	return &state.Record{Store: e.Store.Name, Rule: rule}
}

// Seen reports whether the rule already handled exactly this content of
// target: it wrote it (done, after-hash), or it decided about it and wrote
// nothing (rejected or skipped, before-hash). Either way there is nothing
// new, so the rule must not run again.
func (e *Env) Seen(ctx context.Context, root, rule, target, sha string) bool {
	// Content a user restored with undo stays as it is until it changes:
	// redoing the undone action would defeat the undo.
	// Until a person says redo.
	if u, ok, err := e.DB.LastFor(ctx, root, "undo", target, state.Done); err == nil && ok && u.AfterSHA == sha {
		if r, ok, err := e.DB.LastFor(ctx, root, rewrite.RuleRedo, target, state.Done); err != nil || !ok || r.ID < u.ID {
			return true
		}
	}
	r, ok, err := e.DB.LastFor(ctx, root, rule, target)
	if err != nil || !ok {
		return false
	}
	switch r.Outcome {
	case state.Done:
		return r.AfterSHA == sha
	case state.Rejected, state.Skipped:
		return r.BeforeSHA == sha
	}
	// A failure (an interrupted rewrite, an I/O error) decided nothing: the
	// rule tries again, after the cooldown the engine applies.
	return false
}

// Note journals a decision that changed nothing (outcome skipped) and logs
// it at warn level: e.g. a heuristic that cannot get under a threshold says
// so once, and Seen then keeps the rule from retrying on the same content.
func (e *Env) Note(ctx context.Context, root, rule, target, sha string, size int64, reason string) error {
	rec := e.Record(rule)
	rec.Root, rec.Target, rec.Outcome, rec.Reason = root, target, state.Skipped, reason
	rec.BeforeSHA, rec.BeforeSize, rec.AfterSHA, rec.AfterSize = sha, size, sha, size
	_, err := e.DB.Append(ctx, rec)
	e.Log.Warn(reason, "store", e.Store.Name, "root", root, "rule", rule, "path", target)
	return err
}

// Refused reports an input a rule will not read (a symlink leading out of
// the root, a file the root's owner may not read, one over the size limit,
// a FIFO): logged once per file and reason, and shown in memwatch status
// until the file reads again. It reports whether err was such a refusal.
func (e *Env) Refused(root *confine.Root, rule, rel string, err error) bool {
	if !IsRefusal(err) {
		return false
	}
	msg := fmt.Sprintf("%s: %s skipped: %v", e.Store.Name, root.Join(rel), err)
	if e.Warnings.Set(root.Path(), "refused:"+rel, msg) {
		e.Log.Warn("input skipped; memwatch does not read it", "root", root.Path(), "rule", rule, "path", rel, "err", err)
		key := root.Path() + "\x00" + rel + "\x00" + err.Error()
		ctx := context.Background()
		if _, seen, _ := e.DB.Get(ctx, "refused", key); !seen {
			rec := e.Record(rule)
			rec.Root, rec.Target, rec.Outcome, rec.Reason = root.Path(), rel, state.Skipped, "not read: "+err.Error()
			if _, jerr := e.DB.Append(ctx, rec); jerr != nil {
				e.Log.Error("journal a skipped input", "err", jerr)
			} else if perr := e.DB.Put(ctx, "refused", key, []byte("1")); perr != nil {
				e.Log.Error("remember a skipped input", "err", perr)
			}
		}
	}
	return true
}

// Accepted clears the warning Refused set for rel, once it reads again.
func (e *Env) Accepted(root *confine.Root, rel string) {
	e.Warnings.Clear(root.Path(), "refused:"+rel)
}

// Retryable marks a failed rewrite worth another attempt: a conflict with
// the agent (it wrote while memwatch computed) is retried with backoff;
// every other error is returned as it is.
func Retryable(err error) error {
	if errors.Is(err, rewrite.ErrConflict) {
		return jobs.Retry(err)
	}
	return err
}

// IsRefusal reports whether err is confine's refusal to read something.
func IsRefusal(err error) bool {
	return errors.Is(err, confine.ErrOutside) || errors.Is(err, confine.ErrDenied) ||
		errors.Is(err, confine.ErrTooLarge) || errors.Is(err, confine.ErrNotRegular) || errors.Is(err, confine.ErrSymlinkRoot) ||
		errors.Is(err, confine.ErrSymlinkParent)
}

// Warnings are conditions a user should see in memwatch status that are not
// actions (e.g. an agent-owned file over its size). Safe for concurrent use.
type Warnings struct {
	mu sync.Mutex
	m  map[string]string
	// full is set once the bound of warnings was reached (said once).
	full bool
}

// MaxWarnings bounds the warnings kept: past it a new one is neither kept
// nor reported new (one line says so), so a million files hitting a bound
// cannot grow memwatch or its log.
const MaxWarnings = 2000

// Set records a warning for root under key, replacing an earlier one. It
// reports whether the message is new, so callers log it only once.
func (w *Warnings) Set(root, key, msg string) bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]string{}
	}
	k := root + "\x00" + key
	old, had := w.m[k]
	if !had && len(w.m) >= MaxWarnings {
		if !w.full {
			w.full = true
			w.m["\x00full"] = fmt.Sprintf("more than %d warnings: the newest are not listed (memwatch's log has the first of each)", MaxWarnings)
		}
		return false
	}
	w.m[k] = msg
	return !had || old != msg
}

// Clear removes a warning.
func (w *Warnings) Clear(root, key string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, root+"\x00"+key)
	if w.full && len(w.m) < MaxWarnings/2 {
		delete(w.m, "\x00full")
		w.full = false
	}
}

// Bound reports that rel in root hit a bound, skip or refusal of the
// policy key key (max_line, max_file_size, ...), for why: logged at WARN
// the first time for that root, file and key, counted every time
// (OnBound: /metrics), listed by memwatch status until Unbound says it
// stopped happening.
func (e *Env) Bound(root *confine.Root, rel, key, why string) {
	if e.OnBound != nil {
		e.OnBound(e.Store.Name, key)
	}
	msg := fmt.Sprintf("%s: %s: %s (%s)", root.Path(), rel, why, key)
	if e.Warnings.Set(root.Path(), "bound:"+key+":"+rel, msg) && e.Log != nil {
		e.Log.Warn("an input hit a bound", "root", root.Path(), "file", rel, "key", key, "why", why)
	}
}

// Unbound says rel in root was read again without hitting key's bound.
func (e *Env) Unbound(root *confine.Root, rel, key string) {
	e.Warnings.Clear(root.Path(), "bound:"+key+":"+rel)
}

// ListFor returns the warnings of the roots keep accepts, sorted.
func (w *Warnings) ListFor(keep func(root string) bool) []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for k, v := range w.m {
		if root, _, _ := strings.Cut(k, "\x00"); keep(root) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// List returns the current warnings, sorted.
func (w *Warnings) List() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.m))
	for _, v := range w.m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Held reports whether a person's undo holds rule off target (state.Hold):
// after the undo of one of its changes the rule waits until the file (data,
// as it is now) has grown by grow bytes, or growLines lines, past what it
// was at the undo; memwatch redo ends the hold sooner. A hold outgrown is
// dropped, and the log says the rule goes on.
func (e *Env) Held(ctx context.Context, root *confine.Root, rule, target string, data []byte, grow int64, growLines int) bool {
	h, ok, err := e.DB.GetHold(ctx, root.Path(), target)
	if err != nil || !ok || h.Rule != rule {
		return false
	}
	lines := bytes.Count(data, []byte{'\n'})
	if int64(len(data)) < h.Size+grow && (growLines <= 0 || lines < h.Lines+growLines) {
		return true
	}
	e.Logged(e.DB.DropHold(ctx, root.Path(), target), "drop a hold")
	e.Log.Info("the file grew past what an undo held the rule off; it applies again", "root", root.Path(), "path", target, "rule", rule, "undone", h.Record)
	return false
}
