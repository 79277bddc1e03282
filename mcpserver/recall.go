package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/scope"
	"github.com/memwatch/memwatch/spool"
)

// recall_memory on every root that has anything to search, whatever its
// layout, and recall_show to read around what it found. A session bound
// to a root searches it; one started in a project's directory (memwatch
// mcp with no --root, as Claude Code and Codex start MCP servers there)
// searches that project's memory; any other searches every root its
// client reaches, or the root it names.

const recallDescription = `Search your memory of earlier work: past conversations (every message, tool calls and results included), notes, history entries and facts, including what was moved out of your memory files to keep them small. Call it before answering a question about earlier work, a decision, a person, a setting or anything you may have discussed or written down before, and when the user refers to something you do not see in this conversation.

Searches:
- detail/: Summaries and notes you've written
- messages: Raw conversation history (every session)
- history, memory, moved: history entries, long-term facts, facts moved out of MEMORY.md

A question in plain words is answered by relevance: the top entries, best first (not every word has to appear). One word, an identifier or a "quoted phrase" returns every line holding it exactly.

Returns: Matching entries with citations, their date and project; the same text found again is one entry with its copies counted. Read the turns around an entry with recall_show.`

type (
	recallArgs struct {
		Query string `json:"query" jsonschema:"Search query: a question in plain words, or a word, identifier or \"quoted phrase\""`
		Scope string `json:"scope,omitempty" jsonschema:"Which sources to search"`
		Limit int    `json:"limit,omitempty" jsonschema:"Maximum results"`
		Root  string `json:"root,omitempty" jsonschema:"optional: search only this memory root (memory_roots lists them)"`
	}
	showArgs struct {
		Citation string `json:"citation" jsonschema:"a citation as recall_memory gives it, e.g. messages.jsonl#L45 or /home/me/.claude/projects/x/s.jsonl#L12"`
		Context  int    `json:"context,omitempty" jsonschema:"lines to show before and after the cited ones"`
		Root     string `json:"root,omitempty" jsonschema:"optional: the memory root a relative citation is in"`
	}
)

// searchable are the layouts recall searches.
var searchable = []string{nowHistory, factsEpisodes, memoryHistory, sessionDetail}

