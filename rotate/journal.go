package rotate

import (
	"context"
	"time"

	"github.com/memwatch/memwatch/state"
)

// JournalRetention bounds the journal in the state directory; zero values
// keep everything.
type JournalRetention struct {
	MaxAge   time.Duration // records older than this go (0: none)
	MaxBytes int64         // the journal's estimated bytes (0: no limit)
	// RowRule reports a rule whose targets are database rows, not files
	// (app-records): no rule decides anything from a row's newest record,
	// so it is not kept for that. Nil: every rule's targets are files.
	RowRule func(rule string) bool
}

// Active reports whether the retention can remove anything.
func (r JournalRetention) Active() bool { return r.MaxAge > 0 || r.MaxBytes > 0 }

// JournalResult is what journal retention removed (or would remove).
type JournalResult struct {
	Records int   `json:"records"`
	Freed   int64 `json:"freed"` // estimated bytes
	Held    int64 `json:"held"`  // estimated bytes left
	Kept    int   `json:"kept"`  // records left
}

// PlanJournal picks the journal records retention removes, oldest first.
// The journal is more than a log, so some records are never removed:
//   - the newest record of each file (root, rule, target), and its newest
//     done record: rules decide "nothing new" and "wait for regrowth" from
//     them, and the undo of the latest action reads them;
//   - a record that names an archive still on disk, and the compression
//     of such an archive: the journal is the list of archives (Archives),
//     and an archive no record names would never be pruned;
//   - a pending record: recovery resolves it at the next start.
//
// An undo of a removed record fails with state.ErrPrunedRecord.
func PlanJournal(entries []state.Entry, r JournalRetention, now time.Time) (ids []int64, res JournalResult) {
	if !r.Active() {
		return nil, res
	}
	type key struct{ root, rule, target string }
	newest, newestDone := map[key]int64{}, map[key]int64{}
	gone := map[string]bool{} // root + archive path pruned by archive retention
	var total int64
	for _, e := range entries {
		newest[key{e.Root, e.Rule, e.Target}] = e.ID
		if e.Outcome == state.Done {
			newestDone[key{e.Root, e.Rule, e.Target}] = e.ID
		}
		if e.Rule == RulePrune && e.Outcome == state.Done {
			gone[e.Root+"\x00"+e.Target] = true
		}
		total += e.Bytes
	}
	compressedTo := map[string]string{} // root + original -> root + .gz
	for _, e := range entries {
		if e.Rule == RuleCompress && e.Outcome == state.Done {
			compressedTo[e.Root+"\x00"+e.Target] = e.Root + "\x00" + e.Archive
		}
	}
	archiveGone := func(root, path string) bool {
		k := root + "\x00" + path
		if gz, ok := compressedTo[k]; ok {
			return gone[gz]
		}
		return gone[k]
	}
	removable := func(e state.Entry) bool {
		k := key{e.Root, e.Rule, e.Target}
		latest := newest[k] == e.ID || newestDone[k] == e.ID
		switch {
		case e.Outcome == state.Pending:
			return false
		case e.Rule == RuleCompress:
			return archiveGone(e.Root, e.Target)
		case e.Rule == RulePrune:
			return true
		case latest && (r.RowRule == nil || !r.RowRule(e.Rule)):
			return false
		case e.Archive != "":
			return archiveGone(e.Root, e.Archive)
		}
		return true
	}
	held := total
	for _, e := range entries { // oldest first
		old := r.MaxAge > 0 && now.Sub(e.Time) > r.MaxAge
		big := r.MaxBytes > 0 && held > r.MaxBytes
		if !old && !big || !removable(e) {
			continue
		}
		ids = append(ids, e.ID)
		held -= e.Bytes
		res.Records++
		res.Freed += e.Bytes
	}
	res.Held, res.Kept = held, len(entries)-res.Records
	return ids, res
}

// PruneJournal applies journal retention now; dryRun only plans.
func PruneJournal(ctx context.Context, db *state.DB, r JournalRetention, now time.Time, dryRun bool) (JournalResult, error) {
	if !r.Active() {
		return JournalResult{}, nil
	}
	entries, err := db.Entries(ctx)
	if err != nil {
		return JournalResult{}, err
	}
	ids, res := PlanJournal(entries, r, now)
	if dryRun {
		return res, nil
	}
	return res, db.DeleteRecords(ctx, ids)
}
