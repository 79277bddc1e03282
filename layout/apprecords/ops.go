package apprecords

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/rewrite"
	"github.com/memwatch/memwatch/state"
)

// Remove deletes an app's records (all of them when ids is empty: purge),
// journaling each with its full content first so undo can restore it. It
// returns how many were deleted. A record of another app is never touched,
// nor one over max_record_size (which cannot be journaled whole: an
// explicit id of one is an error, a purge leaves it and says so).
func Remove(ctx context.Context, journal *state.DB, store string, root *confine.Root, table, app string, ids []int64, reason string) (int, error) {
	db, err := Open(ctx, root, table, false)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	path := root.Path()
	dev, ino := rootID(root)
	remove := func(r Record) error {
		rd := rowData{Table: table, Row: r}
		var err error
		if rd.Cols, rd.Literals, err = db.Literals(ctx, r.ID); err != nil {
			return err
		}
		data, _ := json.Marshal(rd)
		rec := &state.Record{Store: store, Root: path, Rule: RuleDelete, Target: fmt.Sprintf("%s/%s/%d", table, app, r.ID),
			BeforeSHA: rewrite.Hash([]byte(r.Content)), BeforeSize: int64(len(r.Content)), Outcome: state.Pending, Reason: reason, Data: data,
			RootDev: dev, RootIno: ino}
		if _, err := journal.Append(ctx, rec); err != nil {
			return err
		}
		if err := db.Delete(ctx, r); err != nil {
			rec.Outcome, rec.Reason = state.Failed, err.Error()
			return errors.Join(err, journal.Update(context.WithoutCancel(ctx), rec))
		}
		rec.Outcome = state.Done
		return journal.Update(context.WithoutCancel(ctx), rec)
	}
	n := 0
	if len(ids) > 0 {
		for _, id := range ids {
			r, ok, err := db.Get(ctx, id)
			if err != nil {
				return n, err
			}
			if !ok || r.AppID != app {
				return n, fmt.Errorf("%w: no record %d for app %s", ErrNotFound, id, app)
			}
			if r.Oversize {
				return n, fmt.Errorf("record %d of app %s is %d bytes: %w; memwatch cannot journal it whole, so it does not remove it (the app can)", r.ID, app, r.Size, ErrOversize)
			}
			if err := remove(r); err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	for {
		rs, err := db.Records(ctx, app) // the oldest max_rows
		if err != nil {
			return n, err
		}
		removed, oversize := 0, 0
		for _, r := range rs {
			if r.Oversize {
				oversize++
				continue
			}
			if err := remove(r); err != nil {
				return n, err
			}
			n++
			removed++
		}
		if removed == 0 {
			if oversize > 0 {
				return n, fmt.Errorf("%d records of app %s are over max_record_size: %w; memwatch cannot journal them whole, so it leaves them (the app can remove them)", oversize, app, ErrOversize)
			}
			return n, nil
		}
	}
}

// ErrNotFound means the record does not exist for that app.
var ErrNotFound = errors.New("record not found")

// IsRowRule reports whether a journal rule changed a database row.
func IsRowRule(rule string) bool {
	return rule == RuleDelete || rule == RuleEdit || rule == RuleCreate
}

// Opener opens the database a journal record names as a root, with its
// store's checks (daemon.RootOpener); nil opens it as a root named on the
// command line.
type Opener func(path string) (*confine.Root, error)

// rootID is a root's identity as the journal records it.
func rootID(r *confine.Root) (dev, ino int64) {
	id := r.ID()
	return int64(id.Dev), int64(id.Ino)
}

// recordDB opens the database of journal record r with open, only if it
// is in the directory the record was made in (when the record says which).
func recordDB(ctx context.Context, r state.Record, table string, open Opener) (*DB, error) {
	if open == nil {
		open = func(p string) (*confine.Root, error) { return confine.OpenFile(p, confine.Options{}) }
	}
	root, err := open(r.Root)
	if err != nil {
		return nil, err
	}
	if dev, ino := rootID(root); r.RootIno != 0 && (dev != r.RootDev || ino != r.RootIno) {
		root.Close()
		return nil, fmt.Errorf("%s: %w (it was moved or replaced since journal record %d)", r.Root, rewrite.ErrRootReplaced, r.ID)
	}
	db, err := Open(ctx, root, table, false)
	if err != nil {
		root.Close()
		return nil, err
	}
	db.owned = root
	return db, nil
}

// Resolve settles a row change left pending by a killed memwatch by
// looking at the row, so the journal agrees with the database.
func Resolve(ctx context.Context, r *state.Record, open Opener) (outcome, reason string) {
	var d rowData
	_ = json.Unmarshal(r.Data, &d)
	if d.Table == "" {
		d.Table = strings.SplitN(r.Target, "/", 2)[0]
	}
	db, err := recordDB(ctx, *r, d.Table, open)
	if err != nil {
		return state.Failed, "interrupted; database unreadable at restart: " + err.Error()
	}
	defer db.Close()
	cur, ok, _ := db.Get(ctx, d.Row.ID)
	switch r.Rule {
	case RuleDelete:
		if ok && cur.Content == d.Row.Content {
			return state.Failed, "interrupted before the delete; row unchanged"
		}
		return state.Done, "completed before memwatch stopped; confirmed at restart"
	case RuleEdit:
		if ok && cur.Content == d.NewContent {
			return state.Done, "completed before memwatch stopped; confirmed at restart"
		}
		return state.Failed, "interrupted before the edit; row unchanged"
	}
	if d.Row.SourceConversationID != "" && db.HasConversation(ctx, d.Row.AppID, d.Row.SourceConversationID) {
		return state.Done, "created before memwatch stopped; confirmed at restart"
	}
	return state.Failed, "interrupted before the record was created"
}

// ErrRowChanged means the row changed since the action; --force overrides.
var ErrRowChanged = errors.New("record changed since this action")

// Undo reverses a row change: a deleted row is inserted again with its id
// and content, an edit is put back, a created row is deleted. It is
// journaled as record-undo.
func Undo(ctx context.Context, journal *state.DB, r state.Record, force bool, open Opener) (int64, error) {
	return undo(ctx, journal, r, force, open)
}

// HoldNS keeps, per database and app, the highest record id when an undo
// restored a deleted record: the limit rule leaves the app alone until a
// newer record arrives, so an undo sticks.
const HoldNS = "records-hold"

func undo(ctx context.Context, journal *state.DB, r state.Record, force bool, open Opener) (int64, error) {
	var d rowData
	if err := json.Unmarshal(r.Data, &d); err != nil || d.Row.ID == 0 {
		return 0, fmt.Errorf("undo %d: the journal has no row data", r.ID)
	}
	db, err := recordDB(ctx, r, d.Table, open)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	cur, exists, err := db.Get(ctx, d.Row.ID)
	if err != nil {
		return 0, err
	}
	rec := &state.Record{Store: r.Store, Root: r.Root, Rule: RuleUndo, Target: r.Target, Outcome: state.Pending,
		Reason: fmt.Sprintf("undo of #%d", r.ID), Data: r.Data, RootDev: r.RootDev, RootIno: r.RootIno}
	var apply func() error
	switch r.Rule {
	case RuleDelete:
		if exists {
			return 0, fmt.Errorf("undo %d: id %d is in use again; nothing restored", r.ID, d.Row.ID)
		}
		apply = func() error {
			if len(d.Cols) > 0 && len(d.Cols) == len(d.Literals) {
				return db.InsertLiterals(ctx, d.Cols, d.Literals)
			}
			_, err := db.Insert(ctx, d.Row) // journaled before whole rows were
			return err
		}
	case RuleEdit:
		if !exists {
			return 0, fmt.Errorf("undo %d: record %d no longer exists", r.ID, d.Row.ID)
		}
		if cur.Content != d.NewContent && !force {
			return 0, fmt.Errorf("undo %d: %w; use --force to restore the old content anyway", r.ID, ErrRowChanged)
		}
		apply = func() error { return db.Edit(ctx, cur, d.Row.Content) }
	case RuleCreate:
		if !exists {
			return 0, fmt.Errorf("undo %d: record %d no longer exists", r.ID, d.Row.ID)
		}
		if cur.Content != d.Row.Content && !force {
			return 0, fmt.Errorf("undo %d: %w; use --force to delete it anyway", r.ID, ErrRowChanged)
		}
		apply = func() error { return db.Delete(ctx, cur) }
	default:
		return 0, fmt.Errorf("undo %d: rule %s is not a row change", r.ID, r.Rule)
	}
	if _, err := journal.Append(ctx, rec); err != nil {
		return 0, err
	}
	if err := apply(); err != nil {
		rec.Outcome, rec.Reason = state.Failed, err.Error()
		return rec.ID, errors.Join(err, journal.Update(context.WithoutCancel(ctx), rec))
	}
	if r.Rule == RuleDelete {
		// The restored record stays: the limit waits for the app's next record.
		if top, err := db.MaxID(ctx, d.Row.AppID); err == nil {
			if err := journal.Put(ctx, HoldNS, r.Root+"\x00"+d.Row.AppID, []byte(strconv.FormatInt(top, 10))); err != nil {
				rec.Reason += "; could not remember to hold the limit (" + err.Error() + ")"
			}
		}
		rec.Reason += "; kept: limit_per_app applies again when the app gets a new record"
	}
	rec.Outcome = state.Done
	return rec.ID, journal.Update(context.WithoutCancel(ctx), rec)
}
