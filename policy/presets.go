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
			"consolidate":      false, // Claude Code's auto-memory consolidates its own
		},
		About: "each project's transcripts become searchable (memwatch recall, MCP) and are kept in the spool whatever Claude Code deletes; memory/MEMORY.md is kept within the 200 lines and 25 KB Claude Code loads, its oldest facts moved to a topic file it links; Claude Code's auto-memory consolidates its own conversations (consolidate: true adds memory/HISTORY.md entries)",
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
			// SessionManager: workspace/sessions/<key>.jsonl in 0.3, the
			// key base64url-encoded; sessions/<key>.jsonl before.
			"sessions": "{workspace/sessions,sessions}/*.jsonl",
			// nanobot's own sessions (nanobot/agent/memory.py
			// _INTERNAL_HISTORY_SESSION_PREFIXES): "dream:" and "cron:",
			// base64url-encoded (ZHJlYW06, Y3Jvbj[o-r]) or, before 0.2.3,
			// with ':' written as '_'.
			"sessions_exclude": "{ZHJlYW06*,Y3Jvbj[o-r]*,dream_*,cron_*}",
			"memory_dir":       "workspace/memory",  // MemoryStore: workspace/memory/MEMORY.md and history.jsonl
			"archive_dir":      ".memwatch/archive", // not workspace/memory/
			"history_format":   "auto",              // history.jsonl records where nanobot keeps one, else HISTORY.md
			"consolidate":      false,               // nanobot's Consolidator and Dream consolidate its own
		},
		About: "sessions become searchable and are kept in the spool whatever nanobot trims (its internal dream: and cron: sessions are left out); workspace/memory/MEMORY.md is kept under memory_max_size; nanobot consolidates its own turns into memory/history.jsonl (consolidate: true adds memwatch's records there, with nanobot's session_key)",
	},
	"openclaw": {
		Name: "openclaw", Agent: "OpenClaw", Layout: "memory-history",
		Paths: []string{"~/.openclaw"},
		Options: map[string]any{
			// agents/<agent>/sessions/<session id>.jsonl up to 2026.7.1;
			// later versions keep transcripts in SQLite (see docs/agents.md).
			"sessions":         "agents/*/sessions/*.jsonl",
			"sessions_exclude": "*.trajectory.jsonl", // run traces beside each transcript, 70-90 times its size
			// 2026.7.2 on: transcript_events rows of each agent's database.
			"transcripts_db": "agents/*/agent/openclaw-agent.sqlite",
			"memory_dir":     "workspace",         // workspace/MEMORY.md
			"archive_dir":    ".memwatch/archive", // not workspace/memory/: OpenClaw indexes its daily notes there
			"history_format": "daily",             // workspace/memory/YYYY-MM-DD.md, the daily notes OpenClaw indexes
			"consolidate":    false,               // OpenClaw writes its own daily notes and Dreaming consolidates them
		},
		About: "sessions become searchable and are kept in the spool whatever OpenClaw rewrites (its *.trajectory.jsonl traces are not read); workspace/MEMORY.md is kept under memory_max_size, its archives outside the folders OpenClaw indexes; OpenClaw keeps its own daily notes (consolidate: true adds short, marked entries to the note of each conversation's day)",
	},
	"qwen-code": {
		Name: "qwen-code", Agent: "Qwen Code", Layout: "memory-history",
		Paths: []string{"~/.qwen/projects/*"},
		Options: map[string]any{
			"sessions":    "chats/*.jsonl",     // chats/<session uuid>.jsonl (0.24): Claude Code-like lines, Gemini API parts
			"memory_dir":  "memory",            // the project's memory/MEMORY.md, which Qwen Code extracts into itself
			"archive_dir": ".memwatch/archive", // not memory/: Qwen Code reads it
			"window":      200,
			"keep":        20,
			"consolidate": false, // Qwen Code extracts memories from its own chats (extract-cursor.json)
		},
		About: "each project's chats become searchable (each message once, with its role; tool calls and results included) and are kept in the spool whatever Qwen Code deletes; memory/MEMORY.md is bounded, its archives outside memory/; Qwen Code extracts its own memories (consolidate: true adds memory/HISTORY.md entries)",
	},
	"opencode": {
		Name: "opencode", Agent: "opencode", Layout: "memory-history",
		Paths: []string{"~/.local/share/opencode"},
		Options: map[string]any{
			"transcripts_db": "opencode.db", // tables session, message, part (WAL), read-only
			"memory_dir":     "memwatch",    // opencode keeps no memory of its own
			"archive_dir":    "memwatch/archive",
			"window":         200,
			"keep":           20,
		},
		About: "every conversation in opencode.db (its messages and their parts, tool calls and results) becomes searchable, read-only and by row, and is consolidated into ~/.local/share/opencode/memwatch/HISTORY.md, one entry per finished conversation (its sub-agents' sessions are left out)",
	},
	"kilo-code": {
		Name: "kilo-code", Agent: "Kilo Code CLI", Layout: "memory-history",
		Paths: []string{"~/.local/share/kilo"},
		Options: map[string]any{
			"transcripts_db": "kilo.db",  // opencode's tables (session, message, part; WAL): the CLI is a fork of it
			"memory_dir":     "memwatch", // the CLI keeps no memory of its own
			"archive_dir":    "memwatch/archive",
			"window":         200,
			"keep":           20,
		},
		About: "every conversation in kilo.db (its messages and their parts, tool calls and results) becomes searchable, read-only and by row, and is consolidated into ~/.local/share/kilo/memwatch/HISTORY.md, one entry per finished conversation (its sub-agents' sessions are left out)",
	},
	"continue-cli": {
		Name: "continue-cli", Agent: "Continue CLI", Layout: "memory-history",
		Paths: []string{"~/.continue"},
		Options: map[string]any{
			"transcripts_json": "sessions/*.json", // sessions/<id>.json, each written whole on every change (sessions.json, the list, holds no messages)
			"memory_dir":       "memwatch",        // cn keeps no memory of its own (rules/ are the user's)
			"archive_dir":      "memwatch/archive",
			"window":           200,
			"keep":             20,
		},
		About: "every session in ~/.continue/sessions (its messages, tool calls and results) becomes searchable, each message once, what a compaction replaced included, and is consolidated into ~/.continue/memwatch/HISTORY.md, one entry per finished conversation",
	},
	"copilot-cli": {
		Name: "copilot-cli", Agent: "GitHub Copilot CLI", Layout: "memory-history",
		Paths: []string{"~/.copilot"},
		Options: map[string]any{
			"sessions":    "session-state/*/events.jsonl", // session-state/<session id>/events.jsonl, appended
			"memory_dir":  "memwatch",                     // Copilot CLI keeps no memory of its own (session-store.db repeats the turns for its search)
			"archive_dir": "memwatch/archive",
			"window":      200,
			"keep":        20,
		},
		About: "every session's events.jsonl becomes searchable (each message once, with its role; tool calls and results included, the harness's events left out) and is consolidated into ~/.copilot/memwatch/HISTORY.md, one entry per finished conversation",
	},
	"cline": {
		Name: "cline", Agent: "Cline CLI", Layout: "memory-history",
		Paths: []string{"~/.cline"},
		Options: map[string]any{
			"transcripts_json": "data/sessions/*/*.messages.json", // data/sessions/<id>/<id>.messages.json, each written whole on every change (<id>.json beside it is the manifest, no messages)
			"memory_dir":       "memwatch",                        // Cline keeps no memory of its own (rules and skills are the user's)
			"archive_dir":      "memwatch/archive",
			"window":           200,
			"keep":             20,
		},
		About: "every session in ~/.cline/data/sessions (its messages, tool calls and results) becomes searchable, each message once, what you typed without the mode tag Cline wraps it in, and is consolidated into ~/.cline/memwatch/HISTORY.md, one entry per finished conversation",
	},
	"droid": {
		Name: "droid", Agent: "Factory Droid", Layout: "memory-history",
		Paths: []string{"~/.factory"},
		Options: map[string]any{
			"sessions":    "sessions/*/*.jsonl", // sessions/<cwd>/<id>.jsonl, appended an entry a line (<id>.settings.json beside it)
			"memory_dir":  "memwatch",           // Droid keeps no memory of its own here (AGENTS.md files are the user's)
			"archive_dir": "memwatch/archive",
			"window":      200,
			"keep":        20,
		},
		About: "every session under ~/.factory/sessions becomes searchable (each message once, with its role; tool calls and results included, the harness's context reminders and turn records left out) and is consolidated into ~/.factory/memwatch/HISTORY.md, one entry per finished conversation",
	},
	"pi": {
		Name: "pi", Agent: "Pi", Layout: "memory-history",
		Paths: []string{"~/.pi/agent"},
		Options: map[string]any{
			"sessions":    "sessions/*/*.jsonl", // sessions/--<cwd>--/<time>_<uuid>.jsonl, appended an entry a line
			"memory_dir":  "memwatch",           // Pi keeps no memory of its own (AGENTS.md files are the user's)
			"archive_dir": "memwatch/archive",
			"window":      200,
			"keep":        20,
		},
		About: "every session under ~/.pi/agent/sessions becomes searchable (each message once, with its role; tool calls and results and the commands you ran with ! included, the harness's entries and summaries left out) and is consolidated into ~/.pi/agent/memwatch/HISTORY.md, one entry per finished conversation",
	},
	"crush": {
		Name: "crush", Agent: "Crush", Layout: "memory-history",
		// A project's data directory; crush lists the projects it has run
		// in in ~/.local/share/crush/projects.json, and memwatch init
		// names each (a project deeper than ~/*/ needs its path here).
		Paths: []string{"~/*/.crush"},
		Options: map[string]any{
			"transcripts_db": "crush.db", // tables sessions, messages (WAL), read-only
			"memory_dir":     "memwatch", // crush keeps no memory of its own (CRUSH.md is the user's)
			"archive_dir":    "memwatch/archive",
			"window":         200,
			"keep":           20,
		},
		About: "each project's conversations in .crush/crush.db (its messages, tool calls and results) become searchable, read-only and by row, and are consolidated into .crush/memwatch/HISTORY.md, one entry per finished conversation (sub-agents' sessions and crush's own summaries are left out)",
	},
	"gemini-cli": {
		Name: "gemini-cli", Agent: "Gemini CLI", Layout: "memory-history",
		Paths: []string{"~/.gemini"},
		Options: map[string]any{
			"sessions":    "tmp/*/chats/session-*.jsonl", // tmp/<project>/chats/session-<time>-<id>.jsonl (0.3x on)
			"memory_dir":  "memwatch",                    // Gemini CLI keeps facts in GEMINI.md but no history
			"archive_dir": "memwatch/archive",
			"window":      200,
			"keep":        20,
		},
		About: "every chat becomes searchable (each message once, tool calls and results included) and is consolidated into ~/.gemini/memwatch/HISTORY.md, one entry per finished conversation",
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
