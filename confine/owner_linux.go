package confine

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// Acting as the owner.
//
// memwatch runs as root; an agent's root belongs to an unprivileged user.
// Every file operation on a root runs with that user's file-system
// identity, so the kernel, not memwatch, decides what it may touch: search
// permission on every directory of a path, read and write permission,
// leases, who owns what is created. A root-only directory inside the
// agent's tree, a symlink the agent swapped in, a database path that now
// leads elsewhere: the open fails exactly as it would for the agent.
//
// How: the operation's goroutine is locked to its OS thread, and that
// thread's file-system uid and gid and supplementary groups are set to the
// owner's (setfsuid, setfsgid, setgroups act on the calling thread only,
// and setting a non-zero fsuid drops the thread's file capabilities:
// CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER, ...). The identity is restored
// before the thread is unlocked. The Go runtime never starts a thread from
// a locked one (it uses its template thread), so no other thread inherits
// the identity.
//
// Why a thread and not a worker process per owner: the operations are
// fine-grained (an open, a rename, an exchange, a read of a lease) and sit
// on the safe rewrite's critical path between a check and an exchange; a
// process would put an IPC round trip and a protocol between them, and the
// SQLite connection of an app's database would live in another process.
// The thread gets the same kernel checks for file access. What it does not
// get is a separate address space: a bug that does a file operation outside
// confine would run as root. The name checks of this package stay as the
// second layer.

// actAs runs fn with id's file-system identity on the calling thread when
// memwatch is root and id is not; otherwise fn runs as memwatch is (an
// unprivileged memwatch is its own user already: the kernel checks it).
func actAs(id Identity, fn func() error) error {
	if id.UID == 0 || unix.Geteuid() != 0 {
		return fn()
	}
	runtime.LockOSThread()
	if cur, _ := unix.SetfsuidRetUid(-1); cur == id.UID {
		// Nested: this thread acts as id already.
		defer runtime.UnlockOSThread()
		return fn()
	}
	groups, err := unix.Getgroups()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("act as uid %d: read memwatch's groups: %w", id.UID, err)
	}
	restore := func() {
		unix.SetfsuidRetUid(0)
		unix.SetfsgidRetGid(unix.Getegid())
		err := unix.Setgroups(groups)
		if cur, _ := unix.SetfsuidRetUid(-1); cur != 0 || err != nil {
			// Never let a thread with another identity run anything else:
			// with CAP_SETUID this cannot happen.
			panic(fmt.Sprintf("memwatch cannot restore its file-system identity after acting as uid %d (fsuid %d, setgroups: %v)", id.UID, cur, err))
		}
		runtime.UnlockOSThread()
	}
	want := append([]int{id.GID}, id.Groups...)
	if err := unix.Setgroups(slices.Compact(want)); err != nil {
		restore()
		return fmt.Errorf("act as uid %d: set groups: %w (memwatch needs CAP_SETGID)", id.UID, err)
	}
	unix.SetfsgidRetGid(id.GID)
	unix.SetfsuidRetUid(id.UID)
	if cur, _ := unix.SetfsuidRetUid(-1); cur != id.UID {
		restore()
		return fmt.Errorf("act as uid %d: %w (memwatch needs CAP_SETUID)", id.UID, errors.ErrUnsupported)
	}
	defer restore()
	return fn()
}