// addRecall adds recall_memory and recall_show.
func (b *builder) addRecall() {
	if !b.serves(searchable) {
		return
	}
	labels := append([]any{"all"}, anys(answer.Labels(b.policy))...)
	in, err := jsonschema.For[recallArgs](nil)
	if err != nil {
		panic(err)
	}
	setDefault("scope", "all", labels...)(in)
	setDefault("limit", recall.DefaultLimit)(in)
	if b.bound != nil {
		delete(in.Properties, "root")
	}
	mcp.AddTool(b.srv, &mcp.Tool{Name: "recall_memory", Description: recallDescription, InputSchema: in},
		func(ctx context.Context, req *mcp.CallToolRequest, a recallArgs) (res *mcp.CallToolResult, _ any, err error) {
			defer b.called("recall_memory", time.Now(), &res, &err)
			text, err := b.recall(ctx, a)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	if b.s.cfg.Show == nil {
		return
	}
	sin, err := jsonschema.For[showArgs](nil)
	if err != nil {
		panic(err)
	}
	setDefault("context", 3)(sin)
	if b.bound != nil {
		delete(sin.Properties, "root")
	}
	mcp.AddTool(b.srv, &mcp.Tool{Name: "recall_show", Description: "Read the lines a recall_memory citation names, with the turns before and after them (messages as role: text), even after the agent rewrote or cleared its log.", InputSchema: sin},
		func(ctx context.Context, req *mcp.CallToolRequest, a showArgs) (res *mcp.CallToolResult, _ any, err error) {
			defer b.called("recall_show", time.Now(), &res, &err)
			text, err := b.show(ctx, a)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
}

// recaller is a answer.Recaller over the roots the session's client
// reaches.
func (b *builder) recaller(ctx context.Context) *answer.Recaller {
	cfg := b.s.cfg
	x := &answer.Recaller{Policy: b.policy, Cache: &b.s.scopes, Reaches: b.access.reaches,
		Open: func(st *policy.Store, path string) (*confine.Root, error) { return b.openRoot(st, path, nil) },
		Options: func(o *recall.Options) {
			o.Index = cfg.Index
			if gen := cfg.Generation; gen != nil {
				o.Generation = gen(ctx)
			}
			o.Held = cfg.Held
		}}
	for _, st := range b.policy.Stores {
		if _, ok := registry.SearchSources(st); !ok {
			continue
		}
		for _, id := range st.RootIDs() {
			if b.access.reaches(st, id) {
				x.Roots = append(x.Roots, scope.Candidate{Store: st, ID: id})
			}
		}
	}
	return x
}

// recall answers recall_memory.
func (b *builder) recall(ctx context.Context, a recallArgs) (string, error) {
	if err := bounded("query", a.Query, maxQuery); err != nil {
		return "", err
	}
	if a.Limit == 0 {
		a.Limit = recall.DefaultLimit
	}
	if a.Limit < 1 || a.Limit > 1000 {
		return "", fmt.Errorf("limit must be between 1 and 1000, not %d", a.Limit)
	}
	req := control.RecallRequest{Query: a.Query, Limit: a.Limit, Sort: recall.SortRelevance}
	if a.Scope != "" && a.Scope != "all" {
		req.Scope = strings.Split(a.Scope, ",")
	}
	switch {
	case a.Root != "":
		req.Dir = filepath.Clean(a.Root)
		if _, _, err := b.find(b.policy, req.Dir); err != nil {
			return "", err
		}
	case b.bound != nil && !b.bound.fromCwd:
		req.Dir = b.bound.path
	case b.s.cfg.Cwd != "":
		req.Cwd = b.s.cfg.Cwd
	default:
		req.All = true
	}
	q, err := recall.ParseQuery(a.Query)
	if err != nil {
		return "", err
	}
	res, err := b.recaller(ctx).Answer(ctx, req)
	if err != nil {
		return "", err
	}
	return recall.Format(q, res.Results), nil
}

// show answers recall_show: the cited lines, and context lines around
// them, a message as its role and text.
func (b *builder) show(ctx context.Context, a showArgs) (string, error) {
	if err := bounded("citation", a.Citation, maxPath); err != nil {
		return "", err
	}
	if a.Context < 0 || a.Context > 50 {
		return "", fmt.Errorf("context must be between 0 and 50, not %d", a.Context)
	}
	c, err := spool.ParseCitation(a.Citation)
	if err != nil {
		return "", err
	}
	// The root: the bound one, the one named, or the one a whole path is in.
	var st *policy.Store
	var path string
	var want *confine.ID
	switch {
	case filepath.IsAbs(c.Path):
		for _, s := range b.policy.Stores {
			for _, id := range s.RootIDs() {
				if confine.Within(id.Path, c.Path) && id.Path != c.Path && b.access.reaches(s, id) && len(id.Path) > len(path) {
					st, path = s, id.Path
				}
			}
		}
		if st == nil {
			return "", fmt.Errorf("%s is in no memory root you reach", clip(c.Path))
		}
		c.Path, _ = filepath.Rel(path, c.Path)
	case a.Root != "":
		if st, _, err = b.find(b.policy, a.Root); err != nil {
			return "", err
		}
		path = filepath.Clean(a.Root)
	case b.bound != nil:
		st, path, want = b.bound.store, b.bound.path, &b.bound.id
	default:
		return "", errors.New("the citation is relative: give root (memory_roots lists them), or a citation with a whole path")
	}
	root, err := b.openRoot(st, path, want)
	if err != nil {
		return "", err
	}
	defer root.Close()
	cited := c
	wide := c.Widen(int64(a.Context))
	var lines []spool.Shown
	for _, p := range candidatesOf(st, c.Path) {
		wide.Path = p
		if lines, err = b.s.cfg.Show(ctx, root, wide); err == nil {
			cited.Path = p
			break
		}
	}
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s (%s)\n", filepath.Join(path, cited.Path), fmt.Sprintf("lines %d to %d; the cited ones marked >", cited.From, cited.To))
	for _, l := range answer.Decode(lines, cited.Path, false) {
		mark := " "
		if l.Line >= cited.From && l.Line <= cited.To {
			mark = ">"
		}
		fmt.Fprintf(&sb, "%s L%d: %s\n", mark, l.Line, ShownText(l))
	}
	return sb.String(), nil
}

// candidatesOf are the paths a citation's path may be in a root: as
// cited, then with each prefix its store's sources leave out of citations
// (detail/x.md for working-memory/detail/x.md).
func candidatesOf(st *policy.Store, p string) []string {
	out := []string{p}
	if srcs, ok := registry.SearchSources(st); ok {
		for _, s := range srcs {
			if s.Strip != "" && !slices.Contains(out, s.Strip+p) {
				out = append(out, s.Strip+p)
			}
		}
	}
	return out
}

// ShownText is a shown line as a person or an agent reads it (its Text,
// answer.Decode's), or why it has none.
func ShownText(l spool.Shown) string {
	switch l.Source {
	case "pruned":
		return "[pruned from the spool by retention]"
	case "missing":
		return "[no such line in that version of the file]"
	case "omitted":
		return "[not shown: past the bound of one answer]"
	}
	return l.Text
}
