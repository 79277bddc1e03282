package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/apprecords"
	"github.com/memwatch/memwatch/layout/factsepisodes"
	"github.com/memwatch/memwatch/layout/memoryhistory"
	"github.com/memwatch/memwatch/layout/nowhistory"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// The layouts, by the names policies use.
const (
	nowHistory    = "now-history"
	factsEpisodes = "facts-episodes"
	memoryHistory = "memory-history"
	sessionDetail = "session-detail"
	appRecords    = "app-records"
)

// Bounds on arguments, so an oversize call is an error result and never a
// large allocation: a query, a path, and what a write may carry.
const (
	maxQuery   = 1000
	maxPath    = 4096
	maxContent = 4 << 20
	maxRead    = 1 << 20 // the most of a file memory_read returns
)

// Inputs of the tools. Field comments become the schemas' descriptions.
type (
	noInput       struct{}
	snapshotInput struct {
		Variant string `json:"variant,omitempty" jsonschema:"auto (the full file up to 30 lines, else the # now block and the heading outline), full, or structure"`
	}
	pathInput struct {
		Path string `json:"path" jsonschema:"a file relative to the memory root, e.g. facts/user.md"`
	}
	writeInput struct {
		Path    string `json:"path" jsonschema:"the fact file, relative to the memory root, e.g. facts/user.md"`
		Content string `json:"content" jsonschema:"the whole new content of the file (markdown)"`
	}
	appendInput struct {
		Path    string `json:"path" jsonschema:"the file, relative to the memory root, e.g. episodes/2026-02.md"`
		Entry   string `json:"entry" jsonschema:"the markdown block to append"`
		Summary string `json:"summary,omitempty" jsonschema:"optional: the file's new > Summary: line"`
	}
	patchItem struct {
		OldText string `json:"oldText" jsonschema:"text to find; it must occur exactly once"`
		NewText string `json:"newText" jsonschema:"its replacement"`
	}
	patchInput struct {
		Path    string      `json:"path" jsonschema:"the file, relative to the memory root, e.g. facts/user.md"`
		Patches []patchItem `json:"patches" jsonschema:"the replacements; nothing is written unless every one applies"`
	}
	historyInput struct {
		Query string `json:"query" jsonschema:"words to find (all of them, case-insensitive); a query in double quotes is an exact phrase"`
		Limit int    `json:"limit,omitempty" jsonschema:"Maximum results"`
	}
	appInput struct {
		App string `json:"app" jsonschema:"the app id"`
	}
	contextInput struct {
		App   string `json:"app" jsonschema:"the app id"`
		Limit int    `json:"limit,omitempty" jsonschema:"at most this many records, newest first"`
	}
	changesInput struct {
		Limit int `json:"limit,omitempty" jsonschema:"at most this many records, newest first"`
	}
	undoInput struct {
		ID     int64 `json:"id" jsonschema:"the journal record to revert (memory_changes lists them)"`
		Force  bool  `json:"force,omitempty" jsonschema:"revert even if the file changed since (its current content is archived first)"`
		DryRun bool  `json:"dry_run,omitempty" jsonschema:"only say what would be restored"`
	}
)

// Structured results, as the seeds define them.
type (
	successOutput struct {
		Success bool `json:"success"`
	}
	patchOutput struct {
		Success      bool `json:"success"`
		AppliedCount int  `json:"appliedCount"`
	}
	versionsInput struct {
		Path    string `json:"path" jsonschema:"the memory file, relative to the memory root"`
		Version int64  `json:"version,omitempty" jsonschema:"a version number from the list: read that version"`
	}
	listOutput struct {
		Files []factsepisodes.IndexEntry `json:"files"`
	}
	recordsOutput struct {
		Memories []apprecords.Record `json:"memories"`
	}
)

// setDefault gives a property its default and, with values, its enum.
func setDefault(prop string, def any, enum ...any) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		p := s.Properties[prop]
		b, _ := json.Marshal(def)
		p.Default = b
		if len(enum) > 0 {
			p.Enum = enum
		}
	}
}

func bounded(name, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s is %d bytes; the most memwatch takes is %d", name, len(v), max)
	}
	return nil
}

