package control

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// What a command may believe of the files around it.
//
// memwatch's commands run as root beside users who choose their own
// environment and can hand it to root (su without -, sudo -E): an
// $XDG_RUNTIME_DIR, a $MEMWATCH_POLICY, a $MEMWATCH_STATE_DIR of theirs.
// A command believes an announcement, loads a policy and opens a state
// directory only when no other user could have made or changed it: it
// belongs to the command's user or to root, and is writable by no one
// else. As root, every directory above it must be so too (or have the
// sticky bit, as /tmp), since whoever may rename an entry of a parent
// chooses what the path names.

// ErrNotOwned means a file or directory another user could have made or
// changed.
var ErrNotOwned = errors.New("another user could have made or changed it")

// CheckOwned reports why path (a file or a directory) is not one this
// process may believe (see above); nil when it is. A path that does not
// exist is nothing to believe yet: what creates it checks again after.
func CheckOwned(path string) error {
	me := os.Geteuid()
	fi, err := os.Stat(path)
	missing := errors.Is(err, fs.ErrNotExist)
	switch {
	case missing && me != 0:
		return nil
	case err != nil && !missing:
		return err
	case !missing:
		if err := ownedBy(path, fi, me, me == 0); err != nil {
			return err
		}
		if me != 0 {
			return nil
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	// As root, the directories above it (above where it would be made).
	if p, uid, mode, ok := parentNotOwned(abs, 0); !ok {
		return fmt.Errorf("%s: %w: %s above it belongs to uid %d (mode %v), who could rename it; as root memwatch uses only what root alone can change", path, ErrNotOwned, p, uid, mode)
	}
	return nil
}

// ParentNotOwned finds the first directory above path (absolute) that a
// user other than root or owners could rename entries of: one another
// user owns, or writable by others without the sticky bit (as /tmp has);
// ok when there is none. Directories that do not exist yet are skipped:
// what makes them makes them its own.
func ParentNotOwned(path string, owners ...int) (dir string, uid uint32, mode fs.FileMode, ok bool) {
	return parentNotOwned(path, owners...)
}

func parentNotOwned(abs string, owners ...int) (string, uint32, fs.FileMode, bool) {
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) && p != filepath.Dir(p) {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return p, 0, 0, false
		}
		st := fi.Sys().(*syscall.Stat_t)
		owned := st.Uid == 0
		for _, o := range owners {
			owned = owned || int(st.Uid) == o
		}
		if !owned || fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return p, st.Uid, fi.Mode().Perm(), false
		}
		if p == filepath.Dir(p) {
			return "", 0, 0, true
		}
	}
}

// ownedBy checks one file: it belongs to me or root and is writable by no
// one else (by its group too when strict).
func ownedBy(path string, fi fs.FileInfo, me int, strict bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	writable := fs.FileMode(0o002)
	if strict {
		writable = 0o022
	}
	switch {
	case int(st.Uid) != me && st.Uid != 0:
		return fmt.Errorf("%s belongs to uid %d, neither you (uid %d) nor root: %w; memwatch does not use it", path, st.Uid, me, ErrNotOwned)
	case fi.Mode().Perm()&writable != 0:
		return fmt.Errorf("%s is writable by others (mode %v): %w; run chmod go-w %s", path, fi.Mode().Perm(), ErrNotOwned, path)
	}
	return nil
}
