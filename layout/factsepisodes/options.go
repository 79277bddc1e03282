package factsepisodes

import (
	"time"

	"github.com/memwatch/memwatch/policy"
)

// Options are the facts-episodes store keys.
type Options struct {
	// IndexFile is the index of facts and episodes memwatch keeps current;
	// "" turns it off.
	IndexFile string `yaml:"index_file" path:"local" doc:"the index file kept current (\"\": none)"`
	// SummaryWords is the length of the "> Summary:" lines memwatch writes.
	SummaryWords int `yaml:"summary_words" doc:"length of generated > Summary: lines"`
	// EpisodesMaxSize splits a month's episode file larger than this by ISO
	// week; 0 never splits.
	EpisodesMaxSize policy.Size `yaml:"episodes_max_size" doc:"split a bigger month of episodes by ISO week (0: never)"`
	// SummarizeAfter compresses months older than this into
	// episodes/YYYY-summary.md (llm compactor only); 0 never does.
	SummarizeAfter time.Duration `yaml:"summarize_after" doc:"compress older months into episodes/YYYY-summary.md, llm only (0: never)"`
}

// DefaultOptions returns the options a store gets for keys it leaves out.
func DefaultOptions() *Options {
	return &Options{IndexFile: "INDEX.md", SummaryWords: 10}
}

// NewOptions implements layout.Layout.
func (Layout) NewOptions() any { return DefaultOptions() }

// OptionsOf returns the store's options (the defaults for a store with none).
func OptionsOf(s *policy.Store) *Options { return policy.OptionsOf(s, DefaultOptions) }
