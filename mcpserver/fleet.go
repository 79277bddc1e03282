package mcpserver

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memwatch/memwatch/fleet/mirror"
	"github.com/memwatch/memwatch/recall"
)

// On a central node (fleet:), recall_memory searches the memory of every
// host the node follows that the client reaches, ranked as one host's,
// each result naming its host and citing HOST:/path#L5. It is the
// server's recall_memory when the policy has no session-detail store of
// its own (the usual central node), else fleet_recall beside the roots'
// recall_memory.

type fleetInput struct {
	Query string `json:"query" jsonschema:"Search query"`
	Scope string `json:"scope,omitempty" jsonschema:"Which sources to search: all, memory (the hosts' memory files) or messages (their agents' conversations)"`
	Limit int    `json:"limit,omitempty" jsonschema:"Maximum results"`
	Host  string `json:"host,omitempty" jsonschema:"Search this host only (as memwatch status lists the hosts)"`
}

func (b *builder) addFleetTool() {
	cfg := b.s.cfg
	if cfg.StateDir == "" || b.bound != nil || b.access.hosts == nil || b.policy.Fleet == nil {
		return
	}
	name := "recall_memory"
	if b.serves([]string{sessionDetail}) {
		name = "fleet_recall"
	}
	in, err := jsonschema.For[fleetInput](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp tool %s: input schema: %v", name, err))
	}
	setDefault("scope", "all", "all", "memory", "messages")(in)
	setDefault("limit", recall.DefaultLimit)(in)
	t := &mcp.Tool{Name: name, InputSchema: in, Description: "Search the memory of every host this central node follows (their agents' memory files and conversations), or one host's.\n\nA question in plain words is answered by relevance: the top entries, best first (not every word has to appear). One word, an identifier or a \"quoted phrase\" returns every line holding it exactly.\n\nReturns: Matching entries, each with its host and a citation HOST:/path#L<line>."}
	mcp.AddTool(b.srv, t, func(ctx context.Context, req *mcp.CallToolRequest, input fleetInput) (res *mcp.CallToolResult, out any, err error) {
		defer b.called(name, time.Now(), &res, &err)
		text, err := b.fleetSearch(ctx, input)
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
}

// fleetSearch searches the hosts' copies the client reaches.
func (b *builder) fleetSearch(ctx context.Context, in fleetInput) (string, error) {
	if err := bounded("query", in.Query, maxQuery); err != nil {
		return "", err
	}
	limit := in.Limit
	if limit == 0 {
		limit = recall.DefaultLimit
	}
	if limit < 1 || limit > 1000 {
		return "", fmt.Errorf("limit must be between 1 and 1000, not %d", limit)
	}
	var labels []string
	switch in.Scope {
	case "", "all":
	case "memory", "messages":
		labels = []string{in.Scope}
	default:
		return "", fmt.Errorf("scope %q: want all, memory or messages", clip(in.Scope))
	}
	q, err := recall.ParseQuery(in.Query)
	if err != nil {
		return "", err
	}
	if in.Host != "" && !slices.Contains(mirror.Hosts(b.s.cfg.StateDir), in.Host) {
		return "", fmt.Errorf("no host %q is followed here", clip(in.Host))
	}
	roots, done, _ := mirror.FleetRoots(b.s.cfg.StateDir, func(host string, uid int) bool {
		return (in.Host == "" || host == in.Host) && b.access.hosts(host, uid)
	})
	defer done()
	results, _, err := recall.Search(ctx, q, recall.Options{Roots: roots, Labels: labels, Limit: limit, NameRoots: true})
	if err != nil {
		return "", err
	}
	return recall.Format(q, results), nil
}
