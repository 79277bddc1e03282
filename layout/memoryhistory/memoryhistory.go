package memoryhistory

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/markdown"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

// Layout is the memory-history layout.
type Layout struct{}

// Name implements layout.Layout.
func (Layout) Name() string { return "memory-history" }

// Rule names, as they appear in the journal.
const (
	RuleConsolidate = "consolidate"
	RuleMirror      = "history-mirror"
	RuleMove        = "history-move"
	RuleCompress    = "compress-memory"
)

// Rules implements layout.Layout. Consolidation comes first: the entries it
// appends are then mirrored into the monthly files by the mirror rule.
func (Layout) Rules() []layout.Rule {
	return []layout.Rule{
		{Name: RuleConsolidate, Targets: consolidateTargets, Run: runConsolidate, Every: idleTick, Batches: true},
		{Name: RuleMirror, Schedule: "30 3 1 * *", Targets: mirrorTargets, Run: runMirror},
		{Name: RuleMove, Schedule: "30 3 1 * *", Targets: moveTargets, Run: runMove},
		{Name: RuleCompress, Targets: compressTargets, Run: runCompress},
		layout.ScrubRule(func(s *policy.Store) (bool, time.Duration) { o := OptionsOf(s); return o.ScrubSecrets, o.SessionIdle }),
	}
}

// idleTick re-evaluates often enough to notice a session that went quiet.
func idleTick(s *policy.Store) time.Duration {
	d := OptionsOf(s).SessionIdle / 2
	return min(max(d, time.Second), 5*time.Minute)
}

// ---- monthly history ----

func historyEntries(root *confine.Root, f files) ([]byte, []Entry, error) {
	src, err := root.ReadFile(f.history())
	if err != nil {
		return nil, nil, err
	}
	_, es := ParseHistory(src)
	return src, es, nil
}

// missingByMonth returns, per monthly file, the entries of HISTORY.md it lacks.
func missingByMonth(root *confine.Root, f files, entries []Entry) map[string][]Entry {
	byMonth := map[string][]Entry{}
	for _, e := range entries {
		if e.OK {
			byMonth[f.month(e)] = append(byMonth[f.month(e)], e)
		}
	}
	out := map[string][]Entry{}
	for month, es := range byMonth {
		have := map[string]bool{}
		if b, err := root.ReadFile(month); err == nil {
			have = keys(b)
		}
		for _, e := range es {
			if !have[e.Key()] {
				out[month] = append(out[month], e)
			}
		}
	}
	return out
}

// mirrorTargets lists the monthly files that lack entries of HISTORY.md.
// It parses only what was appended since it last looked (view.go).
func mirrorTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	f := filesOf(env.Store)
	v, fresh, err := f.view(ctx, env, root)
	if env.Refused(root, RuleMirror, f.history(), err) || err != nil {
		return nil, nil
	}
	env.Accepted(root, f.history())
	reportUnparsed(ctx, env, root, fresh)
	var out []string
	for month, mv := range v.months {
		if len(mv.missing) > 0 {
			out = append(out, month)
		}
	}
	sort.Strings(out)
	return out, nil
}

// reportUnparsed logs, once per heading, entries whose timestamp does not
// parse: they stay where they are.
func reportUnparsed(ctx context.Context, env *layout.Env, root *confine.Root, entries []Entry) {
	for _, e := range entries {
		if e.OK {
			continue
		}
		key := root.Path() + "\x00" + e.Heading
		if _, seen, _ := env.DB.Get(ctx, "unparsed-history", key); seen {
			continue
		}
		env.Log.Warn("HISTORY.md entry has no parseable timestamp; it stays in HISTORY.md and is not filed by month", "root", root.Path(), "heading", e.Heading)
		env.Logged(env.DB.Put(ctx, "unparsed-history", key, []byte("1")), "DB.Put")
	}
}

