package answer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/spool"
)

// TallyFile, in the daemon's state directory, keeps its tally of the
// credentials in the agents' memory between runs: a start counts again
// only what changed since (a home of 300 MiB of sessions took 10 CPU-s
// to count whole, at every start), and `memwatch secrets` reads only the
// files it says hold some or changed since.
const TallyFile = "secrets-tally.json"

// maxTallyFile bounds what is read of TallyFile (a million files' counts
// fit in it).
const maxTallyFile = 256 << 20

// SavedTally is TallyFile's content: counts by kind, no secret.
type SavedTally struct {
	Version int `json:"version"`
	// Detector is the secrets.Fingerprint of the detector that counted:
	// a tally of another (memwatch upgraded, its rules or its reading of
	// a line changed) is counted again, or unchanged files would keep
	// what the old one found.
	Detector string               `json:"detector"`
	At       time.Time            `json:"at"`
	Files    map[string]SavedFile `json:"files"` // by root, NUL, path
	Held     map[string]SavedHeld `json:"held"`  // by root
}

// SavedFile is a file's count, as of its size and time then.
type SavedFile struct {
	Size  int64          `json:"size"`
	Mtime time.Time      `json:"mtime"`
	Kinds map[string]int `json:"kinds"`
	// Where the count stopped (a tally saved without them counts each
	// file whole once more).
	Dev     uint64         `json:"dev,omitempty"`
	Ino     uint64         `json:"ino,omitempty"`
	End     int64          `json:"end,omitempty"`
	Sum     uint64         `json:"sum,omitempty"`
	Partial map[string]int `json:"partial,omitempty"`
}

// SavedHeld is the count of a root's held lines, by log.
type SavedHeld struct {
	Stamp string                 `json:"stamp"`
	Kinds map[string]int         `json:"kinds"`
	Logs  map[int64]SavedHeldLog `json:"logs,omitempty"`
}

// SavedHeldLog is one held log's count.
type SavedHeldLog struct {
	Stamp string         `json:"stamp"`
	Kinds map[string]int `json:"kinds"`
}

// ReadTally reads the tally saved at path: nil when there is none, an
// error when it does not decode or another detector counted it (it is
// to be counted again).
func ReadTally(path string) (*SavedTally, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the credentials' tally: %w", err)
	}
	defer f.Close()
	var saved SavedTally
	if err := json.NewDecoder(io.LimitReader(f, maxTallyFile)).Decode(&saved); err != nil || saved.Version != 1 || saved.Detector != secrets.Fingerprint() {
		switch {
		case err != nil:
		case saved.Version != 1:
			err = fmt.Errorf("version %d", saved.Version)
		default:
			err = fmt.Errorf("made by another detector (%q, this one %s)", saved.Detector, secrets.Fingerprint())
		}
		return nil, fmt.Errorf("read the credentials' tally %s: %w (counting again)", path, err)
	}
	return &saved, nil
}

// NoneIn reports whether the tally counted no credential in the file rel
// of root as it is now (fi: the same size and time).
func (t *SavedTally) NoneIn(root, rel string, fi fs.FileInfo) bool {
	if t == nil || fi == nil {
		return false
	}
	f, ok := t.Files[root+"\x00"+rel]
	if !ok || f.Size != fi.Size() || !f.Mtime.Equal(fi.ModTime()) {
		return false
	}
	for _, n := range f.Kinds {
		if n > 0 {
			return false
		}
	}
	for _, n := range f.Partial {
		if n > 0 {
			return false
		}
	}
	return true
}

// NoneHeldIn reports whether t counted no credential in the held lines of
// the log l of root as l is now (its stamp unchanged since).
func (t *SavedTally) NoneHeldIn(root string, l spool.Log) bool {
	if t == nil {
		return false
	}
	h, ok := t.Held[root].Logs[l.ID]
	if !ok || h.Stamp != l.Stamp() {
		return false
	}
	for _, n := range h.Kinds {
		if n > 0 {
			return false
		}
	}
	return true
}

// heldUnvouched reads, of a root's held lines, those of the logs t
// cannot vouch for (NoneHeldIn): a home's thousands of deleted sessions,
// counted none in, are not read again.
func (t *SavedTally) heldUnvouched(sp *spool.Spool) HeldFunc {
	return func(ctx context.Context, root *confine.Root, fn func(spool.HeldLine) error) error {
		logs, err := sp.Logs(ctx, root.ID())
		if err != nil {
			return err
		}
		var read []spool.Log
		for _, l := range logs {
			if l.HoldsLines() && !t.NoneHeldIn(root.Path(), l) {
				read = append(read, l)
			}
		}
		return sp.HeldOfLogs(ctx, root.ID(), read, func(spool.Log) int64 { return 0 }, fn)
	}
}
