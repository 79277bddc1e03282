// Package socket is where the daemon listens for its clients: a unix
// socket in a directory no other user can change.
package socket

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/memwatch/memwatch/control"
)

// The control socket is how root's CLI talks to the daemon, so nobody else
// may put a socket of their own at its path. Its directory must be
// memwatch's own (created by it, or owned by the user it runs as) and
// writable by nobody else, and every directory above it must be one no
// other user can rename entries in (owned by root or memwatch's user, and
// writable by others only with the sticky bit, as /tmp). The socket is
// bound in a private directory beside it, given its mode there, and
// renamed into place: it is never reachable with another mode.

// ErrUnsafeDir means another user could replace the control socket.
var ErrUnsafeDir = errors.New("another user could replace the control socket there")

// CheckDir reports why dir (which exists) is not safe for the
// control socket, naming the fix.
func CheckDir(dir string) error {
	me := os.Geteuid()
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("control socket directory %s is a symbolic link: %w (set control.socket to a directory memwatch owns, or remove the link)", dir, ErrUnsafeDir)
	case !fi.IsDir():
		return fmt.Errorf("control socket directory %s is not a directory", dir)
	case int(st.Uid) != me && st.Uid != 0:
		return fmt.Errorf("control socket directory %s belongs to uid %d, not to memwatch (uid %d): %w (remove it and let memwatch create it, or set control.socket elsewhere)", dir, st.Uid, me, ErrUnsafeDir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("control socket directory %s is writable by others (mode %v): %w (chmod go-w %s, or set control.socket elsewhere)", dir, fi.Mode().Perm(), ErrUnsafeDir, dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if p, uid, mode, ok := control.ParentNotOwned(abs, me); !ok {
		return fmt.Errorf("control socket directory %s: %s above it belongs to uid %d (mode %v), who could rename it: %w (set control.socket to a directory under one only root or memwatch can change)", dir, p, uid, mode, ErrUnsafeDir)
	}
	return nil
}

// Listen listens on the socket sock with mode, in a directory checked
// by CheckDir (created with dirMode when missing). The socket is
// bound in a private directory beside it and renamed over sock, replacing
// a stale one atomically.
func Listen(sock string, dirMode, sockMode os.FileMode) (*net.UnixListener, error) {
	dir := filepath.Dir(sock)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, ".memwatch-sock-")
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", sock, err)
	}
	defer os.RemoveAll(tmp)
	at := filepath.Join(tmp, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: at, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", sock, err)
	}
	l.SetUnlinkOnClose(false) // it is renamed; stopping removes sock
	if err := os.Chmod(at, sockMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod control socket: %w", err)
	}
	// Only a socket (a stale one of ours: the state lock is held) is
	// replaced; anything else at the path is a mistake to report.
	if fi, err := os.Lstat(sock); err == nil && fi.Mode()&os.ModeSocket == 0 {
		l.Close()
		return nil, fmt.Errorf("listen on control socket %s: something that is not a socket is there; remove it", sock)
	}
	if err := os.Rename(at, sock); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on control socket %s: %w", sock, err)
	}
	return l, nil
}
