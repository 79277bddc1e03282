package factsepisodes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/rotate"
	"github.com/memwatch/memwatch/state"
)

// Layout is the facts-episodes layout.
type Layout struct{}

// Name implements layout.Layout.
func (Layout) Name() string { return "facts-episodes" }

// Rule names, as they appear in the journal.
const (
	RuleSummary = "summary-line"
	RuleIndex   = "index"
	RuleSplit   = "episode-split"
)

// Rules implements layout.Layout: summaries first, so the index job that
// follows in the root's queue sees them.
func (Layout) Rules() []layout.Rule {
	return []layout.Rule{
		{Name: RuleSplit, Targets: splitTargets, Run: runSplit},
		{Name: RuleSummary, Targets: summaryTargets, Run: runSummary},
		{Name: RuleOld, Schedule: "30 3 * * *", Targets: oldTargets, Run: runOld},
		{Name: RuleIndex, Targets: indexTargets, Run: runIndex},
	}
}

// RuleOld compresses old episode months (summarize_after, llm only).
const RuleOld = "episode-summarize"

func oldTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	after := OptionsOf(env.Store).SummarizeAfter
	if after <= 0 {
		return nil, nil
	}
	if env.LLM == nil {
		if _, warned, _ := env.DB.Get(ctx, "summarize-after-heuristic", env.Store.Name); !warned {
			env.Log.Warn("summarize_after needs the llm compactor (old episodes are only compressed by an LLM); nothing is done")
			env.Logged(env.DB.Put(ctx, "summarize-after-heuristic", env.Store.Name, []byte("1")), "DB.Put")
		}
		return nil, nil
	}
	var out []string
	ms, _ := root.Glob(EpisodesDir + "/*.md")
	for _, m := range ms {
		base := filepath.Base(m)
		if !monthRE.MatchString(base) {
			continue
		}
		start, err := time.ParseInLocation("2006-01", strings.TrimSuffix(base, ".md"), time.Local)
		if err == nil && start.AddDate(0, 1, 0).Add(after).Before(env.Now()) {
			out = append(out, filepath.Join(EpisodesDir, base))
		}
	}
	return out, nil
}

const oldSystem = `You compress one month of an AI agent's episode memory into a single higher-level entry for the year's summary file.
Return only markdown of this form, no code fences:
## YYYY-MM
- Summary: at most 12 words, shorthand
- Lessons: the lessons and solutions still worth remembering, as sub-bullets
` + compact.DataNotice

// runOld adds the month's higher-level entry to episodes/YYYY-summary.md,
// then moves the month file to episodes/archive/.
func runOld(ctx context.Context, env *layout.Env, root *confine.Root, rel string) (jobs.Result, error) {
	month := strings.TrimSuffix(filepath.Base(rel), ".md")
	b, err := root.ReadFile(rel)
	if err != nil {
		env.Refused(root, RuleOld, rel, err)
		return jobs.Result{}, nil
	}
	yearFile := filepath.Join(EpisodesDir, month[:4]+"-summary.md")
	heading := "## " + month
	if !strings.Contains(read(root, yearFile), heading+"\n") {
		rec := env.Record(RuleOld)
		reply, err := env.LLM.Complete(ctx, compact.Prompt{System: oldSystem, User: compact.Data(rel, string(b))})
		rec.Tokens = reply.Tokens
		if err != nil {
			return jobs.Result{}, jobs.Retry(err) // llm only: wait and try again (budget, outage)
		}
		entry := strings.TrimSpace(reply.Text)
		if err := compact.CheckText([]byte(entry)); err != nil {
			return jobs.Result{}, err
		}
		if !strings.HasPrefix(entry, heading) {
			entry = heading + "\n" + strings.TrimPrefix(entry, "## ")
		}
		if _, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: yearFile, AllowCreate: true, From: []string{rel},
			Compute: func(_ context.Context, old []byte) ([]byte, error) {
				if strings.Contains(string(old), heading+"\n") {
					return nil, rewrite.ErrUnchanged
				}
				next := old
				if len(next) == 0 {
					next = []byte("# " + month[:4] + " Episodes (summarized)\n")
				}
				return append(withBlank(append([]byte{}, next...)), entry+"\n"...), nil
			}}, rec); err != nil {
			return jobs.Result{}, err
		}
	}
	rec := env.Record(RuleOld)
	rec.Reason = "summarized into " + yearFile
	err = env.Rewriter.Remove(ctx, root, rel, filepath.Join(EpisodesDir, "archive", month+".md"), rec)
	return jobs.Result{Changed: true}, err
}

