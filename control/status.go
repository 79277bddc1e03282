package control

import (
	"fmt"
	"time"
)

// Status is the body of GET /v1/status: the daemon, its stores and what
// it is doing, as memwatch status prints it. The daemon fills in the
// types its packages keep (watcher, replica, fleet, layout, state alias
// theirs to these).
type Status struct {
	Version  string        `json:"version"`
	PID      int           `json:"pid"`
	Started  time.Time     `json:"started"`
	StateDir string        `json:"state_dir"`
	Policy   string        `json:"policy"`
	Watcher  WatchCounts   `json:"watcher"`
	Stores   []StoreStatus `json:"stores"`
	Jobs     JobsStatus    `json:"jobs"`
	LLM      []LLMStatus   `json:"llm"`
	Warnings []string      `json:"warnings"`
	// Losses are the recent deletions and large shrinks agents made to
	// their memory files, newest first (memwatch restore brings them back).
	Losses []Loss `json:"agent_losses"`
	// Holds are the files whose rule an undo holds off (memwatch redo).
	Holds []Hold `json:"holds,omitempty"`
	// Disk held in the state directory (journal, spool, recall index).
	Disk Disk `json:"disk"`
	// CatchUp is the start-up's progress while it lasts (see docs/service.md,
	// "Running it as a service": what ready means).
	CatchUp *CatchUp `json:"catching_up,omitempty"`
	// Replica is the replication of the state to a bucket, when the
	// policy has one.
	Replica *ReplicaStatus `json:"replica,omitempty"`
	// Fleet are the hosts a central node follows (policy fleet:).
	Fleet []HostStatus `json:"fleet,omitempty"`
	// Background counts the captures, versions and index updates waiting
	// (the administrator's status only).
	Background int64 `json:"background_tasks,omitempty"`
	// Uncaptured lists the roots with logs not captured yet: a flood of
	// writes went past the background queue, and the pass through the
	// root that captures them has not ended yet.
	Uncaptured []string `json:"not_captured_yet,omitempty"`
	// Progress says how far each pass through a large root's files is
	// (an evaluation in slices: see layout.EachFile).
	Progress []Progress `json:"in_progress,omitempty"`
	// Secrets counts the credentials in the agents' memory the caller
	// reaches, as of the last count (hourly; nil before the first).
	Secrets *SecretsStatus `json:"secrets,omitempty"`
	// StateProblem is set while memwatch cannot write its state directory
	// (a full disk): what it could not record; it catches up on its own.
	StateProblem *StateProblem `json:"state_problem,omitempty"`
}

// WatchCounts is what the watcher watches (watcher.Counts).
type WatchCounts struct {
	Stores  int `json:"stores"`
	Roots   int `json:"roots"`
	Watches int `json:"watches"`
	Polled  int `json:"polled"`
}

// StoreStatus is one store in Status.
type StoreStatus struct {
	Name      string   `json:"name"`
	Layout    string   `json:"layout"`
	Compactor string   `json:"compactor"`
	Roots     []string `json:"roots"`
	// Archives and ArchiveBytes are what the store's roots hold in
	// archives (rotate: retention keys bound them).
	Archives     int   `json:"archives"`
	ArchiveBytes int64 `json:"archive_bytes"`
	// Kept counts the kept copies among the archives: versions of an
	// agent's file memwatch met during a rewrite and kept instead of
	// deleting (their lines are in the live file; these are backups).
	// KeptCopies lists the newest of them.
	Kept       int        `json:"kept"`
	KeptCopies []KeptCopy `json:"kept_copies,omitempty"`
	// NextRun is the next scheduled evaluation of its roots (a rule's
	// schedule, or the sweep); absent when none is scheduled.
	NextRun *time.Time `json:"next_run,omitempty"`
}

// KeptCopy is one kept copy: memwatch show ROOT/PATH prints it.
type KeptCopy struct {
	Root   string    `json:"root"`
	Path   string    `json:"path"`
	Target string    `json:"target"`
	Time   time.Time `json:"time"`
	Record int64     `json:"journal"`
	Size   int64     `json:"size"`
	Reason string    `json:"reason"`
}

