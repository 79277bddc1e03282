// Package sessiondetail is the session-detail layout (docs/layouts.md): a session
// directory with messages.jsonl (the raw log), working-memory/overview.md
// (always in the agent's context; the agent owns it) and
// working-memory/detail/*.md (summaries and notes). memwatch writes
// compaction summaries into detail/ and answers recall queries over detail/
// and the raw log, so the agent's context can stay at overview + recent turns.
package sessiondetail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
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
	"github.com/memwatch/memwatch/spool"
)

// File names of the layout, relative to the session directory.
const (
	MessagesFile = "messages.jsonl"
	OverviewFile = "working-memory/overview.md"
	DetailDir    = "working-memory/detail"
)

// Rule names, as they appear in the journal.
const (
	RuleSummarize = "summarize"
	RuleOverview  = "overview-guard"
)

// Layout is the session-detail layout.
type Layout struct{}

// Name implements layout.Layout.
func (Layout) Name() string { return "session-detail" }

// Rules implements layout.Layout.
func (Layout) Rules() []layout.Rule {
	return []layout.Rule{
		{Name: RuleSummarize, Targets: summarizeTargets, Run: runSummarize, Every: func(s *policy.Store) time.Duration {
			return min(max(OptionsOf(s).SessionIdle/2, time.Second), 5*time.Minute)
		}},
		{Name: RuleOverview, Targets: overviewTargets, Run: runOverview},
		layout.ScrubRule(func(s *policy.Store) (bool, time.Duration) { o := OptionsOf(s); return o.ScrubSecrets, o.SessionIdle }),
	}
}

// consumer names summarizing's progress through the log in the spool.
const consumer = RuleSummarize

// errRefused means a summary had nowhere to go: detail/ leads out of the
// root or is not the owner's to write. It was reported; the job stops.
var errRefused = errors.New("detail directory refused")

// plan decides how far to summarize now (0: not yet): summary_every new
// messages at a time, and the rest once the session is quiet.
func plan(ctx context.Context, env *layout.Env, root *confine.Root, log spool.Log) (int64, string, error) {
	done, err := env.Spool.Progress(ctx, consumer, log.ID)
	if err != nil {
		return 0, "", err
	}
	pending, err := env.Spool.Messages(ctx, log.ID, done, log.Seq)
	if err != nil || pending == 0 {
		return 0, "", err
	}
	o := OptionsOf(env.Store)
	every := int64(o.SummaryEvery)
	if pending >= every {
		end, err := env.Spool.NthMessage(ctx, log.ID, done, every)
		return end, fmt.Sprintf("%d messages pending >= summary_every %d", pending, every), err
	}
	if env.Idle(root, log, o.SessionIdle) {
		return log.Seq, fmt.Sprintf("session idle for %s; %d message(s) pending", o.SessionIdle, pending), nil
	}
	return 0, "", nil
}

func summarizeTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	log, err := env.CaptureLog(ctx, root, MessagesFile)
	if env.Refused(root, RuleSummarize, MessagesFile, err) || err != nil {
		return nil, nil
	}
	env.Accepted(root, MessagesFile)
	if end, _, err := plan(ctx, env, root, log); err == nil && end > 0 {
		return []string{MessagesFile}, nil
	}
	return nil, nil
}

// runSummarize writes one summary per summary_every new messages, and one
// for the rest when the session has gone quiet. The spool's progress
// already makes "nothing new" exact, so it asks for no cooldown: one would
// only delay the summary of a session that just went quiet.
func runSummarize(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	for ctx.Err() == nil && !jobs.Stopping(ctx) {
		log, err := env.CaptureLog(ctx, root, MessagesFile)
		if err != nil {
			return jobs.Result{}, err
		}
		end, why, err := plan(ctx, env, root, log)
		if err != nil || end == 0 {
			return jobs.Result{}, err
		}
		if err := summarize(ctx, env, root, log, end, why); err != nil {
			switch {
			case errors.Is(err, errRefused), layout.IsRefusal(err):
				// Reported once (status, journal). No cooldown: trying again
				// costs nothing (no model call was made), and the summary
				// should come with the next change once detail/ is the
				// agent's own directory again.
				env.Refused(root, RuleSummarize, DetailDir, err)
				return jobs.Result{}, nil
			case errors.Is(err, rewrite.ErrConflict):
				return jobs.Result{}, jobs.Retry(err)
			}
			return jobs.Result{}, err
		}
	}
	return jobs.Result{}, ctx.Err()
}

