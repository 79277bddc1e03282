package memoryhistory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/memwatch/memwatch/compact"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/layout"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/session"
	"github.com/memwatch/memwatch/spool"
	"github.com/memwatch/memwatch/state"
)

// consumer names consolidation's progress through a log in the spool.
const consumer = RuleConsolidate

// plan decides how far a log should be consolidated now (0: not yet),
// counting messages as memory-history's agent does (metadata and invalid lines
// do not count), and says why.
//
// The memory-history design: "When messageCount > memoryWindow: cutoff = messages.length -
// keepCount; consolidate messages[lastConsolidated..cutoff];
// trimBefore(cutoff)". The seed's agent trims its session after each
// consolidation, so its count restarts at keep. memwatch never trims the
// agent's log, so it counts what the trim would have left: the messages
// pending after the last one consolidated. When more than window are
// pending, all but the newest keep go; the next consolidation comes
// window-keep messages later, as in the seed. Messages the agent itself
// trimmed or cleared from its file (/new) go at once; once the session is
// idle, the rest.
func plan(ctx context.Context, env *layout.Env, root *confine.Root, log spool.Log) (end int64, why string, err error) {
	done, err := env.Spool.Progress(ctx, consumer, log.ID)
	if err != nil {
		return 0, "", err
	}
	pending, err := env.Spool.Messages(ctx, log.ID, done, log.Seq)
	if err != nil || pending == 0 {
		return 0, "", err
	}
	o := OptionsOf(env.Store)
	window, keep := int64(o.Window), int64(o.keep())
	if gone, err := env.Spool.Messages(ctx, log.ID, done, log.LiveFrom-1); err != nil {
		return 0, "", err
	} else if gone > 0 {
		return log.LiveFrom - 1, fmt.Sprintf("%d message(s) trimmed or cleared by the agent", gone), nil
	}
	if pending > window {
		end, err := env.Spool.NthMessage(ctx, log.ID, done, pending-keep)
		if err != nil || end > done {
			return end, fmt.Sprintf("%d messages pending > window %d; consolidating %d, keeping the newest %d", pending, window, pending-keep, keep), err
		}
	}
	if env.Idle(root, log, o.SessionIdle) {
		return log.Seq, fmt.Sprintf("session idle for %s; %d message(s) pending", o.SessionIdle, pending), nil
	}
	return 0, "", nil
}

