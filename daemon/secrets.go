package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/memwatch/memwatch/access"
	"github.com/memwatch/memwatch/answer"
	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/control"
	"github.com/memwatch/memwatch/layout/registry"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
)

// secretTally is what the daemon knows of the credentials in the agents'
// memory, for status and the overview page, so a person knows to rotate
// (memwatch secrets lists them). A pass once the catch-up is done and
// hourly reads each root's searchable files again only when one's size or
// time changed, and its held lines only when the spool's logs of the
// root changed: idle, a pass reads next to nothing.
type secretTally struct {
	mu    sync.Mutex             // guards the maps, at, changed and last
	files map[string]fileSecrets // by root, then path
	held  map[string]heldSecrets // by root
	at    time.Time
	// changed are the roots evaluated after a change since a pass began
	// (what the agent wrote captured); a pass of them runs at most every
	// recountEvery (recountChanged), so status counts a credential an
	// agent just wrote, or one in a log it just deleted, within a minute.
	changed map[string]bool
	last    time.Time // the last pass of changed roots began
	// pass is held through a pass: one at a time.
	pass sync.Mutex
}

// recountEvery is how often at most the roots that changed are counted
// again: each such pass stats their files and reads what they gained, and
// the held lines of the logs the spool saw change (countHeld).
const recountEvery = 30 * time.Second

// markChanged notes a root evaluated after a change.
func (t *secretTally) markChanged(root string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.changed == nil {
		t.changed = map[string]bool{}
	}
	t.changed[root] = true
}

// takeChanged returns the roots changed since the last pass and forgets
// them, when a first count is done and recountEvery has passed (nil
// otherwise).
func (t *secretTally) takeChanged(now time.Time) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at.IsZero() || len(t.changed) == 0 || now.Sub(t.last) < recountEvery {
		return nil
	}
	only := t.changed
	t.changed, t.last = nil, now
	return only
}

// recountChanged starts a pass of the roots changed since the last one,
// when takeChanged gives some (the main loop's, every few seconds).
func (d *Daemon) recountChanged(ctx context.Context, wg *sync.WaitGroup) {
	only := d.secrets.takeChanged(time.Now())
	if only == nil {
		return
	}
	wg.Add(1)
	go func() { defer wg.Done(); d.countSecrets(ctx, only) }()
}

// fileSecrets is a file's count, and its size and time when counted: a
// file unchanged since is not read; one grown is read from where the
// count stopped (answer.FileCount).
type fileSecrets struct {
	size  int64
	mtime time.Time
	answer.FileCount
}

type heldSecrets struct {
	stamp string // the root's logs as the spool knew them (Logs)
	kinds map[string]int
	// logs are the counts of each log's held lines, by its id: when the
	// root's stamp changes (a line captured in any of its logs), only
	// the logs whose own stamp changed are read for credentials again,
	// from where their count stopped when they only gained lines
	// (countHeld).
	logs map[int64]heldLog
}

type heldLog struct {
	stamp string // the log's generation, last sequence and whether it is gone
	kinds map[string]int
}

func newSecretTally() *secretTally {
	return &secretTally{files: map[string]fileSecrets{}, held: map[string]heldSecrets{}}
}

// tallyFile, in the state directory, keeps the tally between runs
// (answer.SavedTally).
const tallyFile = answer.TallyFile

// load reads the tally a previous run saved at path; a missing file is
// no tally, and one that does not decode is set aside (logged by the
// caller): it is counted again.
func (t *secretTally) load(path string) error {
	saved, err := answer.ReadTally(path)
	if err != nil || saved == nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, f := range saved.Files {
		if f.Kinds == nil {
			f.Kinds = map[string]int{}
		}
		t.files[k] = fileSecrets{size: f.Size, mtime: f.Mtime, FileCount: answer.FileCount{Dev: f.Dev, Ino: f.Ino, End: f.End, Sum: f.Sum, Kinds: f.Kinds, Partial: f.Partial}}
	}
	for k, h := range saved.Held {
		if h.Kinds == nil {
			h.Kinds = map[string]int{}
		}
		logs := map[int64]heldLog{}
		for id, l := range h.Logs {
			if l.Kinds == nil {
				l.Kinds = map[string]int{}
			}
			logs[id] = heldLog{stamp: l.Stamp, kinds: l.Kinds}
		}
		t.held[k] = heldSecrets{stamp: h.Stamp, kinds: h.Kinds, logs: logs}
	}
	t.at = saved.At
	return nil
}

