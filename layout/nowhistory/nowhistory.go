package nowhistory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

// Layout is the now-history layout.
type Layout struct{}

// Name implements layout.Layout.
func (Layout) Name() string { return "now-history" }

// Rule names, as they appear in the journal.
const (
	RuleCompact   = "compact"
	RuleRetention = "run-retention"
	RuleSnapshot  = "snapshot"
	// RuleStateFirst journals a memory.md whose ## State is not first.
	RuleStateFirst = "state-first"
)

// Rules implements layout.Layout.
func (Layout) Rules() []layout.Rule {
	return []layout.Rule{
		{Name: RuleCompact, Targets: compactTargets, Run: runCompact},
		{Name: RuleRetention, Schedule: "30 3 * * *", Targets: retentionTargets, Run: runRetention},
		{Name: RuleSnapshot, Targets: snapshotTargets, Run: runSnapshot},
	}
}

// checkState journals, once per content of memory.md, that ## State is
// not where now-history wants it (first in # now). The file is read only
// when its size or mtime moved since the last check: this runs on every
// evaluation of the root.
func checkState(ctx context.Context, env *layout.Env, root *confine.Root) {
	fi, err := root.Stat(MemoryFile)
	if err != nil {
		return
	}
	key := root.Path()
	sig := fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
	if last, _, _ := env.DB.Get(ctx, "state-first", key); string(last) == sig {
		return
	}
	data, err := root.ReadFile(MemoryFile)
	if err != nil {
		return
	}
	env.Logged(env.DB.Put(ctx, "state-first", key, []byte(sig)), "DB.Put")
	if w := StateWarning(data); w != "" {
		env.Logged(env.Note(ctx, root.Path(), RuleStateFirst, MemoryFile, rewrite.Hash(data), int64(len(data)), w), "Note")
	}
}

func compactTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	checkState(ctx, env, root)
	maxSize := int64(OptionsOf(env.Store).MaxSize)
	fi, err := root.Stat(MemoryFile)
	if err != nil || fi.Size() <= maxSize {
		env.NotBusy(root, RuleCompact, MemoryFile)
		return nil, nil
	}
	if !env.Regrown(ctx, root, RuleCompact, MemoryFile, fi.Size(), maxSize, int64(OptionsOf(env.Store).Regrow)) {
		return nil, nil
	}
	data, err := root.ReadFile(MemoryFile)
	if env.Refused(root, RuleCompact, MemoryFile, err) || err != nil {
		return nil, nil
	}
	env.Accepted(root, MemoryFile)
	regrow := int64(OptionsOf(env.Store).Regrow)
	if regrow <= 0 {
		regrow = maxSize / 4
	}
	if env.Held(ctx, root, RuleCompact, MemoryFile, data, regrow, 0) {
		return nil, nil
	}
	if env.Seen(ctx, root.Path(), RuleCompact, MemoryFile, rewrite.Hash(data)) {
		return nil, nil // we already compacted (or gave up on) exactly this content
	}
	return []string{MemoryFile}, nil
}

// CompactRequest implements layout.Compactable: the rewrite that compacts
// memory.md, and the record it is journaled with. With force (memwatch
// compact) it runs even under max_size, and an LLM result the guards
// reject is reported as rejected; the daemon instead falls back to the
// heuristic, so memory.md never stays oversize because of a bad answer.
func (Layout) CompactRequest(env *layout.Env, root *confine.Root, force bool) (rewrite.Request, *state.Record) {
	maxSize := int64(OptionsOf(env.Store).MaxSize)
	keep := OptionsOf(env.Store).KeepHistory
	rec := env.Record(RuleCompact)
	compute := func(ctx context.Context, old []byte) ([]byte, error) {
		size, limit := policy.HumanApart(int64(len(old)), maxSize)
		rec.Reason = fmt.Sprintf("memory.md is %s, over max_size %s", size, limit) // a restarted attempt starts afresh
		if force && int64(len(old)) <= maxSize {
			rec.Reason = fmt.Sprintf("memwatch compact (memory.md is %s, max_size %s)", size, limit)
		}
		if !force && int64(len(old)) <= maxSize {
			return nil, rewrite.ErrUnchanged // shrank on its own meanwhile
		}
		if env.LLM != nil {
			out, tokens, err := compactLLM(ctx, env, old, keep, maxSize)
			rec.Tokens += tokens
			var rej *rewrite.Rejected
			switch {
			case err == nil, ctx.Err() != nil, errors.As(err, &rej) && force:
				return out, err
			case errors.As(err, &rej):
				rec.Reason += fmt.Sprintf("; llm output rejected (%s), heuristic compactor used", rej.Reason)
				env.Log.Warn("llm compaction rejected by the guards; falling back to heuristic", "root", root.Path(), "reason", rej.Reason)
			default:
				// An unreachable endpoint or a spent budget must not leave memory
				// growing: the heuristic keeps it bounded, and the journal says why.
				rec.Reason += fmt.Sprintf("; llm unavailable (%v), heuristic compactor used", err)
				env.Log.Warn("llm compaction failed; falling back to heuristic", "root", root.Path(), "err", err)
			}
		}
		out, ok := CompactHeuristic(old, keep)
		if !ok {
			return nil, rewrite.ErrUnchanged
		}
		return out, nil
	}
	return rewrite.Request{
		Root: root, Target: MemoryFile,
		Archive: rotate.Stamped(ArchiveDir, "", env.Now()),
		Compute: compute,
	}, rec
}

