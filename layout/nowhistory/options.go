package nowhistory

import (
	"time"

	"github.com/memwatch/memwatch/policy"
)

// Options are the now-history store keys.
type Options struct {
	// MaxSize is the size above which memory.md is compacted.
	MaxSize policy.Size `yaml:"max_size" doc:"memory.md is compacted above this (0: never)"`
	// KeepHistory is how many of the newest ## History entries a heuristic
	// compaction keeps.
	KeepHistory int `yaml:"keep_history" doc:"History entries kept in memory.md by the heuristic"`
	// RunRetention archives run files older than this (by the date in their
	// name, else their mtime); 0 keeps them forever.
	RunRetention time.Duration `yaml:"run_retention" doc:"run files older than this go (0: kept)"`
	// SnapshotFile, when set, is kept equal to the injection text an agent
	// would load from memory.md (memwatch snapshot), for agents that read a
	// file instead of calling a tool.
	SnapshotFile string `yaml:"snapshot_file" path:"local" doc:"a file kept with the injection-ready view (\"\": none)"`
	// Regrow is how much memory.md must grow after a compaction that could
	// not get under MaxSize before the next is tried; 0 means a quarter of
	// MaxSize.
	Regrow policy.Size `yaml:"regrow" doc:"growth of memory.md before another compaction is tried (0: a quarter of max_size)"`
}

// DefaultOptions returns the options a store gets for keys it leaves out.
func DefaultOptions() *Options {
	return &Options{MaxSize: 100 << 10, KeepHistory: 10}
}

// NewOptions implements layout.Layout.
func (Layout) NewOptions() any { return DefaultOptions() }

// OptionsOf returns the store's options (the defaults for a store with none).
func OptionsOf(s *policy.Store) *Options { return policy.OptionsOf(s, DefaultOptions) }