// summarize writes the summary of the messages after the progress up to
// end. A marker with the range's content identity makes it exactly-once
// across crashes, whatever the agent does to its log.
func summarize(ctx context.Context, env *layout.Env, root *confine.Root, log spool.Log, end int64, why string) error {
	done, err := env.Spool.Progress(ctx, consumer, log.ID)
	if err != nil {
		return err
	}
	msgs, lines, next, err := env.ReadRange(ctx, log, done, end, compact.EstimateTokens(summarySystem)+800, nil)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return env.Spool.Commit(ctx, consumer, log.ID, max(next, end))
	}
	cite := spool.Cite(MessagesFile, lines)
	id := spool.RangeID(MessagesFile, lines)
	marker := "<!-- memwatch: " + cite + " range:" + id + " -->"
	if existing := findMarker(root, "range:"+id+" "); existing != "" {
		env.Log.Info("range already summarized; committing the progress", "root", root.Path(), "range", cite, "file", existing)
		return env.Spool.Commit(ctx, consumer, log.ID, next)
	}
	rec := env.Record(RuleSummarize)
	rec.Reason = fmt.Sprintf("%s (%s)", cite, why)
	title, content, keywords := "", "", []string(nil)
	if env.LLM != nil {
		title, content, keywords, err = summaryLLM(ctx, env, msgs, &rec.Tokens)
		if err != nil {
			rec.Reason += fmt.Sprintf(" (llm unavailable: %v; extractive summary used)", err)
			env.Log.Warn("llm summary failed; using the extractive summary", "root", root.Path(), "err", err)
		}
	}
	if content == "" {
		content = Extractive(msgs, 2000)
	}
	if len(keywords) == 0 {
		keywords = Keywords(msgs, 8)
	}
	now := env.Now()
	if title == "" {
		title = fmt.Sprintf("Session summary: %s (%s)", cite, now.Format("2006-01-02 15:04"))
	}
	kw, _ := json.Marshal(keywords)
	body := fmt.Sprintf("# %s\n\n<!--\nMETA:\n- created: %s\n- keywords: %s\n- source: %s\n-->\n\n## Content\n%s\n\nSource: %s\n%s\n",
		title, now.UTC().Format(time.RFC3339), kw, cite, strings.TrimSpace(content), cite, marker)
	name, err := freeName(root, now)
	if err != nil {
		if env.Refused(root, RuleSummarize, DetailDir, err) {
			return errRefused
		}
		return err
	}
	if _, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: name, AllowCreate: true, From: []string{layout.LogFile(log.Path)},
		Compute: func(_ context.Context, old []byte) ([]byte, error) {
			if len(old) > 0 {
				return nil, rewrite.ErrConflict // someone wrote that name meanwhile
			}
			return []byte(body), nil
		}}, rec); err != nil {
		return err
	}
	env.Log.Info("wrote session summary", "root", root.Path(), "file", name, "range", cite)
	return env.Spool.Commit(ctx, consumer, log.ID, next)
}

// findMarker returns the detail file holding marker, if any.
func findMarker(root *confine.Root, marker string) string {
	files, _ := root.Glob(DetailDir + "/*.md")
	for _, f := range files {
		if b, err := root.ReadFile(f); err == nil && strings.Contains(string(b), marker) {
			return f
		}
	}
	return ""
}