// runMirror appends to one monthly file the entries of HISTORY.md it lacks.
// Entries an agent already wrote there are recognised, so nothing is doubled.
func runMirror(ctx context.Context, env *layout.Env, root *confine.Root, month string) (jobs.Result, error) {
	rec := env.Record(RuleMirror)
	f := filesOf(env.Store)
	_, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: month, AllowCreate: true, From: []string{f.history()},
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			_, entries, err := historyEntries(root, f)
			if err != nil {
				return nil, err
			}
			var mine []Entry
			for _, e := range entries {
				if e.OK && f.month(e) == month {
					mine = append(mine, e)
				}
			}
			next, n := appendEntries(old, mine)
			if n == 0 {
				return nil, rewrite.ErrUnchanged
			}
			rec.Reason = fmt.Sprintf("mirrored %d entr%s of HISTORY.md", n, map[bool]string{true: "y", false: "ies"}[n == 1])
			return next, nil
		}}, rec)
	if err != nil {
		return jobs.Result{}, layout.Retryable(err)
	}
	// Mirroring only appends; there is nothing to cool down from.
	return jobs.Result{}, nil
}

// currentMonth is the month whose entries stay in HISTORY.md in move mode.
func currentMonth(now time.Time, e Entry) bool {
	t := now.In(e.Time.Location())
	return e.Time.Year() == t.Year() && e.Time.Month() == t.Month() || e.Time.After(t)
}

func moveTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	if OptionsOf(env.Store).HistoryMode != "move" {
		return nil, nil
	}
	f := filesOf(env.Store)
	if v, _, err := f.view(ctx, env, root); err != nil || v.first.IsZero() || currentMonth(env.Now(), Entry{Time: v.first}) {
		return nil, nil // no entry of an ended month: nothing to move
	}
	_, entries, err := historyEntries(root, f)
	if err != nil {
		return nil, nil
	}
	missing := missingByMonth(root, f, entries)
	for _, e := range entries {
		if e.OK && !currentMonth(env.Now(), e) && len(missing[f.month(e)]) == 0 {
			return []string{f.history()}, nil
		}
	}
	return nil, nil
}

// runMove takes the entries of ended months out of HISTORY.md once they are
// in their monthly files. The pre-image is archived first.
func runMove(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	rec := env.Record(RuleMove)
	f := filesOf(env.Store)
	out, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: f.history(),
		Archive: f.archiveFor("HISTORY", env.Now()),
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			pre, entries := ParseHistory(old)
			filed := map[string]map[string]bool{}
			next := append([]byte{}, pre...)
			moved := 0
			for _, e := range entries {
				if e.OK && !currentMonth(env.Now(), e) {
					m := f.month(e)
					if filed[m] == nil {
						b, _ := root.ReadFile(m)
						filed[m] = keys(b)
					}
					if filed[m][e.Key()] {
						moved++
						continue // safe in its monthly file
					}
				}
				next = append(next, e.Raw...)
			}
			if moved == 0 {
				return nil, rewrite.ErrUnchanged
			}
			rec.Reason = fmt.Sprintf("moved %d entries of ended months to their HISTORY-YYYY-MM.md files", moved)
			return next, nil
		}}, rec)
	if err != nil {
		return jobs.Result{}, layout.Retryable(err)
	}
	return jobs.Result{Changed: out.Status == state.Done}, nil
}

// ---- MEMORY.md compression ----

func compressTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	mem := filesOf(env.Store).memory()
	b, err := root.ReadFile(mem)
	if env.Refused(root, RuleCompress, mem, err) || err != nil || fits(b, OptionsOf(env.Store)) {
		return nil, nil
	}
	if env.Seen(ctx, root.Path(), RuleCompress, mem, rewrite.Hash(b)) {
		return nil, nil
	}
	o := OptionsOf(env.Store)
	if env.Held(ctx, root, RuleCompress, mem, b, o.regrow(), o.MemoryMaxLines/4) {
		return nil, nil
	}
	return []string{mem}, nil
}

const compressSystem = `You maintain an AI agent's long-term memory file (MEMORY.md): user preferences, project context, relationships, technical decisions.
It is over its size limit of %d bytes. Return only the new MEMORY.md as markdown, no commentary and no code fences:
prune stale and low-value facts, merge duplicates, keep the structure and every fact that is still useful, and stay under %d bytes.
Keep every pinned line exactly as it is: a line ending with <!-- pin -->, and every line of a section whose heading contains "pinned". Prefer dropping dated or episodic entries to the file's rules.
` + compact.DataNotice

