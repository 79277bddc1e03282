package memoryhistory

import (
	"fmt"
	"time"

	"github.com/memwatch/memwatch/policy"
)

// Options are the memory-history store keys. The agent presets
// (policy/presets.go) are values of these.
type Options struct {
	// MemoryMaxSize is the size above which MEMORY.md is compressed.
	MemoryMaxSize policy.Size `yaml:"memory_max_size" doc:"MEMORY.md is compressed above this"`
	// MemoryMaxLines, when set, is also a limit on MEMORY.md's lines (Claude
	// Code loads the first 200 lines of its auto-memory).
	MemoryMaxLines int `yaml:"memory_max_lines" doc:"a line limit as well (0: none)"`
	// LinkPruned puts the facts compression moves out of MEMORY.md in a
	// topic file beside it (memory-older-YYYY-MM.md) and keeps a link to it
	// at the end of MEMORY.md, so the agent can still open what its loader
	// no longer shows; without it they go to archive_dir.
	LinkPruned bool `yaml:"link_pruned" doc:"moved facts go to memory-older-YYYY-MM.md, which MEMORY.md links"`
	// Sessions is the glob of the agent's session logs, inside each root
	// ({a,b} alternatives for the places different versions use).
	Sessions string `yaml:"sessions" path:"glob" doc:"session logs, inside each root ({a,b} alternatives)"`
	// SessionsExclude leaves out the files under Sessions whose base name
	// matches it: files beside the transcripts that are not conversations
	// (OpenClaw's *.trajectory.jsonl) or sessions the agent runs for itself
	// (nanobot's dream: and cron: sessions).
	SessionsExclude string `yaml:"sessions_exclude" path:"anyglob" doc:"base names under sessions left out"`
	// TranscriptsDB is the glob of SQLite databases holding transcripts
	// as rows (OpenClaw 2026.7.2 and later: transcripts.go), inside each
	// root; read-only, every session a log of the spool.
	TranscriptsDB string `yaml:"transcripts_db" path:"glob" doc:"SQLite databases holding transcripts as rows, read-only"`
	// TranscriptsJSON is the glob of JSON documents holding a
	// conversation each, which the agent writes whole on every change
	// (Continue CLI's sessions/*.json: transcripts.Document), inside each
	// root; every conversation a log of the spool.
	TranscriptsJSON string `yaml:"transcripts_json" path:"glob" doc:"JSON documents holding a conversation each, written whole"`
	// Consolidate turns conversations into history entries (and facts,
	// with an LLM). Off for agents that consolidate their own (nanobot's
	// Consolidator and Dream, OpenClaw's daily notes and Dreaming, Claude
	// Code's auto-memory): memwatch then captures, indexes, protects and
	// recalls their sessions, and bounds their memory files, but writes no
	// second history beside theirs.
	Consolidate bool `yaml:"consolidate" doc:"turn conversations into history entries (false: capture, index and recall only)"`
	// Window consolidates a session when more messages than this are
	// pending after the last one consolidated (memory-history's memoryWindow,
	// counted as its agent's trim would leave them: see plan)...
	Window int `yaml:"window" doc:"consolidate when more messages than this are pending since the last consolidation..."`
	// ...all but the newest Keep (under Window).
	Keep int `yaml:"keep" doc:"...all but the newest keep (under window)"`
	// SessionIdle consolidates a session quiet this long to its end.
	SessionIdle time.Duration `yaml:"session_idle" doc:"a session quiet this long is consolidated to its end"`
	// ScrubSecrets masks the credentials in the agent's own session logs
	// once they are idle (layout.ScrubRule): opt-in, the one rewrite that
	// removes bytes an agent wrote on purpose, with no copy kept.
	ScrubSecrets bool `yaml:"scrub_secrets" doc:"mask credentials in the agent's own logs once idle, keeping no copy (opt-in)"`
	// HistoryMode is mirror (HISTORY.md keeps every entry, the monthly
	// files copy them) or move (ended months leave HISTORY.md).
	HistoryMode string `yaml:"history_mode" enum:"mirror|move" doc:"mirror (HISTORY.md keeps every entry) or move (ended months leave it)"`
	// FallbackMessages and FallbackChars bound the raw entry written when
	// no summary can be made: that many messages, each cut to that length.
	FallbackMessages int `yaml:"fallback_messages" doc:"the raw fallback entry keeps this many messages..."`
	FallbackChars    int `yaml:"fallback_chars" doc:"...each cut to this many characters"`
	// Regrow is how much MEMORY.md must grow after a compression that
	// could not get under MemoryMaxSize before the next is tried; 0 means
	// a quarter of it.
	Regrow policy.Size `yaml:"regrow" doc:"growth of MEMORY.md before another compression is tried (0: a quarter of memory_max_size)"`
	// MemoryDir holds MEMORY.md, HISTORY.md and the monthly files,
	// relative to the root.
	MemoryDir string `yaml:"memory_dir" path:"local" doc:"where MEMORY.md and HISTORY*.md live, inside the root"`
	// ArchiveDir holds their pre-images; agents that index a folder
	// (OpenClaw's memory/) get one outside it.
	ArchiveDir string `yaml:"archive_dir" path:"local" doc:"where their pre-images are archived, inside the root"`
	// HistoryFormat is where and how consolidation writes a conversation's
	// history entry, so that it lands where the agent reads:
	//   - markdown: a "## <ISO time>" entry in HISTORY.md and its monthly
	//     HISTORY-YYYY-MM.md (the seed; nanobot before history.jsonl);
	//   - jsonl: a {cursor, timestamp, content} record in history.jsonl
	//     (nanobot's current MemoryStore);
	//   - daily: an entry in memory/YYYY-MM-DD.md of the conversation's day
	//     (OpenClaw's daily notes, which it indexes);
	//   - auto: jsonl when memory_dir holds a history.jsonl, else markdown.
	HistoryFormat string `yaml:"history_format" enum:"markdown|jsonl|daily|auto" doc:"markdown (HISTORY.md + monthly), jsonl (history.jsonl), daily (memory/YYYY-MM-DD.md) or auto"`
}