// save writes the tally to path, whole or not at all (a file beside it,
// renamed over it).
func (t *secretTally) save(path string) error {
	t.mu.Lock()
	data, err := json.Marshal(t.savedLocked(nil))
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("save the credentials' tally: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("save the credentials' tally: %w", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save the credentials' tally: %w", err)
	}
	return nil
}

// savedLocked is the tally as it is saved (t.mu held), of the roots keep
// says (nil: all). Its maps are the
// tally's own, never written once counted: it may be read after t.mu is
// let go.
func (t *secretTally) savedLocked(keep func(root string) bool) *answer.SavedTally {
	saved := answer.SavedTally{Version: 1, Detector: secrets.Fingerprint(), At: t.at, Files: map[string]answer.SavedFile{}, Held: map[string]answer.SavedHeld{}}
	for k, f := range t.files {
		if root, _, _ := strings.Cut(k, "\x00"); keep != nil && !keep(root) {
			continue
		}
		saved.Files[k] = answer.SavedFile{Size: f.size, Mtime: f.mtime, Kinds: f.Kinds, Dev: f.Dev, Ino: f.Ino, End: f.End, Sum: f.Sum, Partial: f.Partial}
	}
	for k, h := range t.held {
		if keep != nil && !keep(k) {
			continue
		}
		logs := make(map[int64]answer.SavedHeldLog, len(h.logs))
		for id, l := range h.logs {
			logs[id] = answer.SavedHeldLog{Stamp: l.stamp, Kinds: l.kinds}
		}
		saved.Held[k] = answer.SavedHeld{Stamp: h.stamp, Kinds: h.kinds, Logs: logs}
	}
	return &saved
}

// saved is the tally of the roots keep says (nil: all) now, for a listing
// to skip what it vouches for (nil before the first count).
func (t *secretTally) saved(keep func(root string) bool) *answer.SavedTally {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at.IsZero() {
		return nil
	}
	return t.savedLocked(keep)
}

