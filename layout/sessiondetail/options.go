package sessiondetail

import (
	"time"

	"github.com/memwatch/memwatch/policy"
)

// Options are the session-detail store keys.
type Options struct {
	// SummaryEvery writes a detail/ summary per this many new lines of
	// messages.jsonl.
	SummaryEvery int `yaml:"summary_every" doc:"a detail/ summary per this many new lines of messages.jsonl"`
	// SessionIdle is how long a quiet session waits before the rest of its
	// log is summarised.
	SessionIdle time.Duration `yaml:"session_idle" doc:"and one for the rest when the session is quiet this long"`
	// ScrubSecrets masks the credentials in messages.jsonl once the
	// session is idle (layout.ScrubRule): opt-in, no copy kept.
	ScrubSecrets bool `yaml:"scrub_secrets" doc:"mask credentials in the agent's own log once idle, keeping no copy (opt-in)"`
	// OverviewMaxSize, when set, warns (journal and status, never a
	// rewrite) when overview.md is larger.
	OverviewMaxSize policy.Size `yaml:"overview_max_size" doc:"warn when overview.md is larger (0: never)"`
}

// DefaultOptions returns the options a store gets for keys it leaves out.
func DefaultOptions() *Options {
	return &Options{SummaryEvery: 200, SessionIdle: 30 * time.Minute}
}

// NewOptions implements layout.Layout.
func (Layout) NewOptions() any { return DefaultOptions() }

// OptionsOf returns the store's options (the defaults for a store with none).
func OptionsOf(s *policy.Store) *Options { return policy.OptionsOf(s, DefaultOptions) }