func runCompress(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	o := OptionsOf(env.Store)
	limit := int64(o.MemoryMaxSize)
	f := filesOf(env.Store)
	req, rec := Layout{}.CompactRequest(env, root, false)
	out, err := env.Rewriter.Apply(ctx, req, rec)
	if err != nil {
		return jobs.Result{}, layout.Retryable(err)
	}
	switch out.Status {
	case state.Done:
		if b, err := root.ReadFile(f.memory()); err == nil && !fits(b, o) {
			env.Log.Warn("MEMORY.md compressed but still over its limits", "root", root.Path(), "size", len(b), "lines", lineCount(b), "memory_max_size", limit, "memory_max_lines", o.MemoryMaxLines)
		}
		return jobs.Result{Changed: true}, nil
	case state.Rejected:
		return jobs.Result{CoolDown: true}, nil
	}
	if b, err := root.ReadFile(f.memory()); err == nil && !fits(b, o) {
		env.Logged(env.Note(ctx, root.Path(), RuleCompress, f.memory(), rewrite.Hash(b), int64(len(b)),
			fmt.Sprintf("MEMORY.md is %d bytes and %d lines, over memory_max_size %d or memory_max_lines %d, and nothing could be moved out of it", len(b), lineCount(b), limit, o.MemoryMaxLines)), "Note")
	}
	return jobs.Result{CoolDown: true}, nil
}

// overLimits says which limits MEMORY.md is over, as the journal's reason:
// "MEMORY.md has 247 lines, over memory_max_lines 200".
func overLimits(b []byte, limit int64, maxLines int) string {
	var over []string
	if limit > 0 && int64(len(b)) > limit {
		size, max := policy.HumanApart(int64(len(b)), limit)
		over = append(over, fmt.Sprintf("is %s, over memory_max_size %s", size, max))
	}
	if n := lineCount(b); maxLines > 0 && n > maxLines {
		over = append(over, fmt.Sprintf("has %d lines, over memory_max_lines %d", n, maxLines))
	}
	if len(over) == 0 {
		return fmt.Sprintf("MEMORY.md is %s and %d lines, within its limits", policy.Human(int64(len(b))), lineCount(b))
	}
	return "MEMORY.md " + strings.Join(over, " and ")
}

// fits reports whether MEMORY.md is within its limits.
func fits(b []byte, o *Options) bool {
	return int64(len(b)) <= int64(o.MemoryMaxSize) && (o.MemoryMaxLines <= 0 || lineCount(b) <= o.MemoryMaxLines)
}