func read(root *confine.Root, rel string) string {
	b, _ := root.ReadFile(rel)
	return string(b)
}

// sigNS remembers, per file, the entries its summary line summarizes.
const sigNS = "summary-sig"

func memoryFiles(root *confine.Root) []string {
	var out []string
	for _, dir := range []string{FactsDir, EpisodesDir} {
		ms, _ := root.Glob(dir + "/*.md")
		out = append(out, ms...)
	}
	return out
}

func isEpisodes(rel string) bool { return filepath.Dir(rel) == EpisodesDir }

func summaryTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	var out []string
	for _, rel := range memoryFiles(root) {
		b, err := root.ReadFile(rel)
		if env.Refused(root, RuleSummary, rel, err) || err != nil {
			continue
		}
		env.Accepted(root, rel)
		d := Parse(b, isEpisodes(rel))
		key := root.Path() + "\x00" + rel
		last, seen, _ := env.DB.Get(ctx, sigNS, key)
		switch {
		case d.Summary == "" && len(d.Entries) > 0:
			out = append(out, rel)
		case !seen:
			// A summary memwatch did not write (by hand, or by the agent) is
			// kept until the entries it summarizes change.
			env.Logged(env.DB.Put(ctx, sigNS, key, []byte(d.Signature())), "DB.Put")
		case string(last) != d.Signature():
			out = append(out, rel)
		}
	}
	return out, nil
}

func runSummary(ctx context.Context, env *layout.Env, root *confine.Root, rel string) (jobs.Result, error) {
	words := OptionsOf(env.Store).SummaryWords
	key := root.Path() + "\x00" + rel
	rec := env.Record(RuleSummary)
	sig := ""
	out, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: rel,
		Archive: rotate.Beside(rewrite.DefaultArchiveDir, rel, env.Now()),
		Compute: func(ctx context.Context, old []byte) ([]byte, error) {
			d := Parse(old, isEpisodes(rel))
			sig = d.Signature()
			if last, ok, _ := env.DB.Get(ctx, sigNS, key); d.Summary != "" && ok && string(last) == sig {
				return nil, rewrite.ErrUnchanged
			}
			rec.Reason = rel + " has no > Summary: line"
			if d.Summary != "" {
				rec.Reason = rel + " changed since its > Summary: line was written"
			}
			summary := d.HeuristicSummary(words, isEpisodes(rel))
			if env.LLM != nil && len(d.Entries) > 0 {
				if s, tokens, err := summaryLLM(ctx, env, d, words); err == nil {
					summary = s
					rec.Tokens += tokens
				} else {
					rec.Reason += fmt.Sprintf("; llm unavailable (%v), heuristic summary used", err)
				}
			}
			if summary == d.Summary || summary == "" {
				return nil, rewrite.ErrUnchanged
			}
			return d.WithSummary(summary), nil
		}}, rec)
	if err != nil {
		if errors.Is(err, rewrite.ErrConflict) {
			return jobs.Result{}, jobs.Retry(err)
		}
		return jobs.Result{}, err
	}
	if sig != "" {
		env.Logged(env.DB.Put(ctx, sigNS, key, []byte(sig)), "DB.Put")
	}
	return jobs.Result{Changed: out.Status == state.Done}, nil
}

const summarySystem = `You write the one-line summary of a memory file for an AI agent's memory index.
Ultra-concise shorthand: arrows, abbreviations, commas; at most %d words; no trailing period. Return only the summary.
` + compact.DataNotice

