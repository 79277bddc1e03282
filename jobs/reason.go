package jobs

// Reason says why a job runs: what the watcher saw, a schedule, a person.
// The journal keeps it as the trigger of what the job did.
type Reason string

// The reasons. A person's (Asked) skips the cooldown; one after which the
// watcher may not have seen every change (Unseen) has the root's
// evaluation look for logs gone meanwhile.
const (
	ReasonChange  Reason = "change"       // files changed, as the watcher saw
	ReasonScan    Reason = "scan"         // a root found (at start, or added)
	ReasonNewRoot Reason = "new-root"     // a root appeared under a store's glob
	ReasonRescan  Reason = "rescan"       // the kernel's queue overflowed: the root is read again
	ReasonMany    Reason = "many changes" // a flood of changes, too many to follow file by file
	ReasonPoll    Reason = "poll"         // a root polled (no watch for it)

	ReasonTrigger  Reason = "trigger"  // memwatch trigger
	ReasonRedo     Reason = "redo"     // memwatch redo
	ReasonSchedule Reason = "schedule" // a rule's cron schedule
	ReasonTick     Reason = "tick"     // a rule's own interval
	ReasonSweep    Reason = "sweep"    // the store's sweep

	ReasonNextSlice           Reason = "next slice"              // a large root's evaluation goes on
	ReasonChangedDuringPass   Reason = "changed during the pass" // changes (or dropped captures) met a pass
	ReasonChangedWhileRunning Reason = "changed while running"
	ReasonRetry               Reason = "retry after a deferral"
	ReasonLogGone             Reason = "log gone"
	ReasonStateWritable       Reason = "state writable again"
	ReasonRestoreDeleted      Reason = "restore_deleted"
)

// Asked reports whether a person asked for the work (memwatch trigger,
// redo): no cooldown holds it back.
func (r Reason) Asked() bool { return r == ReasonTrigger || r == ReasonRedo }

// Unseen reports whether files may have changed without the watcher
// seeing each change: logs gone meanwhile are looked for.
func (r Reason) Unseen() bool { return r == ReasonScan || r == ReasonRescan || r == ReasonMany }