func consolidateTargets(ctx context.Context, env *layout.Env, root *confine.Root) ([]string, error) {
	captureTranscripts(ctx, env, root)
	var out []string
	o := OptionsOf(env.Store)
	// A slice of the root's logs at a time (a root may hold a million):
	// ErrMore, with the targets found so far, says the next evaluation
	// goes on from here.
	err := env.EachFile(ctx, root, RuleConsolidate, o.Sessions, o.SessionsExclude, func(rel string) error {
		if !o.Consolidate {
			// Captured for recall; the agent consolidates its own.
			if err := env.Capture(ctx, root, rel); !env.Refused(root, RuleConsolidate, rel, err) && err == nil {
				env.Accepted(root, rel)
			}
			return nil
		}
		log, err := env.CaptureLog(ctx, root, rel)
		if env.Refused(root, RuleConsolidate, rel, err) || err != nil {
			return nil
		}
		env.Accepted(root, rel)
		if end, _, err := plan(ctx, env, root, log); err == nil && end > 0 {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil || !o.Consolidate {
		return env.Batched(root, RuleConsolidate, out), err
	}
	// The conversations of transcript databases (transcripts.go).
	recs, err := env.Spool.RecordLogs(ctx, root.ID())
	if err != nil {
		return env.Batched(root, RuleConsolidate, out), err
	}
	for _, l := range recs {
		if end, _, err := plan(ctx, env, root, l); err == nil && end > 0 {
			out = append(out, l.Path)
		}
	}
	// Logs the agent deleted since: their messages are consolidated too.
	gone, more, err := env.GoneLogs(ctx, root, consumer)
	if err != nil {
		return env.Batched(root, RuleConsolidate, out), err
	}
	for _, l := range gone {
		if _, err := root.Lstat(l.Path); err == nil {
			continue // back again: the glob above has it
		}
		end, _, err := plan(ctx, env, root, l)
		switch {
		case err == nil && end > 0:
			out = append(out, l.Path)
		case err == nil:
			// Gone with no message pending: nothing will come of it (it
			// is not looked at again after a restart).
			env.Logged(env.Spool.Commit(ctx, consumer, l.ID, l.Seq), "commit the progress of a gone log")
		}
	}
	if more {
		err = layout.ErrMore
	}
	return env.Batched(root, RuleConsolidate, out), err
}

// runConsolidate consolidates a session log's pending ranges until the
// plan says wait (or, for layout.BatchTarget, the logs of the root's
// batch). The spool's progress makes "nothing new" exact, so it asks for
// no cooldown, which would only delay the idle consolidation.
func runConsolidate(ctx context.Context, env *layout.Env, root *confine.Root, rel string) (jobs.Result, error) {
	if rel == layout.BatchTarget {
		return runBatch(ctx, env, root)
	}
	for ctx.Err() == nil && !jobs.Stopping(ctx) {
		log, err := env.CaptureLog(ctx, root, rel)
		if err != nil {
			return jobs.Result{}, err
		}
		end, why, err := plan(ctx, env, root, log)
		if err != nil || end == 0 {
			return jobs.Result{}, err
		}
		if err := consolidateRange(ctx, env, root, log, end, why); err != nil {
			return jobs.Result{}, layout.Retryable(err)
		}
	}
	return jobs.Result{}, ctx.Err()
}

// consolidateRange consolidates the log's messages after the consumer's
// progress, up to end. The history entry carries a marker with the range's
// content identity, so a crash between writing and committing the progress
// never writes it twice, and a later range with the same line numbers is
// never taken for it.
func consolidateRange(ctx context.Context, env *layout.Env, root *confine.Root, log spool.Log, end int64, why string) error {
	_, err := consolidate(ctx, env, root, []*part{{log: log, end: end, why: why}})
	return err
}

// part is one log's range in a consolidation: its messages after the
// consumer's progress (done), up to end (the plan's); read up to next.
type part struct {
	log   spool.Log
	end   int64
	why   string
	done  int64
	next  int64
	msgs  []layout.Message
	lines []spool.Line
}

// consolidate writes one history entry (and memory update) for the ranges
// of parts, and moves each log's progress past what it read. Several parts
// are a batch (runBatch): the entry cites every range, and its marker's
// identity is that of all of them. The ranges read together stay within
// the store's max_read bytes and, with an LLM, its input tokens: parts
// past that are left as they are, and reported in left.
func consolidate(ctx context.Context, env *layout.Env, root *confine.Root, parts []*part) (left []*part, err error) {
	// The credentials masked in the conversation, masked in what is made
	// of it too, however it says them again.
	var told secrets.Values
	reserve := compact.EstimateTokens(consolidateSystem) + 1000
	room := int64(env.Store.MaxRead)
	if room <= 0 {
		room = int64(policy.DefaultMaxRead)
	}
	tokens := -1
	if env.LLM != nil {
		tokens = env.LLM.MaxInputTokens() - reserve
	}
	commits := map[int64]int64{}
	var read []*part
	for _, p := range parts {
		if len(read) > 0 && (room <= 0 || tokens == 0) {
			left = append(left, p)
			continue
		}
		if p.done, err = env.Spool.Progress(ctx, consumer, p.log.ID); err != nil {
			return nil, err
		}
		// The first message always goes in; an over-long one makes the
		// call fail and the raw fallback take over, never a cut mid-message.
		if p.msgs, p.lines, p.next, err = env.ReadRange(ctx, p.log, p.done, p.end, reserve, &told); err != nil {
			return nil, err
		}
		if len(p.msgs) == 0 {
			commits[p.log.ID] = max(p.next, p.end)
			continue
		}
		var size, toks int
		for _, m := range p.msgs {
			size += len(m.Text)
			toks += compact.EstimateTokens(m.Text) + 8
		}
		if len(read) > 0 && (int64(size) > room || tokens >= 0 && toks > tokens) {
			left = append(left, p)
			continue
		}
		room -= int64(size)
		if tokens >= 0 {
			tokens = max(0, tokens-toks)
		}
		read = append(read, p)
	}
	if len(read) == 0 {
		return left, env.Spool.CommitMany(ctx, consumer, commits)
	}
	for _, p := range read {
		commits[p.log.ID] = p.next
	}
	var cites, ids, whys []string
	var msgs []layout.Message
	for _, p := range read {
		cites = append(cites, spool.Cite(p.log.Path, p.lines))
		ids = append(ids, spool.RangeID(p.log.Path, p.lines))
		whys = append(whys, p.why)
		if len(read) > 1 {
			// Which conversation the messages that follow are of.
			msgs = append(msgs, layout.Message{Message: session.Message{Meta: true, Text: "session " + p.log.Path}})
		}
		msgs = append(msgs, p.msgs...)
	}
	cite, id, why := strings.Join(cites, ", "), ids[0], whys[0]
	if len(read) > 1 {
		id = fmt.Sprintf("%016x", xxhash.Sum64String(strings.Join(ids, ",")))
		why = fmt.Sprintf("%d sessions together (%s, ...)", len(read), whys[0])
	}
	// The marker names the range: an HTML comment in markdown, its own
	// field in a history.jsonl record.
	tag := fmt.Sprintf("memwatch: %s range:%s ", cite, id)
	marker := "<!-- " + tag + "-->"
	rec := env.Record(RuleConsolidate)
	rec.Reason = fmt.Sprintf("%s (%s)", clipCites(cites), why)

	f := filesOf(env.Store)
	format := f.format(root, OptionsOf(env.Store).HistoryFormat)
	// The entry is dated by the conversation's own time when it has one.
	when := env.Now()
	var latest time.Time
	for _, m := range msgs {
		if m.Time.After(latest) {
			latest = m.Time
		}
	}
	if !latest.IsZero() {
		when = latest
	}
	// Where the entry goes: HISTORY.md then its monthly file, both durable
	// before the progress moves; or the agent's own history file.
	var targets []string
	switch format {
	case FormatJSONL:
		targets = []string{filepath.Join(f.dir, HistoryJSONL)}
	case FormatDaily:
		targets = []string{f.dailyFile(when.Local())}
	default:
		targets = []string{f.history(), f.month(Entry{Time: when.UTC()})}
	}
	// Written before a crash, only the progress not committed: the journal
	// knows the range's key (an index lookup, however long the history);
	// a release that journaled no key left its marker at the file's end.
	key := "range:" + id
	written, err := env.DB.DoneKey(ctx, root.Path(), filepath.Clean(targets[0]), key)
	if err != nil {
		return nil, err
	}
	if written || strings.Contains(string(fileEnd(root, targets[0])), "range:"+id+" ") {
		env.Log.Info("range already consolidated; committing the progress", "root", root.Path(), "range", clipCites(cites))
		return left, env.Spool.CommitMany(ctx, consumer, commits)
	}
	if len(read) > 1 {
		// A batch is decided by what the evaluation found: after a crash
		// between its entry and its progress, the next run commits this
		// very batch instead of writing its ranges again in another.
		if err := saveBatch(ctx, env, root, savedBatch{Target: filepath.Clean(targets[0]), Key: key, Commits: commits}); err != nil {
			return nil, err
		}
	}
	memOld, _ := root.ReadFile(f.memory())
	// A rewind's abandoned branch is cited (its lines are consumed) but is
	// not the conversation: it goes to neither the summary nor the facts.
	active, abandoned := layout.ActiveBranch(msgs)
	if abandoned > 0 {
		rec.Reason += fmt.Sprintf("; %d message(s) of a branch abandoned by a rewind left out", abandoned)
	}
	entryText, memory, note := consolidateLLM(ctx, env, rec, memOld, active, &told)
	fallback := entryText == ""
	if fallback {
		entryText = rawFallback(env, active)
		if len(read) > 1 {
			entryText = batchFallback(env, read)
		}
		if note == "" {
			note = " (raw fallback: no llm compactor configured)"
		}
	}
	var from []string
	for _, p := range read {
		from = append(from, layout.LogFile(p.log.Path))
	}
	// What memwatch writes into memory never holds a credential a tool
	// printed into the conversation (the LLM's answer is masked already).
	entryText = told.Mask(entryText)
	heading := when.UTC().Format("2006-01-02T15:04:05.000Z")
	raw := []byte("## " + heading + "\n" + strings.TrimSpace(entryText) + "\n" + marker + "\n")
	var sessionOf string
	if format == FormatJSONL {
		sessionOf = sessionKey(root, read[0].log.Path)
	}
	for _, target := range targets {
		r := env.Record(RuleConsolidate)
		r.Reason, r.Tokens, r.Key = rec.Reason+note, rec.Tokens, key
		rec.Tokens = 0 // count the tokens once
		// A pure append: only the file's end is read, however long the
		// history (rewrite.Request.Append).
		_, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: target, AllowCreate: true, From: from,
			Append: func(_ context.Context, end []byte) ([]byte, error) {
				if strings.Contains(string(end), "range:"+id+" ") {
					return nil, rewrite.ErrUnchanged // written by a release that journaled no key
				}
				if format == FormatJSONL {
					return jsonlEntry(end, when, entryText, sessionOf, tag)
				}
				return append(blankLineAfter(end), raw...), nil
			}}, r)
		if err != nil {
			return nil, err
		}
	}
	if memory != "" {
		limit := int64(OptionsOf(env.Store).MemoryMaxSize)
		r := env.Record(RuleConsolidate)
		r.Reason = rec.Reason + ": memory update"
		_, err := env.Rewriter.Apply(ctx, rewrite.Request{Root: root, Target: f.memory(), AllowCreate: true, From: from,
			Archive: f.archiveFor("MEMORY", env.Now()),
			Compute: func(_ context.Context, old []byte) ([]byte, error) {
				next := []byte(strings.TrimSpace(memory) + "\n")
				if string(next) == string(old) {
					return nil, rewrite.ErrUnchanged
				}
				return next, GuardMemory(old, next, limit, env.Store.MaxLoss)
			}}, r)
		if err != nil && !errors.Is(err, rewrite.ErrConflict) {
			return nil, err
		}
		if errors.Is(err, rewrite.ErrConflict) {
			// The agent keeps editing MEMORY.md: its edits win; the history
			// entry is written, and the facts will come with the next range.
			env.Log.Warn("MEMORY.md kept changing; memory update skipped", "root", root.Path(), "range", rec.Reason)
		}
	}
	env.Log.Info("consolidated session range", "root", root.Path(), "range", clipCites(cites), "why", why, "messages", len(active), "fallback", fallback)
	if err := env.Spool.CommitMany(ctx, consumer, commits); err != nil {
		return nil, err
	}
	if len(read) > 1 {
		return left, saveBatch(ctx, env, root, savedBatch{})
	}
	return left, nil
}

// clipCites is the citations of a consolidation as a log line or journal
// reason says them: the first few, and how many more.
func clipCites(cites []string) string {
	const shown = 3
	if len(cites) <= shown {
		return strings.Join(cites, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(cites[:shown], ", "), len(cites)-shown)
}

// fileEnd returns the last bytes of rel (rewrite.AppendContext at most).
func fileEnd(root *confine.Root, rel string) []byte {
	f, fi, err := root.OpenRead(rel)
	if err != nil {
		return nil
	}
	defer f.Close()
	end := make([]byte, min(fi.Size(), rewrite.AppendContext))
	n, _ := f.ReadAt(end, fi.Size()-int64(len(end)))
	return end[:n]
}

const consolidateSystem = `You are a memory consolidation agent. Return JSON with:
  "history_entry": a summary paragraph of the conversation, starting with a [YYYY-MM-DD HH:MM] timestamp
  "memory_update": the full updated long-term memory (MEMORY.md): user preferences, project context, relationships, technical decisions
Keep every still-valid fact of the current memory; add durable facts from the conversation.
` + compact.DataNotice

// consolidateLLM asks the endpoint for the history entry and memory update.
// It returns an empty entry (and a note) when the raw fallback must be used:
// heuristic compactor, timeout, error, spent budget or unparseable output.
func consolidateLLM(ctx context.Context, env *layout.Env, rec *state.Record, memory []byte, msgs []layout.Message, told *secrets.Values) (entry, mem, note string) {
	if env.LLM == nil {
		return "", "", ""
	}
	var conv strings.Builder
	for _, m := range msgs {
		conv.WriteString(formatMessage(m) + "\n")
	}
	cur := strings.TrimSpace(string(memory))
	if cur == "" {
		cur = "(empty)"
	}
	user := "## Current Long-term Memory\n" + compact.Data("MEMORY.md", cur) + "\n\n## Conversation to Process\n" + compact.Data("conversation", conv.String())
	if limit := OptionsOf(env.Store).MemoryMaxSize; int64(len(memory)) > int64(limit) {
		user += fmt.Sprintf("\n\nThe current memory is %d bytes, over its limit of %d: compress it, pruning stale and low-value facts.", len(memory), limit)
	}
	// The seed's consolidation timeout bounds the whole call, retries included.
	cctx, cancel := context.WithTimeout(ctx, env.LLM.Timeout())
	defer cancel()
	reply, err := env.LLM.Complete(cctx, compact.Prompt{System: consolidateSystem, User: user, JSON: true, Told: told})
	rec.Tokens += reply.Tokens
	if err != nil {
		return "", "", fmt.Sprintf(" (raw fallback: %v)", err)
	}
	fields, _, err := compact.ParseFields(reply.Text, "history_entry", "memory_update")
	if err != nil || strings.TrimSpace(fields["history_entry"]) == "" {
		return "", "", " (raw fallback: the model's answer had no history_entry)"
	}
	return fields["history_entry"], fields["memory_update"], ""
}

func formatMessage(m layout.Message) string {
	role := strings.ToUpper(m.Role)
	if m.Raw {
		role = "RAW"
	} else if m.Meta {
		role = "META"
	}
	ts := ""
	if !m.Time.IsZero() {
		ts = "[" + m.Time.UTC().Format("2006-01-02 15:04") + "] "
	}
	tools := ""
	if len(m.Tools) > 0 {
		tools = " [tools: " + strings.Join(m.Tools, ", ") + "]"
	}
	return fmt.Sprintf("%s%s%s: %s", ts, role, tools, m.Text)
}

// rawFallback is memory-history's [raw-fallback] entry: the last
// fallback_messages messages of the range, each cut to fallback_chars
// characters. Nothing is lost: the raw lines stay in the session log.
//
// The entry lands in files agents edit with their own tools (OpenClaw's
// daily notes), whose edits need the text they replace to be unique: so
// it carries no tool input or output verbatim (a tool call is its name;
// tool results are left out) and no line twice.
func rawFallback(env *layout.Env, msgs []layout.Message) string {
	n, width := OptionsOf(env.Store).FallbackMessages, OptionsOf(env.Store).FallbackChars
	var real []layout.Message
	for _, m := range msgs {
		if !m.Meta && m.Role != "tool" && !strings.HasPrefix(m.Text, "[tool result]") {
			real = append(real, m)
		}
	}
	if len(real) > n {
		real = real[len(real)-n:]
	}
	var b strings.Builder
	b.WriteString("[raw-fallback]\n")
	seen := map[string]bool{}
	for _, m := range real {
		role := m.Role
		if m.Raw {
			role = "raw"
		}
		text := strings.Join(strings.Fields(withoutToolInput(m.Text)), " ")
		if utf8.RuneCountInString(text) > width {
			text = string([]rune(text)[:width])
		}
		line := fmt.Sprintf("- %s: %s\n", role, text)
		if text == "" || seen[line] {
			continue
		}
		seen[line] = true
		b.WriteString(line)
	}
	return b.String()
}

// withoutToolInput renders each "[tool: NAME] INPUT" line of a message as
// its name alone, and leaves out "[tool result]" lines.
func withoutToolInput(text string) string {
	lines := strings.Split(text, "\n")
	out := lines[:0]
	for _, l := range lines {
		if strings.HasPrefix(l, "[tool result]") {
			continue
		}
		if strings.HasPrefix(l, "[tool: ") {
			if i := strings.IndexByte(l, ']'); i > 0 {
				l = l[:i+1]
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, " ")
}

// Logs implements layout.SessionLogs.
func (Layout) Logs(s *policy.Store) []recall.Source {
	o := OptionsOf(s)
	return []recall.Source{{Glob: o.Sessions, Exclude: o.SessionsExclude, Kind: recall.Log, Label: "messages"}}
}

// Sources implements layout.Searchable: the history files (memory-history's
// grep over HISTORY*.md), MEMORY.md and the session logs.
func (Layout) Sources(s *policy.Store) []recall.Source {
	f := filesOf(s)
	out := []recall.Source{
		{Glob: filepath.Join(f.dir, "HISTORY*.md"), Kind: recall.Text, Label: "history"},
		{Glob: f.memory(), Kind: recall.Text, Label: "memory"},
		{Glob: OptionsOf(s).Sessions, Exclude: OptionsOf(s).SessionsExclude, Kind: recall.Log, Label: "messages"},
		// What compression moved out of MEMORY.md (beside it, linked, or in
		// the archive directory), and the earlier versions of MEMORY.md and
		// HISTORY.md kept there, compressed ones included.
		{Glob: filepath.Join(f.dir, "memory-older-*.md"), Kind: recall.Text, Label: "moved", Moved: "moved"},
		{Glob: filepath.Join(f.archive, "MEMORY-pruned-*.md{,.gz}"), Kind: recall.Text, Label: "moved", Moved: "moved"},
		{Glob: filepath.Join(f.archive, "{MEMORY,HISTORY}-[0-9]*.md{,.gz}"), Kind: recall.Text, Label: "archive", Moved: "archived"},
	}
	for _, g := range []string{OptionsOf(s).TranscriptsDB, OptionsOf(s).TranscriptsJSON} {
		if g != "" {
			out = append(out, recall.Source{Glob: g, Kind: recall.Records, Label: "messages"})
		}
	}
	switch OptionsOf(s).HistoryFormat {
	case FormatJSONL, FormatAuto:
		out = append(out, recall.Source{Glob: filepath.Join(f.dir, HistoryJSONL), Kind: recall.Text, Label: "history"})
	case FormatDaily:
		out = append(out, recall.Source{Glob: filepath.Join(f.dir, DailyDir, "*.md"), Kind: recall.Text, Label: "history"})
	}
	return out
}