func summaryLLM(ctx context.Context, env *layout.Env, d *Doc, words int) (string, int64, error) {
	var b strings.Builder
	for _, e := range d.Entries {
		b.WriteString("- " + e.Title)
		if e.Summary != "" {
			b.WriteString(": " + e.Summary)
		}
		b.WriteString("\n")
	}
	reply, err := env.LLM.Complete(ctx, compact.Prompt{System: fmt.Sprintf(summarySystem, words), User: compact.Data("entries", b.String())})
	if err != nil {
		return "", reply.Tokens, err
	}
	s := strings.Join(strings.Fields(strings.Trim(strings.TrimSpace(reply.Text), "\"`")), " ")
	if err := compact.CheckText([]byte(s)); err != nil || s == "" {
		return "", reply.Tokens, fmt.Errorf("unusable summary %q", s)
	}
	return leadingPhrases(s, words), reply.Tokens, nil
}

func indexTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	name := OptionsOf(env.Store).IndexFile
	if name == "" {
		return nil, nil
	}
	want, err := renderIndex(root, name)
	if err != nil {
		return nil, nil
	}
	have, _ := root.ReadFile(name)
	if string(have) == want {
		return nil, nil
	}
	return []string{name}, nil
}

func renderIndex(root *confine.Root, name string) (string, error) {
	es, _, err := Index(root, name)
	if err != nil {
		return "", err
	}
	return FormatIndex(es), nil
}

func runIndex(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	rec := env.Record(RuleIndex)
	owned := ""
	if last, ok, _ := env.DB.LastFor(ctx, root.Path(), RuleIndex, target, state.Done); ok {
		owned = last.AfterSHA
	}
	// INDEX.md is as private as the most private file it lists.
	var from []string
	if es, _, err := Index(root, target); err == nil {
		for _, e := range es {
			from = append(from, e.Path)
		}
	}
	_, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: target, AllowCreate: true, OwnedSHA: owned, From: from,
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			s, err := renderIndex(root, target)
			rec.Reason = fmt.Sprintf("%s out of date: %d line(s) differ from the entries of facts/ and episodes/", target, differingLines(old, []byte(s)))
			if old == nil {
				rec.Reason = target + " missing: written from the entries of facts/ and episodes/"
			}
			return []byte(s), err
		}}, rec)
	return jobs.Result{}, err
}

var monthRE = regexp.MustCompile(`^\d{4}-\d{2}\.md$`)

func splitTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	limit := int64(OptionsOf(env.Store).EpisodesMaxSize)
	if limit <= 0 {
		return nil, nil
	}
	var out []string
	ms, _ := root.Glob(EpisodesDir + "/*.md")
	for _, rel := range ms {
		fi, err := root.Stat(rel)
		if err != nil || fi.Size() <= limit || !monthRE.MatchString(filepath.Base(rel)) {
			continue
		}
		b, err := root.ReadFile(rel)
		if env.Refused(root, RuleSplit, rel, err) || err != nil {
			continue
		}
		if !env.Seen(ctx, root.Path(), RuleSplit, rel, rewrite.Hash(b)) {
			out = append(out, rel)
		}
	}
	return out, nil
}