// DefaultOptions returns the options a store gets for keys it leaves out.
func DefaultOptions() *Options {
	return &Options{
		MemoryMaxSize:    8 << 10,
		Sessions:         "sessions/*.jsonl",
		Consolidate:      true,
		Window:           50,
		Keep:             10,
		SessionIdle:      30 * time.Minute,
		HistoryMode:      "mirror",
		FallbackMessages: 10,
		FallbackChars:    200,
		MemoryDir:        ".",
		ArchiveDir:       ArchiveDir,
		HistoryFormat:    "markdown",
	}
}

// NewOptions implements layout.Layout.
func (Layout) NewOptions() any { return DefaultOptions() }

// OptionsOf returns the store's options (the defaults for a store with none).
func OptionsOf(s *policy.Store) *Options { return policy.OptionsOf(s, DefaultOptions) }

// Warnings implements policy.OptionsWarner.
func (o *Options) Warnings(*policy.Store) []string {
	if o.Consolidate && o.Keep >= o.Window {
		return []string{fmt.Sprintf("keep (%d) is not less than window (%d): a consolidation takes the pending messages but the newest keep, so memwatch keeps %d (window - 1); lower keep or raise window", o.Keep, o.Window, o.keep())}
	}
	return nil
}

// keep is the messages a consolidation leaves pending: Keep, under the
// window (a keep of window or more would never consolidate before idle).
func (o *Options) keep() int { return max(0, min(o.Keep, o.Window-1)) }

// regrow is how much MEMORY.md grows before a compression is tried again
// (Regrow, else a quarter of memory_max_size).
func (o *Options) regrow() int64 {
	if o.Regrow > 0 {
		return int64(o.Regrow)
	}
	return int64(o.MemoryMaxSize) / 4
}