// handleSecrets is GET /v1/secrets: memwatch secrets for a caller who
// cannot read memwatch's state (a daemon run by root, its state root's):
// the files and the spool's lines of each root the caller reaches, read
// by the daemon as the root's owner, what the tally vouches for skipped.
func (d *Daemon) handleSecrets(w http.ResponseWriter, r *http.Request) {
	if !d.needRight(w, r, policy.RightRead) {
		return
	}
	ctx := r.Context()
	caller := access.CallerOf(ctx)
	det := secrets.Default()
	reach := map[string]bool{}
	type reached struct {
		s  *policy.Store
		id confine.ID
	}
	var roots []reached
	for _, s := range d.Policy().Stores {
		if !caller.ReachesStore(s) {
			continue
		}
		for _, id := range s.RootIDs() {
			if caller.Reaches(s, id) {
				reach[id.Path] = true
				roots = append(roots, reached{s, id})
			}
		}
	}
	tally := d.secrets.saved(func(root string) bool { return reach[root] })
	out := answer.SecretList{Max: control.MaxSecretFindings}
	for _, r := range roots {
		srcs, ok := registry.SearchSources(r.s)
		if !ok {
			continue
		}
		root, err := d.openRoot(r.s, r.id.Path)
		if err != nil {
			continue
		}
		answer.SecretsInRoot(ctx, det, root, srcs, d.spool, tally, &out)
		root.Close()
		if err := ctx.Err(); err != nil {
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
	}
	res := control.SecretsResponse{Findings: out.Sorted(), More: out.More}
	if res.Findings == nil {
		res.Findings = []control.SecretFinding{}
	}
	writeJSON(w, http.StatusOK, res)
}

// pass counts again what changed in the policy's roots.
func (d *Daemon) tallySecrets(ctx context.Context) { d.countSecrets(ctx, nil) }

// countSecrets counts again what changed in the roots of only (nil: in
// every root of the policy).
func (d *Daemon) countSecrets(ctx context.Context, only map[string]bool) {
	t := d.secrets
	t.pass.Lock()
	defer t.pass.Unlock()
	if only == nil {
		t.mu.Lock()
		t.changed = nil // this pass reads them all
		t.mu.Unlock()
	}
	det := secrets.Default()
	start, cpuStart := time.Now(), cpuSeconds()
	var read, heldCounted, heldRead int
	var bytes int64
	seen := map[string]bool{}
	// One query says which roots hold anything beyond their live files:
	// the others are asked nothing more of the spool.
	gens := d.spool.Gens(ctx)
	for _, s := range d.Policy().Stores {
		srcs, ok := registry.SearchSources(s)
		if !ok {
			continue
		}
		for _, id := range s.RootIDs() {
			if ctx.Err() != nil {
				return
			}
			if only != nil && !only[id.Path] {
				continue
			}
			root, err := d.openRoot(s, id.Path)
			if err != nil {
				continue
			}
			for _, m := range answer.SearchableFiles(root, srcs) {
				rel := m.Rel
				key := root.Path() + "\x00" + rel
				seen[key] = true
				fi := m.Info
				if fi == nil || !fi.Mode().IsRegular() {
					if fi, err = root.Stat(rel); err != nil {
						continue
					}
				}
				t.mu.Lock()
				old, ok := t.files[key]
				t.mu.Unlock()
				if ok && old.size == fi.Size() && old.mtime.Equal(fi.ModTime()) {
					continue
				}
				c, n, err := answer.CountSecretsInFile(ctx, det, root, rel, old.FileCount)
				if ctx.Err() != nil {
					root.Close()
					return
				}
				if err != nil { // gone since the listing, or unreadable: none counted
					c = answer.FileCount{Kinds: map[string]int{}}
				}
				read++
				bytes += n
				fs := fileSecrets{size: fi.Size(), mtime: fi.ModTime(), FileCount: c}
				t.mu.Lock()
				t.files[key] = fs
				t.mu.Unlock()
			}
			if !gens.Holds(root.ID()) {
				t.mu.Lock()
				delete(t.held, root.Path())
				t.mu.Unlock()
			} else if stamp, logs := d.heldStamp(ctx, root); stamp != "" {
				t.mu.Lock()
				old := t.held[root.Path()]
				t.mu.Unlock()
				if old.stamp != stamp {
					heldCounted++
					hs, n, err := d.countHeld(ctx, det, root, old, stamp, logs)
					heldRead += n
					if ctx.Err() != nil {
						root.Close()
						return
					}
					if err != nil {
						// Counted again at the next pass, the old count kept.
						d.log.Warn("the spool's lines of a root were not read for credentials", "root", root.Path(), "err", err)
					} else {
						t.mu.Lock()
						t.held[root.Path()] = hs
						t.mu.Unlock()
					}
				}
			}
			root.Close()
		}
	}
	t.mu.Lock()
	dropped := 0
	for k := range t.files {
		if root, _, _ := strings.Cut(k, "\x00"); !seen[k] && (only == nil || only[root]) {
			delete(t.files, k)
			dropped++
		}
	}
	t.at = time.Now()
	t.mu.Unlock()
	if read > 0 || dropped > 0 || heldCounted > 0 {
		if err := t.save(filepath.Join(d.cfg.StateDir, tallyFile)); err != nil {
			d.log.Warn("the credentials' tally is not kept for the next start", "err", err)
		}
	}
	if only == nil && (read > 0 || heldCounted > 0) {
		// What reading the logs left goes back to the system: the first
		// count runs once a catch-up is done, and the daemon is idle
		// after it (it held 95 MiB after 10,000 sessions, 66 with this).
		// Not after a pass of changed roots: it reads what they gained,
		// little, and a forced collection would be a cost of each change.
		debug.FreeOSMemory()
	}
	// Said at info when it read something: what finding credentials
	// costs beside the catch-up (make bench compares the two).
	log := d.log.Debug
	if only == nil && (read > 0 || heldRead > 0) {
		log = d.log.Info
	}
	log("counted the credentials in the agents' memory", "files_read", read, "bytes", bytes, "held_lines_read", heldRead,
		"took", time.Since(start).Round(time.Millisecond).String(), "cpu_seconds", fmt.Sprintf("%.2f", cpuSeconds()-cpuStart))
}

// heldStamp sums up a root's logs in the spool (their ids, sequence
// numbers, generations and whether they are gone): it changes when its
// held lines may. The logs come with it.
func (d *Daemon) heldStamp(ctx context.Context, root *confine.Root) (string, []spool.Log) {
	logs, err := d.spool.Logs(ctx, root.ID())
	if err != nil {
		return "", nil
	}
	var b strings.Builder
	for _, l := range logs {
		fmt.Fprintf(&b, "%d:%s;", l.ID, l.Stamp())
	}
	return b.String(), logs
}

// countHeld counts the credentials in the held lines of a root's logs
// whose stamp changed since old: a log that only gained lines (a
// database's conversation going on, a deleted log's late lines) is read
// from where its count stopped; one newly gone or rewritten, whole; a
// live log never rewritten holds none. It returns the count and how many
// lines it read.
func (d *Daemon) countHeld(ctx context.Context, det *secrets.Detector, root *confine.Root, old heldSecrets, stamp string, logs []spool.Log) (heldSecrets, int, error) {
	hs := heldSecrets{stamp: stamp, kinds: map[string]int{}, logs: map[int64]heldLog{}}
	var changed []spool.Log
	after := map[int64]int64{}
	for _, l := range logs {
		o, counted := old.logs[l.ID]
		switch {
		case counted && o.stamp == l.Stamp():
			hs.logs[l.ID] = o // unchanged since it was counted
		case l.HoldsLines():
			changed = append(changed, l)
			kinds := map[string]int{}
			if seq, grown := l.GrownSince(o.stamp); counted && grown {
				after[l.ID] = seq
				maps.Copy(kinds, o.kinds)
			}
			hs.logs[l.ID] = heldLog{stamp: l.Stamp(), kinds: kinds}
		}
	}
	read := 0
	var buf []byte
	err := d.spool.HeldOfLogs(ctx, root.ID(), changed, func(l spool.Log) int64 { return after[l.ID] }, func(h spool.HeldLine) error {
		read++
		for _, f := range det.FindLine(h.Data, &buf) {
			hs.logs[h.Log].kinds[f.Rule]++
		}
		return ctx.Err()
	})
	if err != nil {
		return heldSecrets{}, read, err
	}
	for _, l := range hs.logs {
		for k, n := range l.kinds {
			hs.kinds[k] += n
		}
	}
	return hs, read, nil
}

// status sums the counts of the roots reach says the caller may see.
func (t *secretTally) status(reach func(root string) bool) *control.SecretsStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at.IsZero() {
		return nil
	}
	st := &control.SecretsStatus{Kinds: map[string]int{}, At: t.at}
	for key, fs := range t.files {
		root, _, _ := strings.Cut(key, "\x00")
		if !reach(root) {
			continue
		}
		for _, kinds := range []map[string]int{fs.Kinds, fs.Partial} {
			for k, n := range kinds {
				st.Kinds[k] += n
				st.Found += n
			}
		}
	}
	for root, hs := range t.held {
		if !reach(root) {
			continue
		}
		for k, n := range hs.kinds {
			st.Kinds[k] += n
			st.Found += n
		}
	}
	return st
}