// JobsStatus is the job engine's queue, running jobs and counters.
type JobsStatus struct {
	Queued []Job `json:"queued"`
	// QueuedCount is how many jobs are queued: Queued may list only the
	// first of them.
	QueuedCount int      `json:"queued_count"`
	Running     []Job    `json:"running"`
	Cooling     int      `json:"cooling"`
	Stats       JobStats `json:"stats"`
}

// Job is a queued or running job.
type Job struct {
	Store  string `json:"store"`
	Root   string `json:"root"`
	Rule   string `json:"rule"`
	Target string `json:"target"`
	Reason string `json:"reason,omitempty"` // why it was triggered
}

// JobStats counts the engine's jobs since start (jobs.Stats).
type JobStats struct {
	Started  int64 `json:"started"`
	Finished int64 `json:"finished"`
	Failed   int64 `json:"failed"`
	Retried  int64 `json:"retried"`
	Merged   int64 `json:"merged"`
	Deferred int64 `json:"deferred"`
}

// LLMStatus is one endpoint's budget use today.
type LLMStatus struct {
	Endpoint string `json:"endpoint"`
	Used     int64  `json:"used_tokens"`
	Budget   int64  `json:"daily_token_budget"`
}

// Loss is a deletion or a large shrink an agent made to a memory file.
type Loss struct {
	Root        string    `json:"root"`
	Path        string    `json:"path"`
	Kind        string    `json:"kind"` // "deleted" or "shrunk"
	Time        time.Time `json:"time"`
	Version     int64     `json:"version"`        // the version that lost the lines
	Before      int64     `json:"before_version"` // the version to restore
	LinesBefore int64     `json:"lines_before"`
	LinesAfter  int64     `json:"lines_after"`
	Restored    bool      `json:"restored,omitempty"` // put back at once (restore_deleted)
}

// Hold is a rule held off a file by an undo (state.Hold).
type Hold struct {
	Root   string    `json:"root"`
	Target string    `json:"target"`
	Rule   string    `json:"rule"`
	Record int64     `json:"record"` // the change undone
	Undo   int64     `json:"undo"`   // the undo's record
	Size   int64     `json:"size"`   // the file's size and lines after the undo
	Lines  int       `json:"lines"`
	Time   time.Time `json:"time"`
}

// SecretsStatus counts credentials found, by kind (gitleaks' rule ids).
type SecretsStatus struct {
	Found int            `json:"found"`
	Kinds map[string]int `json:"kinds"`
	At    time.Time      `json:"counted_at"`
}

// SecretFinding is one credential where an agent's memory holds it (its
// value never kept or printed): memwatch secrets lists them.
type SecretFinding struct {
	Kind  string    `json:"kind"`
	Root  string    `json:"root"`
	File  string    `json:"file"`
	Line  int64     `json:"line"`
	Cite  string    `json:"citation"`
	Live  bool      `json:"live"` // the agent's file holds it now (else only memwatch's spool)
	Since time.Time `json:"modified,omitzero"`
}

// RedoResult is the body of POST /v1/redo/{id}: the hold that ended on the
// record's file, and those of the other files of the same action.
type RedoResult struct {
	Hold
	Also []Hold `json:"also,omitempty"`
}

// Disk is what memwatch holds on disk in its state directory.
type Disk struct {
	Journal  int64 `json:"journal_bytes"`
	Spool    int64 `json:"spool_bytes"`
	Index    int64 `json:"index_bytes"`
	Versions int64 `json:"versions_bytes"`
}

// CatchUp is how far the start-up is: the roots evaluated, and the files
// and bytes read of the total, with the rate and the time left.
type CatchUp struct {
	Done       int64         `json:"done"`  // roots evaluated
	Total      int64         `json:"total"` // roots found at start
	Files      int64         `json:"files"`
	FilesTotal int64         `json:"files_total"`
	Bytes      int64         `json:"bytes"`
	BytesTotal int64         `json:"bytes_total"`
	Rate       float64       `json:"bytes_per_second"`
	Left       time.Duration `json:"left"`
	// Roots are the roots still catching up: those under way first, then
	// those not started, each most left first.
	Roots []RootProgress `json:"roots,omitempty"`
	// Waiting counts the roots not started yet, and their bytes.
	Waiting      int64 `json:"roots_waiting,omitempty"`
	WaitingBytes int64 `json:"bytes_waiting,omitempty"`
}

