package policy

import "sort"

// Preset is what `preset: NAME` in a store stands for: the layout, root
// globs and options that fit one agent as people run it today. It is sugar
// over a layout: every key it sets can be given in the store instead, and
// `memwatch validate --expand` prints the result.
type Preset struct {
	Name   string
	Agent  string // who writes the files
	Layout string
	// Paths are the default root globs (with ~ for the home directory),
	// used when the store gives none.
	Paths []string
	// Options are layout options that differ from the layout's defaults.
	Options map[string]any
	// About says what memwatch does for the agent, for init and --help.
	About string
}

// Presets are the agents memwatch knows by name. Each keeps its writes
// where the agent reads them and its archives out of folders the agent
// indexes; sessions are read from inside each root (the root is the agent's
// home folder when its sessions and memory live apart).
var Presets = map[string]Preset{
	"claude-code": {
		Name: "claude-code", Agent: "Claude Code", Layout: "memory-history",
		Paths: []string{"~/.claude/projects/*"},
		Options: map[string]any{
			"sessions":         "*.jsonl",           // <session uuid>.jsonl, one per conversation
			"memory_dir":       "memory",            // the project's auto-memory: memory/MEMORY.md
			"archive_dir":      ".memwatch/archive", // not memory/: Claude Code reads it
			"memory_max_size":  Size(25 << 10),      // Claude Code loads the first 25 KB of MEMORY.md...
			"memory_max_lines": 200,                 // ...and its first 200 lines
			"link_pruned":      true,                // older facts go to memory/memory-older-YYYY-MM.md, linked from MEMORY.md
			"window":           200,
			"keep":             20,
		},
		About: "each project's transcripts become searchable (memwatch recall, MCP) and are consolidated into memory/HISTORY.md entries dated by the conversation; memory/MEMORY.md is kept within the 200 lines and 25 KB Claude Code loads, its oldest facts moved to a topic file it links",
	},
	"codex": {
		Name: "codex", Agent: "Codex CLI", Layout: "memory-history",
		Paths: []string{"~/.codex"},
		Options: map[string]any{
			"sessions":    "sessions/*/*/*/rollout-*.jsonl", // sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl
			"memory_dir":  "memwatch",                       // Codex reads no memory file of its own
			"archive_dir": "memwatch/archive",
			"window":      200,
			"keep":        20,
		},
		About: "every rollout becomes searchable and is consolidated into ~/.codex/memwatch/HISTORY.md, one entry per finished conversation",
	},
	"nanobot": {
		Name: "nanobot", Agent: "nanobot", Layout: "memory-history",
		Paths: []string{"~/.nanobot"},
		Options: map[string]any{
			"sessions":       "sessions/*.jsonl",  // SessionManager: sessions/<channel_chat>.jsonl
			"memory_dir":     "workspace/memory",  // MemoryStore: workspace/memory/MEMORY.md and HISTORY.md
			"archive_dir":    ".memwatch/archive", // not workspace/memory/
			"history_format": "auto",              // history.jsonl records where nanobot keeps one, else HISTORY.md
		},
		About: "conversations are consolidated where nanobot reads its history (workspace/memory/history.jsonl records in current versions, HISTORY.md entries in older ones) and MEMORY.md is kept under memory_max_size",
	},
	"openclaw": {
		Name: "openclaw", Agent: "OpenClaw", Layout: "memory-history",
		Paths: []string{"~/.openclaw"},
		Options: map[string]any{
			"sessions":       "agents/*/sessions/*.jsonl", // agents/<agent>/sessions/<session id>.jsonl
			"memory_dir":     "workspace",                 // workspace/MEMORY.md
			"archive_dir":    ".memwatch/archive",         // not workspace/memory/: OpenClaw indexes its daily notes there
			"history_format": "daily",                     // workspace/memory/YYYY-MM-DD.md, the daily notes OpenClaw indexes
		},
		About: "sessions become searchable and each conversation is consolidated into the daily note of its day (workspace/memory/YYYY-MM-DD.md, which OpenClaw indexes); workspace/MEMORY.md is kept under memory_max_size, its archives outside the folders OpenClaw indexes",
	},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	var out []string
	for n := range Presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
