package apprecords

import (
	"fmt"
	"strings"
	"time"

	"github.com/memwatch/memwatch/policy"
)

// Options are the app-records store keys.
type Options struct {
	// Table is the SQLite table of records.
	Table string `yaml:"table" doc:"the table of records in each database"`
	// LimitPerApp is the most records an app keeps.
	LimitPerApp int `yaml:"limit_per_app" doc:"records kept per app; the oldest go first (FIFO)"`
	// MaxChars refuses an LLM edit longer than this (FIFO instead).
	MaxChars int `yaml:"max_chars" doc:"an LLM edit longer than this is refused (FIFO instead)"`
	// Conversations, when set, is an absolute glob of conversation logs
	// with {app} standing for the app's name: each ended conversation
	// becomes a record (llm compactor only).
	Conversations string `yaml:"conversations" path:"anyglob" doc:"e.g. /srv/conv/{app}/*.jsonl: ended conversations become records"`
	// ConversationIdle is how long a conversation is quiet before it has ended.
	ConversationIdle time.Duration `yaml:"conversation_idle" doc:"a conversation quiet this long has ended"`
	// CreateTable creates the table when the database has none.
	CreateTable bool `yaml:"create_table" doc:"create the table when it is missing"`
	// MaxRecordSize bounds the record memwatch reads: a larger one is never
	// loaded, sent to the LLM, edited or removed (removing it would put all
	// of it in the journal); it is reported and left as it is.
	MaxRecordSize policy.Size `yaml:"max_record_size" doc:"a record larger than this is not read"`
	// MaxRows bounds the records one job reads and removes for an app; the
	// rest is the next job's.
	MaxRows int `yaml:"max_rows" doc:"rows read from a table at most"`
}

// DefaultOptions returns the options a store gets for keys it leaves out.
func DefaultOptions() *Options {
	return &Options{Table: "app_memories", LimitPerApp: 10, MaxChars: 200, ConversationIdle: 10 * time.Minute,
		MaxRecordSize: 64 << 10, MaxRows: 1000}
}

// Validate implements the policy's cross-field check.
func (o *Options) Validate() error {
	if o.Table == "" {
		return fmt.Errorf("table must name the records table, e.g. app_memories")
	}
	if o.MaxRecordSize < 1024 {
		return fmt.Errorf("max_record_size must be at least 1KiB")
	}
	if o.MaxRows < 1 {
		return fmt.Errorf("max_rows must be at least 1")
	}
	if o.Conversations != "" && !strings.HasPrefix(o.Conversations, "/") {
		return fmt.Errorf("conversations %q must be an absolute glob, e.g. /srv/conv/{app}/*.jsonl", o.Conversations)
	}
	return nil
}

// Warnings implements policy.OptionsWarner.
func (o *Options) Warnings(s *policy.Store) []string {
	if o.Conversations != "" && s.Compactor != "llm" {
		return []string{fmt.Sprintf("conversations is set but the compactor is %s: records are created from ended conversations only with compactor: llm (the offline compactor invents none; it only applies limit_per_app)", s.Compactor)}
	}
	return nil
}

// NewOptions implements layout.Layout.
func (Layout) NewOptions() any { return DefaultOptions() }

// OptionsOf returns the store's options (the defaults for a store with none).
func OptionsOf(s *policy.Store) *Options { return policy.OptionsOf(s, DefaultOptions) }