func (b *builder) addTools() {
	cfg := b.s.cfg
	writes := cfg.Rewriter != nil && !b.policy.MCP.ReadOnly && b.access.write
	if b.bound == nil {
		mcp.AddTool(b.srv, &mcp.Tool{Name: "memory_roots", Description: "List the memory roots this server works on: store, layout and path of each. Pass a path as the root argument of the other tools."},
			func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, any, error) {
				text, _, err := b.roots(ctx, nil, noInput{})
				if err != nil {
					return nil, nil, err
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
			})
	}

	if cfg.Versions != nil && cfg.VersionContent != nil {
		add(b, &mcp.Tool{Name: "memory_versions", Description: "List the earlier versions memwatch kept of one of your memory files (time, size, lines added and removed, who wrote it), or with version set, read that version's content. Read-only: a person restores a version with memwatch restore."},
			[]string{nowHistory, factsEpisodes, memoryHistory, sessionDetail}, nil, func(ctx context.Context, t *target, in versionsInput) (string, any, error) {
				if err := bounded("path", in.Path, maxPath); err != nil {
					return "", nil, err
				}
				rel, err := t.root.Rel(filepath.Join(t.root.Path(), in.Path))
				if err != nil {
					return "", nil, err
				}
				if in.Version > 0 {
					data, err := cfg.VersionContent(ctx, t.root, rel, in.Version)
					if err != nil {
						return "", nil, err
					}
					if len(data) > maxRead {
						cut := bytes.LastIndexByte(data[:maxRead], '\n') + 1
						return fmt.Sprintf("%s\n[memwatch: version %d is %d bytes; this is its first %d]\n", strings.ToValidUTF8(string(data[:cut]), "\uFFFD"), in.Version, len(data), cut), nil, nil
					}
					return strings.ToValidUTF8(string(data), "\uFFFD"), nil, nil
				}
				vs, err := cfg.Versions(ctx, t.root, rel)
				if err != nil {
					return "", nil, err
				}
				if len(vs) == 0 {
					return fmt.Sprintf("memwatch kept no versions of %s\n", rel), nil, nil
				}
				var sb strings.Builder
				for _, v := range vs {
					if v.Deleted() {
						fmt.Fprintf(&sb, "%d  %s  deleted by the %s\n", v.N, v.Time.UTC().Format(time.RFC3339), v.Writer)
						continue
					}
					fmt.Fprintf(&sb, "%d  %s  %d bytes, %d lines (+%d -%d) by %s\n", v.N, v.Time.UTC().Format(time.RFC3339), v.Size, v.Lines, v.Added, v.Removed, v.Writer)
				}
				return sb.String(), nil, nil
			})
	}

	// now-history (docs/layouts.md)
	add(b, &mcp.Tool{Name: "memory_status", Description: "Returns structural metadata of memory.md (path, size, headings with line numbers and line counts, archive info). No content. Useful for re-checking structure after multiple edits."},
		[]string{nowHistory}, nil, func(ctx context.Context, t *target, _ noInput) (string, nowhistory.StatusInfo, error) {
			st, err := nowhistory.Status(t.root, nowhistory.MemoryFile, int64(nowhistory.OptionsOf(t.store).MaxSize))
			if err != nil {
				return "", st, err
			}
			return nowhistory.FormatStatus(st), st, nil
		})
	add(b, &mcp.Tool{Name: "memory_snapshot", Description: "The view of memory.md injected before a run: guidance when it does not exist, the full content up to 30 lines, and above that the whole # now block, the heading outline with line numbers, and the newest run files in memory/run/."},
		[]string{nowHistory}, setDefault("variant", nowhistory.VariantAuto, anys(nowhistory.Variants)...), func(ctx context.Context, t *target, in snapshotInput) (string, any, error) {
			s, err := nowhistory.SnapshotVariant(t.root, nowhistory.MemoryFile, in.Variant)
			return s, nil, err
		})
	if writes {
		add(b, &mcp.Tool{Name: "memory_stamp", Description: "Insert this run's ## YYYY-MM-DD-HHmm heading at the top of # History in memory.md (creating # History if missing). Twice in the same minute changes nothing. Write the run's summary after the | of that heading."},
			[]string{nowHistory}, nil, b.stamp)
	}

	// facts-episodes; memory_read also serves memory-history.
	add(b, &mcp.Tool{Name: "memory_list", Description: "List available memory files with their summary and size in bytes, so you can choose what to read (and avoid loading huge files)."},
		[]string{factsEpisodes}, nil, func(ctx context.Context, t *target, _ noInput) (string, listOutput, error) {
			es, _, err := factsepisodes.Index(t.root, factsepisodes.OptionsOf(t.store).IndexFile)
			if es == nil {
				es = []factsepisodes.IndexEntry{}
			}
			return factsepisodes.FormatIndex(es), listOutput{Files: es}, err
		})
	add(b, &mcp.Tool{Name: "memory_read", Description: "Read a memory file (e.g. facts/user.md, or MEMORY.md and HISTORY-YYYY-MM.md, wherever the agent keeps them in its root). Paths are relative to the memory root and cannot leave it."},
		[]string{factsEpisodes, memoryHistory}, nil, func(ctx context.Context, t *target, in pathInput) (string, any, error) {
			if err := bounded("path", in.Path, maxPath); err != nil {
				return "", nil, err
			}
			data, err := factsepisodes.Read(t.root, in.Path)
			if errors.Is(err, fs.ErrNotExist) && t.store.Layout == memoryHistory {
				// MEMORY.md where the agent keeps it (Claude Code's memory/).
				if dir := memoryhistory.OptionsOf(t.store).MemoryDir; dir != "" && dir != "." {
					data, err = factsepisodes.Read(t.root, filepath.Join(dir, in.Path))
				}
			}
			if err != nil {
				return "", nil, err
			}
			if len(data) > maxRead {
				cut := bytes.LastIndexByte(data[:maxRead], '\n') + 1
				return fmt.Sprintf("%s\n[memwatch: %s is %d bytes; this is its first %d. Search it with recall, or read a smaller file.]\n", strings.ToValidUTF8(string(data[:cut]), "\uFFFD"), in.Path, len(data), cut), nil, nil
			}
			return string(data), nil, nil
		})
	if writes {
		add(b, &mcp.Tool{Name: "memory_write", Description: "Create or overwrite a fact file (markdown, relative to the memory root). The old content is archived and the change journaled, so it can be undone."},
			[]string{factsEpisodes}, nil, func(ctx context.Context, t *target, in writeInput) (string, successOutput, error) {
				if err := errors.Join(bounded("path", in.Path, maxPath), bounded("content", in.Content, maxContent)); err != nil {
					return "", successOutput{}, err
				}
				out, err := factsepisodes.Write(ctx, cfg.Rewriter, t.root, t.store.Name, in.Path, []byte(in.Content))
				if err != nil {
					return "", successOutput{}, err
				}
				return fmt.Sprintf("wrote %d bytes to %s%s\n", len(in.Content), in.Path, JournalNote(out)), successOutput{true}, nil
			})
		add(b, &mcp.Tool{Name: "memory_append", Description: "Append an episode entry (a markdown block) to a memory file, creating it if needed; summary optionally sets the file's > Summary: line."},
			[]string{factsEpisodes}, nil, func(ctx context.Context, t *target, in appendInput) (string, successOutput, error) {
				if err := errors.Join(bounded("path", in.Path, maxPath), bounded("entry", in.Entry, maxContent), bounded("summary", in.Summary, maxQuery)); err != nil {
					return "", successOutput{}, err
				}
				out, err := factsepisodes.Append(ctx, cfg.Rewriter, t.root, t.store.Name, in.Path, []byte(in.Entry), in.Summary)
				if err != nil {
					return "", successOutput{}, err
				}
				return fmt.Sprintf("appended %d bytes to %s%s\n", len(in.Entry), in.Path, JournalNote(out)), successOutput{true}, nil
			})
		add(b, &mcp.Tool{Name: "memory_patch", Description: "Patch specific sections of a memory file: each oldText must occur exactly once and is replaced by its newText; nothing is written unless every patch applies."},
			[]string{factsEpisodes}, nil, func(ctx context.Context, t *target, in patchInput) (string, patchOutput, error) {
				if err := bounded("path", in.Path, maxPath); err != nil {
					return "", patchOutput{}, err
				}
				if len(in.Patches) == 0 {
					return "", patchOutput{}, errors.New("patches is empty: give at least one {oldText, newText}")
				}
				var ps []factsepisodes.Patch
				size := 0
				for _, p := range in.Patches {
					size += len(p.OldText) + len(p.NewText)
					ps = append(ps, factsepisodes.Patch{Old: p.OldText, New: p.NewText})
				}
				if size > maxContent {
					return "", patchOutput{}, fmt.Errorf("patches are %d bytes; the most memwatch takes is %d", size, maxContent)
				}
				n, out, err := factsepisodes.ApplyPatches(ctx, cfg.Rewriter, t.root, t.store.Name, in.Path, ps)
				if err != nil {
					return "", patchOutput{}, err
				}
				return fmt.Sprintf("applied %d patch(es) to %s%s\n", n, in.Path, JournalNote(out)), patchOutput{true, n}, nil
			})
	}

	// memory-history and session-detail: recall.
	if b.consolidates() {
		add(b, &mcp.Tool{Name: "history_search", Description: "Search the history (HISTORY*.md) for entries: every word must occur (case-insensitive); a query in double quotes is an exact phrase. Returns matching lines with citations."},
			[]string{memoryHistory}, setDefault("limit", recall.DefaultLimit), func(ctx context.Context, t *target, in historyInput) (string, any, error) {
				return b.search(ctx, t, in.Query, in.Limit, []string{"history"}, recall.SortNewest)
			})
	}
	b.addRecall()

	// app-records
	add(b, &mcp.Tool{Name: "records_list", Description: "List an app's memory records as JSON ({\"memories\": [...]}), as the app's memory API returns them."},
		[]string{appRecords}, nil, func(ctx context.Context, t *target, in appInput) (string, recordsOutput, error) {
			rs, err := b.records(ctx, t, in.App)
			if err != nil {
				return "", recordsOutput{}, err
			}
			out := recordsOutput{Memories: rs}
			text, _ := json.MarshalIndent(out, "", "  ")
			return string(text) + "\n", out, nil
		})
	add(b, &mcp.Tool{Name: "records_context", Description: "The text an app injects into its prompt from its memory records: the newest first."},
		[]string{appRecords}, setDefault("limit", 10), func(ctx context.Context, t *target, in contextInput) (string, any, error) {
			rs, err := b.records(ctx, t, in.App)
			if err != nil {
				return "", nil, err
			}
			if in.Limit < 1 || in.Limit > 1000 {
				return "", nil, fmt.Errorf("limit must be between 1 and 1000, not %d", in.Limit)
			}
			return apprecords.Context(in.App, rs, in.Limit), nil, nil
		})

	// every layout: the journal, and undo when the policy allows it.
	if cfg.Rewriter != nil {
		add(b, &mcp.Tool{Name: "memory_changes", Description: "What memwatch changed in this memory and why, newest first: each journal record's id, time, rule, file, outcome, sizes, archive of the old content and reason."},
			nil, setDefault("limit", 20), func(ctx context.Context, t *target, in changesInput) (string, any, error) {
				if in.Limit < 1 || in.Limit > 1000 {
					return "", nil, fmt.Errorf("limit must be between 1 and 1000, not %d", in.Limit)
				}
				recs, err := cfg.Rewriter.DB.Journal(ctx, state.Filter{Root: t.path, Limit: in.Limit})
				if err != nil {
					return "", nil, err
				}
				return control.FormatJournal(recs, control.Format{Filtered: true, Size: policy.Human}), nil, nil
			})
	}
	// Undo writes: a read-only binding, or a client without the undo
	// right, is not offered it.
	if cfg.Undo != nil && cfg.Rewriter != nil && b.policy.MCP.AllowUndo && !b.policy.MCP.ReadOnly && b.access.undo {
		add(b, &mcp.Tool{Name: "memory_undo", Description: "Revert one change memory_changes lists: restore the file to what it was before that journal record. Refused when the file changed since, unless force."},
			nil, nil, func(ctx context.Context, t *target, in undoInput) (string, any, error) {
				rec, err := cfg.Rewriter.DB.GetRecord(ctx, in.ID)
				if err != nil {
					return "", nil, err
				}
				if rec.Root != t.path {
					return "", nil, fmt.Errorf("journal record %d is not a change of %s", in.ID, t.path)
				}
				if !t.store.AllowUndo {
					return "", nil, fmt.Errorf("store %s does not allow undo (allow_undo: false in the policy)", t.store.Name)
				}
				res, err := cfg.Undo(ctx, in.ID, in.Force, in.DryRun)
				if err != nil {
					return "", nil, err
				}
				return res.String(), nil, nil
			})
	}
}