func lineCount(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// prunedLink is the line MEMORY.md keeps to its topic file of moved facts.
func prunedLink(name string) string {
	return "- Older facts, moved out by memwatch to keep this file within what the agent loads: [" + name + "](" + name + ")\n"
}

// withLink ends next with the link to the topic file (if it lacks it),
// moving more of the oldest facts out for room.
func withLink(next []byte, name string, limit int64, maxLines int) ([]byte, pruneReport) {
	if bytes.Contains(next, []byte("]("+name+")")) {
		return next, pruneReport{}
	}
	link := prunedLink(name)
	lines := maxLines
	if lines > 0 {
		lines = max(lines-2, 1) // the link and the blank line before it
	}
	next, rep := Prune(next, limit-int64(len(link))-1, lines)
	return append(withBlankLine(next), link...), rep
}

// CompactRequest implements layout.Compactable: the rewrite that brings
// MEMORY.md under memory_max_size (even under it with force). Facts the
// compression drops are moved, not lost: they are appended first to the
// month's pruned-facts file in archive_dir (MEMORY-pruned-YYYY-MM.md, which
// the agent can read), and the guard checks that every fact gone from
// MEMORY.md is in it. The LLM prunes and merges when there is one; the
// offline compressor drops duplicate lines and empty sections, then moves
// the oldest facts (the first in the file) out until it fits.
func (Layout) CompactRequest(env *layout.Env, root *confine.Root, force bool) (rewrite.Request, *state.Record) {
	o := OptionsOf(env.Store)
	limit, maxLines := int64(o.MemoryMaxSize), o.MemoryMaxLines
	f := filesOf(env.Store)
	rec := env.Record(RuleCompress)
	pruned := filepath.Join(f.archive, rotate.Monthly("MEMORY-pruned", env.Now()))
	if o.LinkPruned {
		pruned = filepath.Join(f.dir, rotate.Monthly("memory-older", env.Now()))
	}
	return rewrite.Request{Root: root, Target: f.memory(), Archive: f.archiveFor("MEMORY", env.Now()),
		Compute: func(ctx context.Context, old []byte) ([]byte, error) {
			rec.Reason = overLimits(old, limit, maxLines)
			if force && fits(old, o) {
				rec.Reason = "memwatch compact"
			}
			if fits(old, o) && !force {
				return nil, rewrite.ErrUnchanged
			}
			var next []byte
			if env.LLM != nil {
				reply, err := env.LLM.Complete(ctx, compact.Prompt{System: fmt.Sprintf(compressSystem, limit, limit), User: compact.Data("MEMORY.md", string(old))})
				rec.Tokens += reply.Tokens
				switch {
				case err == nil:
					next = []byte(strings.TrimSpace(reply.Text) + "\n")
					gerr := guardCompressed(old, next, limit)
					if gerr == nil {
						gerr = guardPinned(old, next)
					}
					if gerr != nil {
						if force {
							return next, gerr // memwatch compact reports the rejection
						}
						rec.Reason += fmt.Sprintf("; llm answer rejected (%v), heuristic compressor used", gerr)
						next = nil
					}
				case ctx.Err() != nil:
					return nil, err
				default:
					rec.Reason += fmt.Sprintf("; llm unavailable (%v), heuristic compressor used", err)
				}
			}
			var rep pruneReport
			if next == nil {
				next, rep = Prune(CompressHeuristic(old), limit, maxLines)
				rec.Reason += "; " + rep.String()
			} else if !fits(next, o) {
				next, rep = Prune(next, limit, maxLines)
				rec.Reason += "; then " + rep.String()
			}
			if rep.pinnedOver {
				env.Log.Warn("MEMORY.md's pinned lines alone are over its limits: memwatch leaves them", "root", root.Path(), "pinned", rep.pinned, "memory_max_size", limit, "memory_max_lines", maxLines)
			}
			if o.LinkPruned && len(movedUnits(old, next)) > 0 {
				var more pruneReport
				next, more = withLink(next, filepath.Base(pruned), limit, maxLines)
				if n := more.dated + more.facts + more.rules; n > 0 {
					rec.Reason += fmt.Sprintf("; %d more for the line linking them", n)
				}
			}
			if bytes.Equal(next, old) {
				return nil, rewrite.ErrUnchanged
			}
			// What goes, goes whole to the topic file: checked before
			// anything is written, so a refused compression leaves both
			// files as they were.
			moved := movedUnits(old, next)
			add := movedText(moved)
			if err := guardMoved(old, next, add); err != nil {
				return nil, err
			}
			if len(moved) == 0 || layout.IsDryRun(ctx) {
				return next, nil
			}
			rec2, err := keepPruned(ctx, env, root, pruned, add)
			if err != nil {
				return nil, err
			}
			if rec2 > 0 {
				// One action: undoing either change undoes both.
				rec.Key = rewrite.WithKey(rec2)
			}
			have, err := root.ReadFile(pruned)
			if err != nil {
				return nil, err
			}
			for _, u := range moved {
				if !bytes.Contains(have, []byte(strings.TrimRight(u.text, "\n"))) {
					return nil, &rewrite.Rejected{Reason: fmt.Sprintf("%q would leave MEMORY.md without being in %s", clip(strings.TrimSpace(u.text)), pruned)}
				}
			}
			rec.Reason = fmt.Sprintf("%s; %d unit(s) (items, paragraphs, code blocks, tables) moved whole to %s", rec.Reason, countContent(moved), pruned)
			return next, nil
		}}, rec
}

// countContent counts the units that are not headings.
func countContent(us []unit) int {
	n := 0
	for _, u := range us {
		if u.Content() {
			n++
		}
	}
	return n
}

// guardMoved checks a compression before anything is written: every line
// of old is in next or in what the topic file gets (add), and no file is
// left with a code block that does not close (unless old had one).
func guardMoved(old, next []byte, add string) error {
	have := map[string]bool{}
	for _, src := range [][]byte{next, []byte(add)} {
		for _, l := range markdown.Lines(src) {
			have[strings.TrimRight(l, "\r\n")] = true
		}
	}
	for _, l := range markdown.Lines(old) {
		if k := strings.TrimRight(l, "\r\n"); strings.TrimSpace(k) != "" && !have[k] {
			return &rewrite.Rejected{Reason: fmt.Sprintf("the line %q would be in neither MEMORY.md nor the file of moved facts", clip(strings.TrimSpace(k)))}
		}
	}
	if markdown.FencesBalance(old) && !markdown.FencesBalance(next) {
		return &rewrite.Rejected{Reason: "a code block's fences would not balance in MEMORY.md"}
	}
	if !markdown.FencesBalance([]byte(add)) {
		return &rewrite.Rejected{Reason: "a code block's fences would not balance in the file of moved facts"}
	}
	return nil
}

// keepPruned appends what a compression moved (add: whole units under
// their sections' headings, movedText) to the pruned-facts file, under a
// dated heading: an append, journaled like every write.
func keepPruned(ctx context.Context, env *layout.Env, root *confine.Root, pruned, add string) (int64, error) {
	r := env.Record(RuleCompress)
	r.Reason = "facts moved out of MEMORY.md"
	out, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: pruned, AllowCreate: true, From: []string{filesOf(env.Store).memory()},
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			if strings.TrimSpace(add) == "" {
				return nil, rewrite.ErrUnchanged
			}
			next := append([]byte{}, old...)
			if len(next) == 0 {
				next = append(next, "# Facts pruned from MEMORY.md\n\nmemwatch moves here what it takes out of MEMORY.md to keep it under its size limit.\n"...)
			}
			if !markdown.FencesBalance(next) {
				next = append(withBlankLine(next), "```\n"...) // a block an agent left open ends before what comes
			}
			next = withBlankLine(next)
			next = append(next, "## "+env.Now().Format("2006-01-02 15:04")+"\n\n"...)
			next = append(next, add...)
			return next, nil
		}}, r)
	return out.Record, err
}