// RootProgress is one root's part of the catch-up.
type RootProgress struct {
	Root       string `json:"root"`
	Store      string `json:"store"`
	Files      int64  `json:"files"`
	FilesTotal int64  `json:"files_total"`
	Bytes      int64  `json:"bytes"`
	BytesTotal int64  `json:"bytes_total"`
}

// String says how far the catch-up is, as the log and status say it.
func (c CatchUp) String() string {
	s := fmt.Sprintf("%d of %d roots evaluated; %d of %d files, %s of %s read", c.Done, c.Total, c.Files, c.FilesTotal, Human(c.Bytes), Human(c.BytesTotal))
	if c.Rate > 0 {
		s += fmt.Sprintf(" (%s/s)", Human(int64(c.Rate)))
	}
	if c.Left > 0 {
		s += fmt.Sprintf(", about %s left", c.Left)
	}
	return s
}

// ReplicaStatus is the replication of the state to a bucket
// (replica.Status).
type ReplicaStatus struct {
	URL      string    `json:"url"`
	Endpoint string    `json:"endpoint,omitempty"`
	Lag      float64   `json:"lag_seconds"`            // how long the oldest change not in the bucket has waited
	LastSync time.Time `json:"last_sync,omitzero"`     // when the bucket last held every change
	Bytes    int64     `json:"bucket_bytes"`           // what the bucket holds for this state (-1: not counted yet)
	Failures int64     `json:"failures"`               // failed syncs since start
	Outage   string    `json:"outage,omitempty"`       // the cause, while the bucket cannot be reached
	Since    time.Time `json:"outage_since,omitzero"`  // when the outage began
	Refused  string    `json:"refused,omitempty"`      // why replication does not run at all
	Pending  bool      `json:"pending_changes"`        // changes wait to be sent
	Behind   []string  `json:"behind,omitempty"`       // the databases behind
	Counted  time.Time `json:"bytes_counted,omitzero"` // when Bytes was counted
}

// HostStatus is where a central node is with one host it follows
// (fleet.HostStatus).
type HostStatus struct {
	Host       string    `json:"host"`
	Dir        string    `json:"dir"`                     // its state, restored here
	Bytes      int64     `json:"bytes"`                   // of its restored databases
	LastChange time.Time `json:"last_change,omitzero"`    // the newest change applied here
	Lag        float64   `json:"lag_seconds"`             // how long the oldest change in the bucket not applied here has waited
	Stopped    bool      `json:"stopped"`                 // no change in the bucket for fleet.stopped_after
	Databases  []string  `json:"databases"`               // the databases followed
	Error      string    `json:"error,omitempty"`         // why a database of it is not followed now (tried again)
	Checked    time.Time `json:"bucket_checked,omitzero"` // when Lag and Stopped were measured
	Copied     time.Time `json:"copied,omitzero"`         // when its searchable copy last took in its changes
}

// Progress is how far a pass through a large root's files is
// (layout.Progress).
type Progress struct {
	Store string    `json:"store"`
	Root  string    `json:"root"`
	Rule  string    `json:"rule"`
	Files int64     `json:"files"`           // looked at so far in this pass
	Total int64     `json:"total,omitempty"` // in the root (0: not counted yet)
	Since time.Time `json:"since"`
	// Rate is files a second so far; Left an estimate of the time left.
	Rate float64       `json:"rate"`
	Left time.Duration `json:"left,omitempty"`
}

// StateProblem is the state directory's trouble in memwatch status.
type StateProblem struct {
	Dir    string    `json:"dir"`
	Since  time.Time `json:"since"`
	Error  string    `json:"error"`
	Missed []string  `json:"not_recorded"`
	Roots  int       `json:"roots_to_catch_up"`
}

// Human renders a size as a person reads it: "149 KiB", "2.5 MiB", "812 B"
// (a whole number from 10 of a unit up, one decimal under).
func Human(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for (v >= 1024 || v <= -1024) && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 || v >= 10 || v <= -10 {
		return fmt.Sprintf("%.0f %s", v, units[u])
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