// roots lists the policy's roots (memory_roots).
func (b *builder) roots(ctx context.Context, _ *target, _ noInput) (string, any, error) {
	var sb strings.Builder
	n := 0
	for _, st := range b.s.cfg.Policy().Stores {
		for _, id := range st.RootIDs() {
			if !b.access.reaches(st, id) {
				continue
			}
			fmt.Fprintf(&sb, "%s\t%s\t%s\n", st.Name, st.Layout, id.Path)
			n++
		}
	}
	if n == 0 {
		return "no root yet: no store path of the policy matches a directory\n", nil, nil
	}
	return "STORE\tLAYOUT\tROOT\n" + sb.String(), nil, nil
}

// stamp inserts the run's heading (memory_stamp), journaled.
func (b *builder) stamp(ctx context.Context, t *target, _ noInput) (string, any, error) {
	stamp := b.s.cfg.Now().Format(nowhistory.TimeFormat)
	out, err := b.s.cfg.Rewriter.Apply(ctx, rewrite.Request{Root: t.root, Target: nowhistory.MemoryFile, AllowCreate: true,
		Compute: func(_ context.Context, old []byte) ([]byte, error) { return nowhistory.Stamp(old, stamp) }},
		&state.Record{Store: t.store.Name, Rule: "stamp"})
	if err != nil {
		return "", nil, err
	}
	return StampMessage(out, stamp, t.root.Join(nowhistory.MemoryFile)), nil, nil
}