// guardCompressed checks an LLM's compressed MEMORY.md: clean text, not
// empty, smaller than before. Which facts it dropped is no reason to
// refuse it: they are moved to the pruned-facts file, not lost.
func guardCompressed(old, next []byte, limit int64) error {
	if err := compact.CheckText(next); err != nil {
		return err
	}
	if len(bytes.TrimSpace(next)) == 0 && len(bytes.TrimSpace(old)) > 0 {
		return &rewrite.Rejected{Reason: "compressed MEMORY.md is empty"}
	}
	if len(next) >= len(old) {
		return &rewrite.Rejected{Reason: fmt.Sprintf("compressed MEMORY.md is %d bytes, no smaller than the %d before", len(next), len(old))}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return strings.ToValidUTF8(s[:80], "") + "…"
	}
	return s
}

// CompressHeuristic drops items and paragraphs that repeat one before
// them word for word (the first stays; a code block or a table is never
// touched: a line repeated inside one is code).
func CompressHeuristic(src []byte) []byte {
	lines := markdown.Lines(src)
	seen := map[string]bool{}
	var b strings.Builder
	for _, u := range markdown.Blocks(lines) {
		text := u.Lines(lines)
		if u.Kind == markdown.BlockItem || u.Kind == markdown.BlockParagraph {
			k := strings.TrimSpace(text)
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		b.WriteString(text)
	}
	return []byte(b.String())
}

// factLines are the lines a memory update must not lose too many of.
func factLines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, t)
		}
	}
	return out
}

// GuardMemory checks a new MEMORY.md from the LLM: clean text, at most
// maxLoss of the fact lines gone, and under limit unless the old one was
// over it and the new one is smaller (compression that could not finish).
func GuardMemory(old, next []byte, limit int64, maxLoss float64) error {
	if err := compact.CheckText(next); err != nil {
		return err
	}
	if len(bytes.TrimSpace(next)) == 0 && len(bytes.TrimSpace(old)) > 0 {
		return &rewrite.Rejected{Reason: "memory update is empty"}
	}
	if err := compact.CheckLoss("MEMORY.md fact lines", factLines(old), factLines(next), maxLoss); err != nil {
		return err
	}
	if err := guardPinned(old, next); err != nil {
		return err
	}
	if limit > 0 && int64(len(next)) > limit && len(next) >= len(old) {
		return &rewrite.Rejected{Reason: fmt.Sprintf("memory update is %d bytes, over memory_max_size %d, and no smaller than before", len(next), limit)}
	}
	return nil
}
