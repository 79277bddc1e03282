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
	Table string `yaml:"table"`
	// LimitPerApp is the most records an app keeps.
	LimitPerApp int `yaml:"limit_per_app"`
	// MaxChars refuses an LLM edit longer than this (FIFO instead).
	MaxChars int `yaml:"max_chars"`
	// Conversations, when set, is an absolute glob of conversation logs
	// with {app} standing for the app's name: each ended conversation
	// becomes a record (llm compactor only).
	Conversations string `yaml:"conversations" path:"anyglob"`
	// ConversationIdle is how long a conversation is quiet before it has ended.
	ConversationIdle time.Duration `yaml:"conversation_idle"`
	// CreateTable creates the table when the database has none.
	CreateTable bool `yaml:"create_table"`
	// MaxRecordSize bounds the record memwatch reads: a larger one is never
	// loaded, sent to the LLM, edited or removed (removing it would put all
	// of it in the journal); it is reported and left as it is.
	MaxRecordSize policy.Size `yaml:"max_record_size"`
	// MaxRows bounds the records one job reads and removes for an app; the
	// rest is the next job's.
	MaxRows int `yaml:"max_rows"`
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