func runCompact(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	maxSize := int64(OptionsOf(env.Store).MaxSize)
	keep := OptionsOf(env.Store).KeepHistory
	req, rec := Layout{}.CompactRequest(env, root, false)
	out, err := env.Rewriter.Apply(ctx, req, rec)
	note := rec.Reason
	if res, ok := env.Deferred(ctx, root, RuleCompact, target, err); ok {
		return res, nil
	}
	env.NotBusy(root, RuleCompact, target)
	if err != nil {
		return jobs.Result{}, layout.Retryable(err)
	}
	switch out.Status {
	case state.Done:
		if rec.AfterSize > maxSize {
			note = strings.TrimPrefix(note+fmt.Sprintf("; still %d bytes, over max_size %d: what is kept (# now and the newest %d History entries) is larger than that", rec.AfterSize, maxSize, keep), "; ")
			env.Log.Warn("compacted but still over max_size", "root", root.Path(), "path", target, "size", rec.AfterSize, "max_size", maxSize)
		}
		if note != rec.Reason {
			rec.Reason = note
			if err := env.DB.Update(ctx, rec); err != nil {
				return jobs.Result{Changed: true}, fmt.Errorf("journal the compaction's note: %w", err)
			}
		}
		return jobs.Result{Changed: true}, nil
	case state.Rejected:
		return jobs.Result{CoolDown: true}, nil
	}
	// Nothing could be dropped: say so once; Seen keeps us from retrying
	// until the content changes.
	data, err := root.ReadFile(target)
	if err == nil && int64(len(data)) > maxSize {
		env.Logged(env.Note(ctx, root.Path(), RuleCompact, target, rewrite.Hash(data), int64(len(data)),
			fmt.Sprintf("memory.md is %d bytes, over max_size %d, and the heuristic compactor cannot shrink it (no History entries beyond keep_history %d)", len(data), maxSize, keep)), "Note")
	}
	return jobs.Result{CoolDown: true}, nil
}

// CompactHeuristic keeps everything but the History entries beyond the
// newest keep, newest by the timestamp of their heading: an agent that
// appends History oldest first keeps its newest entries too. Entries with
// the same or no timestamp are ordered by position (the seed writes newest
// first). It reports false when there is nothing to drop.
func CompactHeuristic(src []byte, keep int) ([]byte, bool) {
	d := markdown.Parse(src)
	h := d.Find(1, "History")
	if h < 0 {
		return nil, false
	}
	kids := d.Children(h)
	if len(kids) <= keep {
		return nil, false
	}
	kept := newestEntries(d, kids, keep)
	// An entry holding a pinned line (or headed "pinned") stays, whatever
	// its age.
	for _, k := range kids {
		if len(markdown.Pinned(d.Section(k))) > 0 || markdown.PinnedHeading(d.Headings[k].Text) {
			kept[k] = true
		}
	}
	if len(kept) >= len(kids) {
		return nil, false
	}
	out := append([]byte{}, src[:d.Headings[kids[0]].Start]...)
	for _, k := range kids {
		if kept[k] {
			out = append(out, src[d.Headings[k].Start:d.Headings[k].End]...)
		}
	}
	return append(out, src[d.Headings[kids[len(kids)-1]].End:]...), true
}