// freeName picks detail/YYYY-MM-DD-HHmm-summary.md, adding -2, -3 when
// taken. An error other than "does not exist" (detail/ is a symlink leading
// out of the root, say) is returned: there is no name to pick there.
func freeName(root *confine.Root, now time.Time) (string, error) {
	base := strings.TrimSuffix(rotate.Stamped(DetailDir, "", now), ".md") + "-summary"
	name := base + ".md"
	for i := 2; i < 10000; i++ {
		_, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
		name = fmt.Sprintf("%s-%d.md", base, i)
	}
	return "", fmt.Errorf("no free name for a summary in %s", DetailDir)
}

const summarySystem = `You summarize a stretch of an AI coding agent's conversation for its external memory (detail/ notes the agent searches later).
Return JSON with: "title" (a short topic title), "summary" (markdown: what the user asked, what was decided and why, what was done, files touched, open questions), "keywords" (5 to 8 lowercase search terms).
` + compact.DataNotice

func summaryLLM(ctx context.Context, env *layout.Env, msgs []layout.Message, tokens *int64) (title, content string, keywords []string, err error) {
	var conv strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&conv, "%s: %s\n", roleOf(m), m.Text)
	}
	cctx, cancel := context.WithTimeout(ctx, env.LLM.Timeout())
	defer cancel()
	reply, err := env.LLM.Complete(cctx, compact.Prompt{System: summarySystem, User: compact.Data("conversation", conv.String()), JSON: true})
	*tokens += reply.Tokens
	if err != nil {
		return "", "", nil, err
	}
	f, _, err := compact.ParseFields(reply.Text, "title", "summary", "keywords")
	if err != nil {
		return "", "", nil, err
	}
	if strings.TrimSpace(f["summary"]) == "" {
		return "", "", nil, fmt.Errorf("the model's answer has no summary")
	}
	if err := compact.CheckText([]byte(f["summary"] + f["title"])); err != nil {
		return "", "", nil, err
	}
	_ = json.Unmarshal([]byte(f["keywords"]), &keywords)
	return strings.TrimSpace(strings.ReplaceAll(f["title"], "\n", " ")), f["summary"], keywords, nil
}

func roleOf(m layout.Message) string {
	switch {
	case m.Raw:
		return "raw"
	case m.Meta:
		return "meta"
	}
	return m.Role
}

var pathRE = regexp.MustCompile(`[A-Za-z0-9_.\-/]+\.(?:go|md|py|ts|tsx|js|jsx|json|ya?ml|toml|txt|rs|java|kt|c|h|cc|cpp|sh|sql|html|css|proto)\b`)