// StampMessage is what memwatch stamp prints.
func StampMessage(out rewrite.Outcome, stamp, file string) string {
	if out.Status == state.Done {
		return fmt.Sprintf("inserted ## %s into %s\n", stamp, file)
	}
	return fmt.Sprintf("## %s already at the top of # History in %s\n", stamp, file)
}

// JournalNote is how the CLI and the tools name the journal record of a
// change.
func JournalNote(out rewrite.Outcome) string {
	if out.Record == 0 {
		return ""
	}
	return fmt.Sprintf(" (journal record %d; memwatch undo %d reverts it)", out.Record, out.Record)
}

// search runs recall over the target root (recall_memory by relevance,
// history_search as memory-history's grep: every word, newest first).
func (b *builder) search(ctx context.Context, t *target, query string, limit int, labels []string, sortBy string) (string, any, error) {
	if err := bounded("query", query, maxQuery); err != nil {
		return "", nil, err
	}
	if limit < 1 || limit > 1000 {
		return "", nil, fmt.Errorf("limit must be between 1 and 1000, not %d", limit)
	}
	q, err := recall.ParseQuery(query)
	if err != nil {
		return "", nil, err
	}
	srcs, ok := registry.SearchSources(t.store)
	if !ok {
		return "", nil, fmt.Errorf("%s roots have nothing to search", t.store.Layout)
	}
	opts := recall.Options{Roots: []recall.Root{{Root: t.root, Sources: srcs}}, Labels: labels, Limit: limit, Index: b.s.cfg.Index, MaxLine: int(t.store.MaxLine), Sort: sortBy}
	if gen := b.s.cfg.Generation; gen != nil {
		opts.Generation = gen(ctx)
	}
	opts.Held = b.s.cfg.Held
	results, _, err := recall.Search(ctx, q, opts)
	if err != nil {
		return "", nil, err
	}
	return recall.Format(q, results), nil, nil
}

// records reads an app's records (records_list, records_context).
func (b *builder) records(ctx context.Context, t *target, app string) ([]apprecords.Record, error) {
	if app == "" {
		return nil, errors.New("app is required")
	}
	if err := bounded("app", app, maxQuery); err != nil {
		return nil, err
	}
	db, err := apprecords.Open(ctx, t.root, apprecords.OptionsOf(t.store).Table, false)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rs, err := db.Records(ctx, app)
	if rs == nil {
		rs = []apprecords.Record{}
	}
	return rs, err
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// consolidates reports whether a root the session serves may have a
// HISTORY.md: a memory-history store that consolidates.
func (b *builder) consolidates() bool {
	if b.bound != nil {
		return b.bound.store.Layout != memoryHistory || memoryhistory.OptionsOf(b.bound.store).Consolidate
	}
	for _, st := range b.policy.Stores {
		if st.Layout == memoryHistory && memoryhistory.OptionsOf(st).Consolidate {
			return true
		}
	}
	return false
}