// runSplit moves the dated entries of an oversize episode month into
// episodes/YYYY-MM-Wnn.md by ISO week. Week files are written first (an
// entry already there is not added again), then the month file keeps its
// title and the undated entries, its pre-image archived: a crash in between
// leaves nothing lost, and the next run finishes the move.
func runSplit(ctx context.Context, env *layout.Env, root *confine.Root, rel string) (jobs.Result, error) {
	month := strings.TrimSuffix(filepath.Base(rel), ".md")
	b, err := root.ReadFile(rel)
	if err != nil {
		return jobs.Result{}, nil
	}
	d := Parse(b, true)
	byWeek := map[string][]EntryInfo{}
	var order []string
	for _, e := range d.Entries {
		if w, ok := weekFile(month, e.Date); ok {
			if byWeek[w] == nil {
				order = append(order, w)
			}
			byWeek[w] = append(byWeek[w], e)
		}
	}
	if len(order) == 0 {
		return jobs.Result{CoolDown: true}, env.Note(ctx, root.Path(), RuleSplit, rel, rewrite.Hash(b), int64(len(b)),
			fmt.Sprintf("%s is over episodes_max_size but no entry has a '- Date: YYYY-MM-DD' of %s to split by", rel, month))
	}
	for _, w := range order {
		entries := byWeek[w]
		title := fmt.Sprintf("# %s Week %s Episodes\n", month, strings.TrimSuffix(w[len(w)-6:], ".md"))
		_, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: w, AllowCreate: true, From: []string{rel},
			Compute: func(_ context.Context, old []byte) ([]byte, error) {
				next := append([]byte{}, old...)
				if len(next) == 0 {
					next = []byte(title)
				}
				have := map[string]bool{}
				for _, e := range Parse(old, true).Entries {
					have[entryKey(e.Raw)] = true
				}
				added := 0
				for _, e := range entries {
					if have[entryKey(e.Raw)] {
						continue
					}
					next = withBlank(next)
					next = append(next, strings.TrimRight(string(e.Raw), "\n")+"\n"...)
					added++
				}
				if added == 0 {
					return nil, rewrite.ErrUnchanged
				}
				return next, nil
			}}, splitRec(env, rel, month))
		if err != nil {
			return jobs.Result{}, err
		}
	}
	_, err = env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: rel,
		Archive: rotate.Precise(filepath.Join(EpisodesDir, "archive"), month, env.Now()),
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			cur := Parse(old, true)
			if len(cur.Entries) == 0 {
				return nil, rewrite.ErrUnchanged
			}
			filed := map[string]map[string]bool{}
			var kept [][]byte
			var weeks []string
			for _, e := range cur.Entries {
				if w, ok := weekFile(month, e.Date); ok {
					if filed[w] == nil {
						wb, _ := root.ReadFile(w)
						filed[w] = map[string]bool{}
						for _, we := range Parse(wb, true).Entries {
							filed[w][entryKey(we.Raw)] = true
						}
						weeks = append(weeks, strings.TrimSuffix(filepath.Base(w), ".md"))
					}
					if filed[w][entryKey(e.Raw)] {
						continue // safe in its week file
					}
				}
				kept = append(kept, e.Raw)
			}
			if len(kept) == len(cur.Entries) {
				return nil, rewrite.ErrUnchanged
			}
			head := Parse(old[:cur.Entries[0].Start], true)
			next := append([]byte{}, head.Src...)
			if len(kept) == 0 {
				next = head.WithSummary("split by ISO week → " + strings.Join(weeks, ", "))
			}
			for _, k := range kept {
				next = append(withBlank(next), k...)
			}
			return next, nil
		}}, splitRec(env, rel, month))
	return jobs.Result{Changed: true}, err
}

// splitRec is the record of a split of an oversize month.
func splitRec(env *layout.Env, rel, month string) *state.Record {
	rec := env.Record(RuleSplit)
	rec.Reason = fmt.Sprintf("%s over episodes_max_size %s: its entries filed by ISO week", rel, policy.Human(int64(OptionsOf(env.Store).EpisodesMaxSize)))
	return rec
}

// differingLines counts the lines of a and b that the other lacks.
func differingLines(a, b []byte) int {
	count := map[string]int{}
	for _, l := range strings.Split(string(a), "\n") {
		count[l]++
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if count[l] > 0 {
			count[l]--
		} else {
			n++
		}
	}
	for _, c := range count {
		n += c
	}
	return n
}

// entryKey identifies an entry regardless of trailing blank lines.
func entryKey(raw []byte) string {
	return strings.TrimRight(strings.ReplaceAll(string(raw), "\r\n", "\n"), " \t\n")
}

// withBlank makes b (owned by the caller) end with a blank line.
func withBlank(b []byte) []byte {
	switch {
	case len(b) == 0, strings.HasSuffix(string(b), "\n\n"):
		return b
	case strings.HasSuffix(string(b), "\n"):
		return append(b, '\n')
	}
	return append(b, '\n', '\n')
}

// Sources implements layout.Searchable: facts and episodes, nested
// categories too.
func (Layout) Sources(*policy.Store) []recall.Source {
	return []recall.Source{
		{Glob: FactsDir + "/*.md", Kind: recall.Text, Label: "facts"},
		{Glob: FactsDir + "/*/*.md", Kind: recall.Text, Label: "facts"},
		{Glob: EpisodesDir + "/*.md", Kind: recall.Text, Label: "episodes"},
		// Months summarized into the year's file, moved aside whole.
		{Glob: EpisodesDir + "/" + ArchiveDirName + "/*.md{,.gz}", Kind: recall.Text, Label: "episodes", Moved: "archived"},
		{Glob: "*.md", Kind: recall.Text, Label: "memory"},
	}
}