// newestEntries picks the keep newest History entries (heading indexes).
func newestEntries(d *markdown.Doc, kids []int, keep int) map[int]bool {
	order := slices.Clone(kids)
	stamp := func(k int) time.Time {
		t, err := time.ParseInLocation(TimeFormat, historyStamp(d.Headings[k].Text), time.Local)
		if err != nil {
			return time.Time{}
		}
		return t
	}
	slices.SortStableFunc(order, func(a, b int) int { return stamp(b).Compare(stamp(a)) })
	kept := map[int]bool{}
	for _, k := range order[:min(keep, len(order))] {
		kept[k] = true
	}
	return kept
}

const llmSystem = `You compact an AI agent's memory file (memory.md). It has two top-level sections: "# now" (working memory: "## State | summary" first, then one "##" section per tracked entity, "## Patterns", "## Errors") and "# History" (a timeline, newest entry first, headings "## YYYY-MM-DD-HHmm | summary").
Return only the new memory.md, as markdown, with no commentary and no code fences.
Rules:
- Keep the "# now" structure: "## State" first, every entity section, "## Patterns", "## Errors". Keep the section names exactly.
- Distill "# now" fields to their current, essential values; merge duplicate patterns and errors.
- Keep the newest %d "# History" entries exactly as they are; drop older entries (they are kept in memory/run/ and in the archive).
- Keep every pinned line exactly as it is, wherever it is: a line ending with <!-- pin -->, and every line of a section whose heading contains "pinned".
- The result must be under %d bytes.
` + compact.DataNotice

// compactLLM asks the endpoint for a compaction. When memory.md is larger
// than the endpoint's max_input_tokens allows, the History entries beyond
// keep_history are dropped first (whole entries, as the heuristic does; they
// are in the archive); if it is still too large, the call is refused and the
// caller falls back to the heuristic. Nothing is ever cut mid-entry.
func compactLLM(ctx context.Context, env *layout.Env, old []byte, keep int, maxSize int64) ([]byte, int64, error) {
	input := old
	system := fmt.Sprintf(llmSystem, keep, maxSize)
	if compact.EstimateTokens(system)+compact.EstimateTokens(string(old))+64 > env.LLM.MaxInputTokens() {
		if trimmed, ok := CompactHeuristic(old, keep); ok {
			input = trimmed
		}
	}
	user := compact.Data("memory.md", string(input))
	reply, err := env.LLM.Complete(ctx, compact.Prompt{System: system, User: user})
	if err != nil {
		return nil, reply.Tokens, err
	}
	out := []byte(compact.StripFences(reply.Text) + "\n")
	return out, reply.Tokens, Guard(old, out, keep, maxSize, env.Store.MaxLoss)
}

// Guard checks an LLM compaction of memory.md before anything is written.
func Guard(old, out []byte, keep int, maxSize int64, maxLoss float64) error {
	if err := compact.CheckText(out); err != nil {
		return err
	}
	if p := markdown.MissingPinned(old, out); p != "" {
		return &rewrite.Rejected{Reason: fmt.Sprintf("the pinned line %q is missing or changed", p)}
	}
	od, nd := markdown.Parse(old), markdown.Parse(out)
	if len(nd.Headings) == 0 || nd.Headings[0].Level != 1 || !strings.EqualFold(nd.Headings[0].Text, "now") || !bytes.HasPrefix(bytes.TrimLeft(out, " \n"), []byte("# now")) {
		return &rewrite.Rejected{Reason: "output does not start with # now"}
	}
	kids := nd.Children(0)
	if len(kids) == 0 || !strings.HasPrefix(strings.ToLower(nd.Headings[kids[0]].Text), "state") {
		return &rewrite.Rejected{Reason: "## State is not the first section under # now"}
	}
	if nd.Find(1, "History") < 0 {
		return &rewrite.Rejected{Reason: "output has no # History"}
	}
	if on := od.Find(1, "now"); on >= 0 {
		var before, after []string
		for _, k := range od.Children(on) {
			before = append(before, sectionName(od.Headings[k].Text))
		}
		for _, k := range nd.Children(0) {
			after = append(after, sectionName(nd.Headings[k].Text))
		}
		if err := compact.CheckLoss("# now sections", before, after, maxLoss); err != nil {
			return err
		}
	}
	if oh := od.Find(1, "History"); oh >= 0 {
		var newest, kept []string
		for k := range newestEntries(od, od.Children(oh), keep) {
			newest = append(newest, historyStamp(od.Headings[k].Text))
		}
		for _, k := range nd.Children(nd.Find(1, "History")) {
			kept = append(kept, historyStamp(nd.Headings[k].Text))
		}
		if err := compact.CheckLoss("recent History entries", newest, kept, maxLoss); err != nil {
			return err
		}
	}
	return compact.CheckShrinks(old, out, maxSize)
}