// Extractive is the heuristic summary: the user's requests, the tools used,
// the files mentioned and the last assistant answer, cut to budget characters.
func Extractive(msgs []layout.Message, budget int) string {
	var requests []string
	tools := map[string]int{}
	files := map[string]bool{}
	var fileOrder []string
	lastAnswer := ""
	for _, m := range msgs {
		for _, t := range m.Tools {
			tools[t]++
		}
		for _, f := range pathRE.FindAllString(m.Text, -1) {
			if !files[f] {
				files[f] = true
				fileOrder = append(fileOrder, f)
			}
		}
		switch {
		case m.Role == "user" && !strings.HasPrefix(m.Text, "[tool result]"):
			requests = append(requests, firstSentence(m.Text, 160))
		case m.Role == "assistant" && strings.TrimSpace(m.Text) != "":
			lastAnswer = m.Text
		}
	}
	var b strings.Builder
	if len(requests) > 0 {
		b.WriteString("User requests:\n")
		for _, r := range requests {
			b.WriteString("- " + r + "\n")
		}
	}
	if len(tools) > 0 {
		names := make([]string, 0, len(tools))
		for t := range tools {
			names = append(names, t)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, t := range names {
			parts[i] = fmt.Sprintf("%s (%d)", t, tools[t])
		}
		b.WriteString("\nTools used: " + strings.Join(parts, ", ") + "\n")
	}
	if len(fileOrder) > 0 {
		if len(fileOrder) > 15 {
			fileOrder = fileOrder[:15]
		}
		b.WriteString("\nFiles touched: " + strings.Join(fileOrder, ", ") + "\n")
	}
	if lastAnswer != "" {
		b.WriteString("\nLast answer: " + cut(strings.Join(strings.Fields(lastAnswer), " "), 500) + "\n")
	}
	return cut(b.String(), budget)
}

func firstSentence(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	for _, sep := range []string{". ", "? ", "! "} {
		if i := strings.Index(s, sep); i > 0 && i < n {
			return s[:i+1]
		}
	}
	return cut(s, n)
}

// cut shortens s to at most n characters, on a rune boundary.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`the and for that this with you are was have not but can will what when which from they there their them then than
		your our out use using used also just into about would should could like some more been were has had how its it's let lets i'm don't
		yes okay sure here need make want get got one two all any each only now new see look file files tool result user assistant please thanks`) {
		stopwords[w] = true
	}
}

var wordRE = regexp.MustCompile(`[a-z][a-z0-9_\-]{2,}`)

// Keywords are the n most frequent non-trivial words of the range.
func Keywords(msgs []layout.Message, n int) []string {
	freq := map[string]int{}
	for _, m := range msgs {
		for _, w := range wordRE.FindAllString(strings.ToLower(m.Text), -1) {
			if !stopwords[w] {
				freq[w]++
			}
		}
	}
	words := make([]string, 0, len(freq))
	for w := range freq {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool {
		if freq[words[i]] != freq[words[j]] {
			return freq[words[i]] > freq[words[j]]
		}
		return words[i] < words[j]
	})
	if len(words) > n {
		words = words[:n]
	}
	return words
}

func overviewTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	limit := int64(OptionsOf(env.Store).OverviewMaxSize)
	if limit <= 0 {
		return nil, nil
	}
	fi, err := root.Stat(OverviewFile)
	if err != nil || fi.Size() <= limit {
		env.Warnings.Clear(root.Path(), RuleOverview)
		return nil, nil
	}
	b, err := root.ReadFile(OverviewFile)
	if env.Refused(root, RuleOverview, OverviewFile, err) || err != nil {
		return nil, nil
	}
	env.Warnings.Set(root.Path(), RuleOverview, overviewOver(root.Join(OverviewFile), int64(len(b)), int64(limit), "memwatch does not rewrite the agent's overview"))
	if env.Seen(ctx, root.Path(), RuleOverview, OverviewFile, rewrite.Hash(b)) {
		return nil, nil
	}
	return []string{OverviewFile}, nil
}

// runOverview journals, once per content, that the overview is oversize.
func runOverview(ctx context.Context, env *layout.Env, root *confine.Root, target string) (jobs.Result, error) {
	b, err := root.ReadFile(OverviewFile)
	if err != nil {
		return jobs.Result{}, nil
	}
	limit := OptionsOf(env.Store).OverviewMaxSize
	return jobs.Result{CoolDown: true}, env.Note(ctx, root.Path(), RuleOverview, OverviewFile, rewrite.Hash(b), int64(len(b)),
		overviewOver(OverviewFile, int64(len(b)), int64(limit), "the agent owns it, so memwatch only warns"))
}

// Logs implements layout.SessionLogs.
func (Layout) Logs(*policy.Store) []recall.Source { return Sources[1:] }

// Sources implements layout.Searchable: session-detail's recall_memory searches
// the notes in detail/ and the raw log.
func (Layout) Sources(*policy.Store) []recall.Source { return Sources }

// Sources are what recall searches in a session directory.
var Sources = []recall.Source{
	{Glob: DetailDir + "/*.md", Kind: recall.Text, Label: "detail", Strip: "working-memory/"},
	{Glob: MessagesFile, Kind: recall.Log, Label: "messages"},
}

// overviewOver says overview.md is over its limit, and what memwatch does.
func overviewOver(name string, size, limit int64, does string) string {
	s, l := policy.HumanApart(size, limit)
	return fmt.Sprintf("%s is %s, over overview_max_size %s (%s)", name, s, l, does)
}