// sectionName is a "## Name | description" heading's name.
func sectionName(t string) string {
	if i := strings.IndexByte(t, '|'); i >= 0 {
		t = t[:i]
	}
	return strings.TrimSpace(t)
}

// historyStamp is the timestamp of a History heading, which identifies it.
func historyStamp(t string) string { return sectionName(t) }

// runAge is when a run file was last of use: the later of the time its
// name gives (when it parses as a real YYYY-MM-DD-HHmm) and its mtime, so a
// file written a moment ago is never old, whatever its name says.
func runAge(root *confine.Root, name string) (time.Time, bool) {
	fi, err := root.Lstat(filepath.Join(RunDir, name))
	if err != nil || !fi.Mode().IsRegular() {
		return time.Time{}, false
	}
	t := fi.ModTime()
	stamp := strings.TrimSuffix(strings.TrimSuffix(name, ".md"), "-run")
	if n, err := time.ParseInLocation(TimeFormat, stamp, time.Local); err == nil && n.Format(TimeFormat) == stamp && n.After(t) {
		t = n
	}
	return t, true
}

func retentionTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	keep := OptionsOf(env.Store).RunRetention
	if keep <= 0 {
		return nil, nil
	}
	cutoff := env.Now().Add(-keep)
	var out []string
	for _, name := range runFiles(root) {
		if t, ok := runAge(root, name); ok && t.Before(cutoff) {
			out = append(out, filepath.Join(RunDir, name))
		}
	}
	return out, nil
}

// runRetention moves a run file older than run_retention into the archive
// directory (journaled; undo brings it back).
func runRetention(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	// Only ever inside memory/run/.
	if filepath.Dir(target) != RunDir {
		return jobs.Result{}, fmt.Errorf("run retention refuses %s: not in %s/", target, RunDir)
	}
	if t, ok := runAge(root, filepath.Base(target)); !ok || !t.Before(env.Now().Add(-OptionsOf(env.Store).RunRetention)) {
		return jobs.Result{}, nil // written again since it was found old
	}
	rec := env.Record(RuleRetention)
	rec.Reason = "older than run_retention " + policy.FormatDuration(OptionsOf(env.Store).RunRetention)
	if err := env.Rewriter.Remove(ctx, root, target, "", rec); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return jobs.Result{}, nil
		}
		return jobs.Result{}, err
	}
	return jobs.Result{}, nil
}

func snapshotTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	name := OptionsOf(env.Store).SnapshotFile
	if name == "" {
		return nil, nil
	}
	want, err := Snapshot(root, MemoryFile)
	if env.Refused(root, RuleSnapshot, MemoryFile, err) || err != nil {
		return nil, nil
	}
	have, _ := root.ReadFile(name)
	if string(have) == want {
		return nil, nil
	}
	return []string{name}, nil
}

func runSnapshot(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	rec := env.Record(RuleSnapshot)
	owned := ""
	if last, ok, _ := env.DB.LastFor(ctx, root.Path(), RuleSnapshot, target, "done"); ok {
		owned = last.AfterSHA
	}
	// The view is as readable as what it shows.
	_, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: target, AllowCreate: true, OwnedSHA: owned, From: []string{MemoryFile},
		Archive: rotate.Beside(rewrite.DefaultArchiveDir, target, env.Now()),
		Compute: func(context.Context, []byte) ([]byte, error) {
			s, err := Snapshot(root, MemoryFile)
			rec.Reason = "memory.md changed; " + target + " shows its # now and newest History"
			return []byte(s), err
		}}, rec)
	// The snapshot is derived and cheap: no cooldown, so it follows every change.
	return jobs.Result{}, layout.Retryable(err)
}

// Sources implements layout.Searchable: memory.md, its compaction
// archives and the run files.
func (Layout) Sources(*policy.Store) []recall.Source {
	return []recall.Source{
		{Glob: MemoryFile, Kind: recall.Text, Label: "memory"},
		{Glob: RunDir + "/*.md", Kind: recall.Text, Label: "runs"},
		{Glob: ArchiveDir + "/*.md{,.gz}", Kind: recall.Text, Label: "archive", Moved: "archived"},
	}
}
